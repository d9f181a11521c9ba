#!/usr/bin/env bash
# tools/blas_kernel.sh names the OpenBLAS kernel that fits a CPU's flags, and `make run` launches
# its ranks with it only when OPENBLAS_CORETYPE is unset (this test leaves the variable as CI gave
# it and checks whichever case that is).
# usage: tests/bench/blas_kernel.sh REPO WORK_DIR
set -uo pipefail
repo=${1:?usage: blas_kernel.sh REPO WORK_DIR}
work=${2:?}
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" && exit 1; }

kernel_for() {  # kernel_for FLAGS...: the script's answer for a CPU with these flags
  printf 'processor\t: 0\nflags\t\t: %s\n' "$*" >"$work/cpuinfo"
  bash "$repo/tools/blas_kernel.sh" "$work/cpuinfo"
}
expect() {  # expect KERNEL FLAGS...
  local want=$1 got
  shift
  got=$(kernel_for "$@") || fail "the script failed for flags: $*"
  [[ $got == "$want" ]] || fail "flags '$*': got '$got', expected '$want'"
}
expect SkylakeX fpu sse2 avx avx2 fma avx512f avx512dq avx512bw avx512vl
expect Haswell fpu sse2 avx avx2 fma avx512f avx512pf avx512er avx512cd  # Knights Landing: no BW/VL
expect Haswell fpu avx avx2 fma avx512f avx512dq avx512bw  # no VL
expect Haswell fpu avx avx2 fma avx512f_lookalike avx512bwx
expect "" fpu sse2 avx avx2  # no FMA
expect "" fpu sse2 sse4_2
printf 'processor\t: 0\nFeatures\t: fp asimd sve\n' >"$work/cpuinfo"  # AArch64: no "flags" line
off_x86=$(bash "$repo/tools/blas_kernel.sh" "$work/cpuinfo") || fail "the script failed off x86-64"
[[ -z $off_x86 ]] || fail "a kernel named off x86-64: $off_x86"
echo "kernel for this CPU: '$(bash "$repo/tools/blas_kernel.sh")'"

# The Makefile's run recipe (a dry run: nothing is built or started).
run_lines() { make -n -s -C "$repo" run "$@" 2>/dev/null | grep -E 'mpirun|trident generate'; }
chosen=$(run_lines BLAS_KERNEL=SkylakeX)
echo "$chosen"
grep -q -- '^mpirun .* -x OPENBLAS_CORETYPE=SkylakeX .*trident train' <<<"$chosen" ||
  fail "the ranks are not launched with the chosen kernel"
grep -q '^OPENBLAS_CORETYPE=SkylakeX .*trident generate' <<<"$chosen" ||
  fail "the sample is not drawn with the chosen kernel"
! run_lines BLAS_KERNEL=auto | grep OPENBLAS_CORETYPE >/dev/null || fail "BLAS_KERNEL=auto set a kernel"
default=$(run_lines)
if [[ -n ${OPENBLAS_CORETYPE-} ]]; then
  ! grep -q -- '-x OPENBLAS_CORETYPE' <<<"$default" ||
    fail "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE is set, yet make run chose a kernel"
  echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE from the environment is kept"
else
  fitting=$(bash "$repo/tools/blas_kernel.sh")
  if [[ -n $fitting ]]; then
    grep -q -- "-x OPENBLAS_CORETYPE=$fitting " <<<"$default" ||
      fail "OPENBLAS_CORETYPE is unset, yet make run does not launch with $fitting"
  else
    ! grep -q OPENBLAS_CORETYPE <<<"$default" || fail "a kernel set on a CPU that fits none"
  fi
  echo "OPENBLAS_CORETYPE unset: make run launches with '$fitting'"
fi
echo OK
