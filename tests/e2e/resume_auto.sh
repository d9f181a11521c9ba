#!/usr/bin/env bash
# What a Slurm job with a time limit and requeue needs: rotation keeps the newest K checkpoints
# (by the step inside, as resume orders them);
# --resume auto picks the newest complete one, ignoring a write that was killed (a .tmp file)
# and a file that does not open, and starts from step 0 when there is none; it goes by the step
# recorded inside (a copy renamed newer does not rewind the run) and falls back past a newest
# checkpoint that fails its checksums; the resumed losses are bit-identical to the uninterrupted
# run. At 2 x 2 ranks with ZeRO-1.
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
run() {  # out_dir extra...
  local out=$1
  shift
  mpirun -np 4 --oversubscribe "$trident" train --config inputs/tiny.toml --set run.steps=14 \
    --set run.eval_every=0 --set run.checkpoint_every=2 --set parallel.dp=2 --set parallel.tp=2 \
    --set zero.stage=1 --set run.out_dir="$out" "$@"
}
run "$work/full" --set run.keep_checkpoints=3 > "$work/full.log"
ls "$work/full/tiny/checkpoints"
[ "$(ls "$work/full/tiny/checkpoints")" = "$(printf 'step_000010.h5\nstep_000012.h5\nstep_000014.h5')" ]
# No checkpoint yet: auto starts from step 0.
run "$work/fresh" --resume auto > "$work/fresh.log"
grep -q -- "--resume auto: no checkpoint in .*; starting from step 0" "$work/fresh.log"
$check compare "$work/full/tiny/timings.h5" "$work/fresh/tiny/timings.h5" --min-steps 14 --exact
# A job killed after step 8's checkpoint, during step 10's write, with a broken step 12 file.
mkdir -p "$work/killed/tiny/checkpoints"
cp "$work/fresh/tiny/checkpoints/step_000006.h5" "$work/fresh/tiny/checkpoints/step_000008.h5" \
  "$work/killed/tiny/checkpoints/"
head -c 4000 "$work/fresh/tiny/checkpoints/step_000010.h5" > "$work/killed/tiny/checkpoints/step_000010.h5.tmp"
head -c 4000 /dev/urandom > "$work/killed/tiny/checkpoints/step_000012.h5"
run "$work/killed" --resume auto > "$work/killed.log"
grep -- "--resume auto: skipping" "$work/killed.log"
grep -q "resumed from .*step_000008.h5 at step 8" "$work/killed.log"
$check compare "$work/full/tiny/timings.h5" "$work/killed/tiny/timings.h5" --from-step 9 --min-steps 6 --exact
$check params-equal "$work/full/tiny/checkpoints/step_000014.h5" "$work/killed/tiny/checkpoints/step_000014.h5"
# An old checkpoint copied under a newer name: the step inside decides, for the resume and for
# rotation (which deletes the copy, oldest by content, and keeps every new checkpoint).
mkdir -p "$work/renamed/tiny/checkpoints"
cp "$work/fresh/tiny/checkpoints/step_000008.h5" "$work/renamed/tiny/checkpoints/"
cp "$work/fresh/tiny/checkpoints/step_000004.h5" "$work/renamed/tiny/checkpoints/step_000099.h5"
run "$work/renamed" --resume auto --set run.keep_checkpoints=2 > "$work/renamed.log"
grep -q "resumed from .*step_000008.h5 at step 8" "$work/renamed.log"
[ "$(ls "$work/renamed/tiny/checkpoints")" = "$(printf 'step_000012.h5\nstep_000014.h5')" ] ||
  { ls "$work/renamed/tiny/checkpoints"; echo "FAIL: rotation by name, not by the step inside"; exit 1; }
# The newest checkpoint corrupted inside (one element of a tensor changed): skipped with a line,
# the run continues from the one before.
mkdir -p "$work/corrupt/tiny/checkpoints"
cp "$work/fresh/tiny/checkpoints/step_000006.h5" "$work/fresh/tiny/checkpoints/step_000008.h5" \
  "$work/corrupt/tiny/checkpoints/"
/usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    d = f['params/h.1.mlp.fc.weight']
    d[3, 5] = d[3, 5] + 0.5
" "$work/corrupt/tiny/checkpoints/step_000008.h5"
run "$work/corrupt" --resume auto > "$work/corrupt.log"
grep -q -- "--resume auto: skipping checkpoint '.*step_000008.h5': dataset 'params/h.1.mlp.fc.weight' fails its checksum" \
  "$work/corrupt.log"
grep -q "resumed from .*step_000006.h5 at step 6" "$work/corrupt.log"
$check compare "$work/full/tiny/timings.h5" "$work/corrupt/tiny/timings.h5" --from-step 7 --min-steps 8 --exact
echo "rotation and --resume auto: ok"
