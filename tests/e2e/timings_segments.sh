#!/usr/bin/env bash
# Timings of every segment of a run are kept and read as one run (2 ranks, dp 2): a run killed
# twice and resumed with --resume auto each time leaves timings.h5, timings.2.h5 and timings.3.h5;
# analysis/ reads them as one run whose every step equals an uninterrupted run's, a step redone
# after a resume taken from its latest segment. A finished run resumed again writes nothing and
# exits 0; a rewind into the run's own directory (later checkpoints there) and a checkpoint past
# run.steps are refused.
set -uo pipefail
trident=$1 src=$2 work=$3
python=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.steps=10 --set run.checkpoint_every=3
        --set run.eval_every=5 --set parallel.dp=2)
fail() { echo "FAIL: $*"; exit 1; }
run2() { mpirun -np 2 --oversubscribe "$trident" train "${common[@]}" "$@"; }

run2 --set run.out_dir="$work/reference" > "$work/reference.log" 2>&1 || fail "reference run"
# Killed at the start of step 8 (checkpoint 6 written), then again at step 8 of the resumed run.
run2 --set run.out_dir="$work/run" --inject-fault kill:8:1 > "$work/first.log" 2>&1 &&
  fail "the first kill did not end the run"
run2 --set run.out_dir="$work/run" --resume auto --inject-fault kill:8:1 > "$work/second.log" 2>&1 &&
  fail "the second kill did not end the run"
grep -q "taking over the lock of run directory $work/run/tiny from pid [0-9]* on host .*: its process is gone" \
  "$work/second.log" || fail "the killed run's lock was not taken over"
run2 --set run.out_dir="$work/run" --resume auto > "$work/third.log" 2>&1 || fail "the last resume"
grep -q "resumed from .*step_000006.h5 at step 6" "$work/third.log" || fail "did not resume from step 6"
[ "$(cd "$work/run/tiny" && ls timings*.h5 | tr '\n' ' ')" = "timings.2.h5 timings.3.h5 timings.h5 " ] ||
  fail "segments: $(ls "$work/run/tiny")"

# Resuming the finished run changes nothing.
run2 --set run.out_dir="$work/run" --resume auto > "$work/again.log" 2>&1 || fail "resume of a finished run"
grep -q "^run $work/run/tiny is already complete at step 10 (.*step_000010.h5); nothing to do" \
  "$work/again.log" || { cat "$work/again.log"; fail "no 'already complete' line"; }
[ ! -e "$work/run/tiny/timings.4.h5" ] || fail "a finished run's resume wrote a segment"

"$python" - "$src/analysis" "$work" <<'PY' || fail "the segments do not read as one run"
import sys
import h5py
import numpy as np
sys.path.insert(0, sys.argv[1])
import trident_runs as tr
work = sys.argv[2]
(ref,) = tr.load_runs([f"{work}/reference/tiny"], strict=True, warmup=None)
(run,) = tr.load_runs([f"{work}/run/tiny"], strict=True, warmup=None)
assert [s.rsplit("/", 1)[1] for s in run.segments] == ["timings.h5", "timings.2.h5", "timings.3.h5"], run.segments
assert list(run.data["step"]) == list(range(1, 11)), run.data["step"]
for key in ("loss", "lr", "grad_norm", "val_loss", "tokens"):
    assert np.array_equal(run.data[key], ref.data[key], equal_nan=True), (key, run.data[key], ref.data[key])
assert run.data["phase_seconds"].shape == (10, 2, len(run.phases))
starts = []
for name in ("timings.h5", "timings.2.h5", "timings.3.h5"):
    with h5py.File(f"{work}/run/tiny/{name}") as f:
        starts.append((int(f.attrs["segment"]), int(f.attrs["start_step"]), list(f["step"][()])))
assert starts == [(1, 0, list(range(1, 8))), (2, 6, [7]), (3, 6, [7, 8, 9, 10])], starts
# One file alone is that segment.
(seg,) = tr.load_runs([f"{work}/run/tiny/timings.3.h5"], warmup=None)
assert list(seg.data["step"]) == [7, 8, 9, 10]
print("merged steps", list(run.data["step"]), "from", len(run.segments), "segments")
PY
"$python" analysis/convergence.py --strict --out "$work/analysis" "$work/run/tiny" \
  > "$work/convergence.log" 2>&1 || { cat "$work/convergence.log"; fail "convergence.py on the resumed run"; }

# Rewinding the run in its own directory would mix two timelines' checkpoints: refused.
run2 --set run.out_dir="$work/run" --resume "$work/run/tiny/checkpoints/step_000006.h5" \
  > "$work/rewind.log" 2>&1
[ $? -eq 2 ] || fail "a rewind into the run's own directory: not refused"
grep -q "trident: error: resuming from '.*step_000006.h5' (step 6) into $work/run/tiny, which holds later checkpoints (step_000010.h5, step_000009.h5) of the run being rewound" \
  "$work/rewind.log" || { cat "$work/rewind.log"; fail "rewind: message"; }
[ ! -e "$work/run/tiny/timings.4.h5" ] || fail "a refused rewind wrote a segment"

# A checkpoint past run.steps.
run2 --set run.out_dir="$work/past" --set run.steps=5 --allow-config-change \
  --resume "$work/run/tiny/checkpoints/step_000009.h5" > "$work/past.log" 2>&1
[ $? -eq 2 ] || fail "a checkpoint past run.steps: not refused"
grep -q "trident: error: checkpoint '.*step_000009.h5' is at step 9, past run.steps = 5; raise run.steps" \
  "$work/past.log" || { cat "$work/past.log"; fail "past run.steps: message"; }
echo "timings segments: ok"
