#!/usr/bin/env bash
# fp16 dynamic loss scaling: an overflow injected into one rank's gradient at step 3 skips that
# step on every rank (a 2 x 2 run with the overflow on rank 3 tracks the serial run with it on
# rank 0), halves the scale (hysteresis 1), is logged and counted in timings.h5; bf16 resumes
# bit for bit from its fp32 master weights, serial and at dp 2 with ZeRO-3 (16-bit shards), and
# onto another layout (dp 2 x tp 2, ZeRO-1) within the bf16 layout tolerance.
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.steps=8 --set run.eval_every=0
        --set run.checkpoint_every=0 --set precision.compute=fp16 --set precision.hysteresis=1
        --set precision.loss_scale=1024)
"$trident" train "${common[@]}" --set run.out_dir="$work/clean" > "$work/clean.log"
"$trident" train "${common[@]}" --set run.out_dir="$work/serial" --inject-overflow 3:0 \
  > "$work/serial.log"
mpirun -np 4 --oversubscribe "$trident" train "${common[@]}" --set run.out_dir="$work/layout" \
  --set parallel.dp=2 --set parallel.tp=2 --inject-overflow 3:3 > "$work/layout.log"
grep "overflow" "$work/layout.log"
grep -q "step     3/8 | fp16 gradient overflow: step skipped on every rank, loss scale 1024 -> 512" \
  "$work/layout.log"
grep -q "skipped_steps=1" "$work/layout.log"
/usr/bin/python3 - "$work" <<'PY'
import sys
import h5py
work = sys.argv[1]
with h5py.File(f"{work}/layout/tiny/timings.h5") as f:
    skipped, scale = list(f["skipped"][:]), list(f["loss_scale"][:])
    norm = list(f["grad_norm"][:])
assert skipped == [0, 0, 1, 0, 0, 0, 0, 0], skipped
assert scale == [1024, 1024, 1024, 512, 512, 512, 512, 512], scale
assert norm[2] == 0 and all(n > 0 for i, n in enumerate(norm) if i != 2), norm
print(f"skipped {skipped}, loss scale {scale}")
PY
# Steps 1-3 are computed before the skip; from step 4 on the skipped update shows.
/usr/bin/python3 - "$work" <<'PY'
import sys
import h5py
work = sys.argv[1]
clean = h5py.File(f"{work}/clean/tiny/timings.h5")["loss"][:]
serial = h5py.File(f"{work}/serial/tiny/timings.h5")["loss"][:]
assert (clean[:3] == serial[:3]).all(), (clean, serial)
assert clean[3] != serial[3], "the skipped step changed nothing"
print("steps 1-3 identical, step 4 shows the skipped update")
PY
$check compare "$work/serial/tiny/timings.h5" "$work/layout/tiny/timings.h5" --min-steps 8 --rtol 1e-4
# fp16 resume: the loss scale and its counters travel in the checkpoint (the growth interval of 3
# raises it, an overflow at step 4 lowers it), so the resumed run scales alike.
scaled=(--config inputs/tiny.toml --set run.steps=10 --set run.checkpoint_every=5
        --set precision.compute=fp16 --set precision.loss_scale=1024 --set precision.hysteresis=1
        --set precision.growth_interval=3)
"$trident" train "${scaled[@]}" --set run.out_dir="$work/s1" --inject-overflow 4:0 > "$work/s1.log"
"$trident" train "${scaled[@]}" --set run.out_dir="$work/s2" --inject-overflow 4:0 \
  --resume "$work/s1/tiny/checkpoints/step_000005.h5" > "$work/s2.log"
grep "loss scale restored" "$work/s2.log"
/usr/bin/python3 - "$work" <<'PY'
import sys
import h5py
work = sys.argv[1]
a = h5py.File(f"{work}/s1/tiny/timings.h5")
b = h5py.File(f"{work}/s2/tiny/timings.h5")
sa, sb = list(a["loss_scale"][5:]), list(b["loss_scale"][:])
assert sa == sb and len(set(a["loss_scale"][:])) > 1, (list(a["loss_scale"][:]), sb)
assert list(a["loss"][5:]) == list(b["loss"][:])
print(f"loss scale {list(a['loss_scale'][:])}; resumed steps 6-10 identical, scale included")
PY
# bf16 resume: the checkpoint holds the fp32 master weights the 16-bit parameters round from.
resume=(--config inputs/tiny.toml --set run.steps=10 --set run.checkpoint_every=5
        --set precision.compute=bf16)
"$trident" train "${resume[@]}" --set run.out_dir="$work/a" > "$work/a.log"
"$trident" train "${resume[@]}" --set run.out_dir="$work/b" \
  --resume "$work/a/tiny/checkpoints/step_000005.h5" > "$work/b.log"
$check compare "$work/a/tiny/timings.h5" "$work/b/tiny/timings.h5" --from-step 6 --min-steps 5 --exact
$check params-equal "$work/a/tiny/checkpoints/step_000010.h5" "$work/b/tiny/checkpoints/step_000010.h5"
z3=("${resume[@]}" --set parallel.dp=2 --set zero.stage=3)
mpirun -np 2 --oversubscribe "$trident" train "${z3[@]}" --set run.out_dir="$work/z3a" > "$work/z3a.log"
mpirun -np 2 --oversubscribe "$trident" train "${z3[@]}" --set run.out_dir="$work/z3b" \
  --resume "$work/z3a/tiny/checkpoints/step_000005.h5" > "$work/z3b.log"
$check compare "$work/z3a/tiny/timings.h5" "$work/z3b/tiny/timings.h5" --from-step 6 --min-steps 5 --exact
$check params-equal "$work/z3a/tiny/checkpoints/step_000010.h5" "$work/z3b/tiny/checkpoints/step_000010.h5"
mpirun -np 4 --oversubscribe "$trident" train "${resume[@]}" --set parallel.dp=2 \
  --set parallel.tp=2 --set zero.stage=1 --set run.out_dir="$work/z1" \
  --resume "$work/z3a/tiny/checkpoints/step_000005.h5" > "$work/z1.log"
$check compare "$work/z3a/tiny/timings.h5" "$work/z1/tiny/timings.h5" --from-step 6 --min-steps 5 --rtol 5e-4
