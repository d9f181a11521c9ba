#!/usr/bin/env bash
# Asynchronous checkpoints (run.async_checkpoints) on 4 ranks, dp 2 x tp 2 with ZeRO-3:
#  - the files are those of synchronous checkpoints: every dataset, checksum and counter equal, and
#    run.keep_checkpoints rotates them alike;
#  - their write is reported apart: the step line's "ckpt written in X s behind the steps", the
#    PERFORMANCE line's checkpoint_background_s, timings.h5's checkpoint_background_seconds;
#  - a resume from one is bit-identical to the uninterrupted run (losses and final checkpoint);
#  - a rank killed during a background write: the checkpoint being written never gets its name,
#    --resume auto continues from the previous complete one, bit-identical again, and removes the
#    killed write's temporary.
set -uo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.steps=8 --set run.eval_every=0
        --set run.checkpoint_every=2 --set parallel.dp=2 --set parallel.tp=2 --set zero.stage=3)
fail() { echo "FAIL: $*"; exit 1; }
train() {  # name args...: 4 ranks under a 120 s guard; sets rc
  local name=$1
  shift
  timeout 120 mpirun -np 4 --oversubscribe "$trident" train "${common[@]}" \
    --set run.out_dir="$work/$name" "$@" > "$work/$name.log" 2>&1
  rc=$?
}
same_checkpoint() {  # a b: every dataset, checksum and counter of two checkpoints equal
  /usr/bin/python3 - "$1" "$2" <<'PY' || fail "$1 and $2 differ"
import sys
import h5py
import numpy as np

a, b = (h5py.File(p, "r") for p in sys.argv[1:])
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) else None)
others = []
b.visit(lambda n: others.append(n) if isinstance(b[n], h5py.Dataset) else None)
assert sorted(names) == sorted(others), (names, others)
for n in names:
    assert np.array_equal(a[n][()], b[n][()]), n
    assert a[n].attrs.get("checksum") == b[n].attrs.get("checksum"), n
for key in ("step", "data_cursor", "adam_steps", "seed", "loss_scale", "layout"):
    assert a.attrs[key] == b.attrs[key], key
print(f"{sys.argv[2]}: {len(names)} datasets equal to {sys.argv[1]}'s")
PY
}

train sync
[ $rc -eq 0 ] || fail "synchronous run: exit status $rc"
train async --set run.async_checkpoints=true --set run.keep_checkpoints=2
[ $rc -eq 0 ] || { tail -5 "$work/async.log"; fail "asynchronous run: exit status $rc"; }
sync_dir=$work/sync/tiny/checkpoints async_dir=$work/async/tiny/checkpoints
[ "$(ls -A "$async_dir" | tr '\n' ' ')" = "step_000006.h5 step_000008.h5 " ] ||
  fail "asynchronous checkpoints kept: $(ls -A "$async_dir")"
same_checkpoint "$sync_dir/step_000006.h5" "$async_dir/step_000006.h5"
same_checkpoint "$sync_dir/step_000008.h5" "$async_dir/step_000008.h5"

# Reported apart from the steps, on the step line, in PERFORMANCE and in timings.h5.
grep -E "^step +[0-9]+/8 .*\| ckpt written in [0-9.]+ s behind the steps" "$work/async.log" ||
  fail "no step line reports a background write"
grep -qE "^PERFORMANCE .* checkpoints=4 checkpoint_s=[0-9.]+ checkpoint_background_s=[0-9.]*[1-9]" \
  "$work/async.log" || { grep PERFORMANCE "$work/async.log"; fail "PERFORMANCE: background time"; }
/usr/bin/python3 - "$work/async/tiny/timings.h5" "$work/sync/tiny/timings.h5" <<'PY' || fail "timings"
import sys
import h5py

with h5py.File(sys.argv[1]) as f:
    background = list(f["checkpoint_background_seconds"][:])
    steps = list(f["step"][:])
    assert f["checkpoint_background_seconds"].attrs["units"] in (b"s", "s")
with h5py.File(sys.argv[2]) as f:
    assert not any(f["checkpoint_background_seconds"][:]), "a synchronous run has background time"
written = [s for s, b in zip(steps, background) if b > 0]
# Each write ends after its checkpoint's step (the last one at once): 4 of them.
assert len(written) == 4 and written[-1] == 8, (steps, background)
print(f"background writes reported after steps {written}")
PY

# A resume from an asynchronous checkpoint continues bit for bit.
train resumed --set run.async_checkpoints=true --resume "$async_dir/step_000006.h5"
[ $rc -eq 0 ] || fail "resume from an asynchronous checkpoint: exit status $rc"
$check compare "$work/sync/tiny/timings.h5" "$work/resumed/tiny/timings.h5" --from-step 7 \
  --min-steps 2 --exact || exit 1
same_checkpoint "$sync_dir/step_000008.h5" "$work/resumed/tiny/checkpoints/step_000008.h5"

# Killed during a background write: rank 1's writer thread dies (SIGKILL) mid-file after step 4.
train killed --set run.async_checkpoints=true --inject-fault kill-in-checkpoint:4:1
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "killed during an asynchronous write: exit status $rc"
killed_dir=$work/killed/tiny/checkpoints
[ ! -e "$killed_dir/step_000004.h5" ] || fail "a half-written checkpoint has its final name"
[ -e "$killed_dir/step_000002.h5" ] || fail "the previous checkpoint is gone: $(ls -A "$killed_dir")"
ls -A "$killed_dir" | grep -qE '^\.step_000004\.h5\.[0-9]+\.[0-9a-f]+\.tmp$' ||
  fail "no unfinished temporary to clean up: $(ls -A "$killed_dir")"
train killed --set run.async_checkpoints=true --resume auto
[ $rc -eq 0 ] || fail "--resume auto after a killed asynchronous write: exit status $rc"
grep -q "resumed from .*step_000002.h5 at step 2" "$work/killed.log" || fail "did not resume from step 2"
# The killed write's temporary (as large as a checkpoint) is removed when the run starts again.
grep -qE "^removed $killed_dir/\.step_000004\.h5\.[0-9]+\.[0-9a-f]+\.tmp: a checkpoint write" \
  "$work/killed.log" || fail "the unfinished temporary was not reported removed"
! ls -A "$killed_dir" | grep -q '\.tmp$' || fail "a temporary is left: $(ls -A "$killed_dir")"
$check compare "$work/sync/tiny/timings.h5" "$work/killed/tiny/timings.2.h5" --from-step 3 \
  --min-steps 6 --exact || exit 1
same_checkpoint "$sync_dir/step_000008.h5" "$killed_dir/step_000008.h5"
echo "async_checkpoints: ok"
