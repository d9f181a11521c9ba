# Sourced first by hf_checkpoints.sh and hf_llama.sh: arguments, a fresh work folder, fail, quiet, logits error, hostile imports.
# usage: source hf_common.sh TRIDENT_EXE SOURCE_DIR WORK_DIR
# Sets trident, src, work and check (check_run.py); empties WORK_DIR and runs in SOURCE_DIR.
set -uo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
quiet() { grep -v '^ *Kokkos::\|^  *Detected\|^  *Requested' || true; }

# relative_error TRIDENT REF [LIMIT]: prints max|trident - reference| / max|reference| over the
# 256 logits of two files, one a line (3 significant digits); with LIMIT, exits 1 when the
# unrounded error is above it.
relative_error() {
  /usr/bin/python3 -c 'import sys, numpy as np
t, r = np.loadtxt(sys.argv[1]), np.loadtxt(sys.argv[2])
assert t.shape == r.shape == (256,), f"logits shapes {t.shape} and {r.shape}"
e = np.abs(t - r).max() / np.abs(r).max()
print(f"{e:.3g}")
sys.exit(int(len(sys.argv) > 3 and e > float(sys.argv[3])))' "$@"
}

# hostile_refused CASES DIR MIN: each "<case>\t<text>" line of CASES names a directory DIR/<case>
# that `trident ckpt import` must refuse under a 4 GiB address-space limit: exit 2, the error
# containing the text, no DIR/<case>.h5 written. Fails unless all are and there are MIN or more.
hostile_refused() {
  local cases=0 name expect out rc
  while IFS=$'\t' read -r name expect; do
    out=$( (ulimit -v 4194304; "$trident" ckpt import --hf "$2/$name" --out "$2/$name.h5") 2>&1)
    rc=$?
    [ $rc = 2 ] || fail "$name: exit $rc, not 2: $(quiet <<<"$out" | tail -n 2)"
    grep -qF -- "$expect" <<<"$out" ||
      fail "$name: the error does not say '$expect': $(quiet <<<"$out")"
    [ ! -e "$2/$name.h5" ] || fail "$name: a checkpoint was written"
    cases=$((cases + 1))
  done <"$1"
  ((cases >= $3)) || fail "only $cases hostile cases"
  echo "$cases hostile directories refused with exit 2, each naming its cause"
}
