# Sourced first by hf_checkpoints.sh, hf_llama.sh and hf_mixtral.sh: arguments, a work folder, fail, quiet, logits error, greedy and re-export checks, hostile imports.
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

# greedy_matches MODEL DIR CKPT PROMPT N: `generate --top-k 1` from CKPT appends to PROMPT the N
# bytes MODEL's float64 reference (hf_files.py or hf_llama.py greedy) appends reading DIR; sets
# greedy_tokens to them as hex.
greedy_matches() {
  local model=$1 dir=$2 ckpt=$3 prompt=$4 n=$5 want
  want=$($model greedy "$dir" "$prompt" "$n") || fail "the reference"
  greedy_tokens=$("$trident" generate --ckpt "$ckpt" --prompt "$prompt" --tokens "$n" --top-k 1 \
    2>/dev/null | head -c $((${#prompt} + n)) | tail -c "$n" | od -An -tx1 | tr -d ' \n')
  [ "$greedy_tokens" = "$want" ] ||
    fail "greedy tokens differ: trident $greedy_tokens, reference $want"
}

# reexport CKPT NAME MODEL PROMPT: a trained checkpoint exported to $work/NAME_hf, re-imported and
# exported again must give the same files byte for byte (MODEL compare: hf_llama.py or
# hf_files.py), and trident's logits after PROMPT from CKPT must match MODEL's float64 reference
# reading the export (logits_match); sets reexport_error to their relative error.
reexport() {
  local ckpt=$1 name=$2 model=$3 prompt=$4
  "$trident" ckpt export "$ckpt" --hf "$work/${name}_hf" >/dev/null || fail "exporting $name"
  "$trident" ckpt import --hf "$work/${name}_hf" --out "$work/${name}_again.h5" >/dev/null ||
    fail "re-importing the $name export"
  "$trident" ckpt export "$work/${name}_again.h5" --hf "$work/${name}_hf_again" >/dev/null ||
    fail "exporting the re-import of $name"
  $model compare "$work/${name}_hf" "$work/${name}_hf_again" >/dev/null ||
    fail "the re-import of the $name export exports differently"
  logits_match "$model" "$work/${name}_hf" "$ckpt" "$prompt" "$name"
  reexport_error=$logits_error
}

# logits_match MODEL DIR CKPT PROMPT NAME: trident's next-token logits after PROMPT from CKPT
# within 1e-5 (relative to the largest) of MODEL's float64 reference (`logits`) reading DIR; sets
# logits_error (files $work/NAME.trident and $work/NAME.ref).
logits_match() {
  local model=$1 dir=$2 ckpt=$3 prompt=$4 name=$5
  "$trident" generate --ckpt "$ckpt" --prompt "$prompt" --print-logits \
    >"$work/$name.trident" 2>/dev/null || fail "trident generate --print-logits ($name)"
  $model logits "$dir" "$prompt" >"$work/$name.ref" || fail "the reference logits ($name)"
  logits_error=$(relative_error "$work/$name.trident" "$work/$name.ref" 1e-5) ||
    fail "logits differ from the reference by ${logits_error:-?} (relative, $name)"
}

# hostile_refused CASES DIR MIN: each "<case>\t<text>" line of CASES names a directory DIR/<case>
# that `trident ckpt import` must refuse under a 4 GiB address-space limit: exit 2, the error
# containing the text, no DIR/<case>.h5 written. Fails unless all are and there are MIN or more.
# The bound on what an import may allocate: 4 GiB of address space, or in an AddressSanitizer build
# (make build-sanitize), whose shadow memory cannot start under ulimit -v, ASan's own largest
# allocation (a larger one is an error, exit 1).
bound="ulimit -v 4194304"
if ldd "$trident" | grep libasan > /dev/null; then
  bound=true
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:exitcode=1}:max_allocation_size_mb=4096
fi
hostile_refused() {
  local cases=0 name expect out rc
  while IFS=$'\t' read -r name expect; do
    out=$( ($bound; "$trident" ckpt import --hf "$2/$name" --out "$2/$name.h5") 2>&1)
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
