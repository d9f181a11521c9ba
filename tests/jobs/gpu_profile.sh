#!/usr/bin/env bash
# The gpu-cluster site profile: runs the CUDA build unless TRIDENT names a program, and fences
# phases in every step unless SETS says otherwise (run.phase_fences), keeping the user's SETS.
# usage: gpu_profile.sh SOURCE_DIR
set -euo pipefail
profile=$(realpath "$1")/jobs/machines/gpu-cluster/profile.sh
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# settings [VAR=VALUE ...]: TRIDENT and SETS after the profile, in a clean shell
settings() {
  env -i PATH=/usr/bin:/bin TRIDENT_ROOT=/site/trident "$@" \
    bash -c 'source "$0" && printf "%s|%s\n" "$TRIDENT" "${SETS-}"' "$profile"
}
got=$(settings)
[[ $got == "/site/trident/build-cuda/src/trident|run.phase_fences=every_step" ]] ||
  fail "defaults: $got"
got=$(settings TRIDENT=/opt/trident SETS="precision.compute=bf16")
[[ $got == "/opt/trident|precision.compute=bf16 run.phase_fences=every_step" ]] ||
  fail "TRIDENT and SETS given: $got"
got=$(settings SETS="run.phase_fences=profiled precision.compute=bf16")
[[ $got == "/site/trident/build-cuda/src/trident|run.phase_fences=profiled precision.compute=bf16" ]] ||
  fail "SETS naming run.phase_fences: $got"
echo "ok   gpu-cluster profile: the CUDA build, phase fences every step, the user's TRIDENT and SETS win"
