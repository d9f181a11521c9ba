#!/usr/bin/env bash
# Crafted checkpoints (crafted_checkpoints.py: one defect each) against every reader: `ckpt info`,
# `verify`, `export`, `generate` and `train --resume` each exit 0 (a reader that does not read
# the field) or 2 with a message naming the field; none crashes, hangs or outgrows a memory
# bound (ulimit -v); verify and resume refuse every case, as they read the same fields;
# `--resume auto` skips such a file when it is the newest, naming it.
# With a 4th argument `sanitized`, TRIDENT is a sanitizer build (make build-sanitize): the same
# corpus, every reader stopping at the first AddressSanitizer or UBSan error (exit 1, which fails
# the case), without the address-space bound, which AddressSanitizer's shadow memory cannot run
# under.
set -uo pipefail
trident=$1 src=$2 work=$3 mode=${4-}
rm -rf "$work" && mkdir -p "$work/cases" && cd "$src"
fail() { echo "FAIL: $*" >&2; exit 1; }  # stderr: read_case runs in $(...)
export OMP_NUM_THREADS=1
memory_kb=$((4 << 20))  # 4 GiB of address space: the tiny model's readers need far less
bound="ulimit -v $memory_kb"
if [ "$mode" = sanitized ]; then
  bound=true
  # OpenMPI and HDF5 keep allocations until exit: no leak report; everything else is an error.
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # grep reads all of ldd's output: with -q it may exit first, and pipefail would see SIGPIPE.
  ldd "$trident" | grep libasan >/dev/null || fail "$trident is not an AddressSanitizer build"
fi
run=(--config inputs/tiny.toml --set run.steps=2 --set run.checkpoint_every=2 --set run.eval_every=0)
"$trident" train "${run[@]}" --set run.out_dir="$work/valid" > "$work/valid.log" 2>&1 ||
  fail "the tiny run that writes the valid checkpoint"
valid=$work/valid/tiny/checkpoints/step_000002.h5
/usr/bin/python3 tests/e2e/crafted_checkpoints.py "$valid" "$work/cases" > "$work/cases.txt" ||
  fail "crafted_checkpoints.py"
# read CASE FIELD NAME COMMAND...: runs one reader on a case; prints its exit status
read_case() {
  local case=$1 field=$2 name=$3
  shift 3
  local log=$work/$case.$name.log rc
  ($bound && timeout 60 "$@" > "$log" 2>&1)
  rc=$?
  if [ $rc = 2 ]; then
    # An attribute or dataset is named in quotes (a group, or a dataset inside it), a config key
    # as "key = value".
    grep -qE "'$field(/[^']*)?'|(^|[ .])$field = " "$log" ||
      fail "$name on $case: exit 2 without naming $field: $(tail -1 "$log")"
  elif [ $rc != 0 ]; then
    fail "$name on $case: exit $rc (crash, hang or memory bound): $(tail -3 "$log")"
  fi
  echo $rc
}
cases=0
while read -r case field; do
  file=$work/cases/$case.h5
  info=$(read_case "$case" "$field" info "$trident" ckpt info "$file") || exit 1
  verify=$(read_case "$case" "$field" verify "$trident" ckpt verify "$file") || exit 1
  generate=$(read_case "$case" "$field" generate "$trident" generate --ckpt "$file" --tokens 4) ||
    exit 1
  export=$(read_case "$case" "$field" export "$trident" ckpt export "$file" \
    --llmc "$work/$case.llmc.bin") || exit 1
  resume=$(read_case "$case" "$field" resume "$trident" train "${run[@]}" \
    --set run.out_dir="$work/resume.$case" --resume "$file") || exit 1
  [ "$verify" = 2 ] && [ "$resume" = 2 ] ||
    fail "$case: verify exited $verify and resume $resume; both must refuse it"
  echo "ok   $case: info $info, verify $verify, generate $generate, export $export, resume $resume"
  cases=$((cases + 1))
done < "$work/cases.txt"
[ $cases -ge 65 ] || fail "only $cases crafted cases"
# --resume auto skips, and names, a newest checkpoint whose metadata fails validation.
mkdir -p "$work/auto/tiny/checkpoints"
cp "$valid" "$work/auto/tiny/checkpoints/step_000002.h5"
cp "$work/cases/loss_scale_nan.h5" "$work/auto/tiny/checkpoints/step_000004.h5"
"$trident" train "${run[@]}" --set run.out_dir="$work/auto" --resume auto \
  > "$work/auto.log" 2>&1 || fail "--resume auto with an invalid newest checkpoint: $(tail -2 "$work/auto.log")"
grep -q "^--resume auto: skipping .*step_000004.h5.*'loss_scale'" "$work/auto.log" ||
  fail "--resume auto did not name the invalid checkpoint it skipped"
grep -q "step_000002.h5" "$work/auto.log" || fail "--resume auto did not resume from step 2"
echo "ok   --resume auto skips an invalid newest checkpoint and names it"
echo "crafted checkpoints: $cases cases, every reader refused each with the field named or did not read it"
