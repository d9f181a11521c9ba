#!/usr/bin/env bash
# Write failures are errors with their real cause. A preloaded file system that fills up
# (full_disk.c: writes under a directory fail with ENOSPC after a byte budget):
#  - the timings file fills up mid-run (the write that fails is HDF5 flushing a dataset's cached
#    chunks as it closes it, after every H5Dwrite succeeded): the run stops with a non-zero
#    status and says the disk is full (no PERFORMANCE line, no "check the path is writable");
#  - the checkpoint directory's file system has no room for the next checkpoint (4 ranks): every
#    rank stops before writing it, exit status 2 naming the free and the needed space, and
#    --resume auto continues from the last checkpoint that fitted;
#  - before step 1: a read-only checkpoint directory, one without room for a checkpoint, and an
#    offload.nvme_dir without room for the optimizer states;
#  - a checkpoint write that fails as the ranks write their elements (the disk fills during it),
#    synchronous or asynchronous: the run stops naming the cause, the partial temporary is removed,
#    --resume auto continues.
set -uo pipefail
trident=$1 src=$2 work=$3 shim=$4
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.eval_every=0)
fail() { echo "FAIL: $*"; exit 1; }
resumes_from_step_2() {  # name: --resume auto on 4 ranks continues $work/name from step 2
  mpirun -np 4 --oversubscribe "$trident" train "${common[@]}" --set run.steps=6 \
    --set run.checkpoint_every=2 --set parallel.dp=2 --set parallel.tp=2 \
    --set run.out_dir="$work/$1" --resume auto > "$work/$1_resumed.log" 2>&1 ||
    fail "$1: --resume auto after the failed checkpoint"
  grep -q "resumed from .*step_000002.h5 at step 2" "$work/$1_resumed.log" ||
    fail "$1: did not resume from step 2"
}
full_disk() {  # dir bytes command...: runs the command with writes under dir limited to bytes
  local dir=$1 bytes=$2
  shift 2
  TRIDENT_FULL_DISK_DIR=$dir TRIDENT_FULL_DISK_BYTES=$bytes LD_PRELOAD=$shim "$@"
}

full_disk "$work/timings" 100000 "$trident" train "${common[@]}" --set run.steps=2000 \
  --set run.log_every=500 --set run.checkpoint_every=-1 --set run.out_dir="$work/timings" \
  > "$work/timings.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "timings on a full disk: exit status 0"
grep -q "timings.cpp.*HDF5 could not write or read $work/timings/tiny/timings.h5: No space left on device" "$work/timings.log" ||
  { grep trident "$work/timings.log"; fail "timings on a full disk: the cause is not named"; }
grep -q "hint: the file system is full" "$work/timings.log" || fail "timings: no hint"
! grep -q "^PERFORMANCE" "$work/timings.log" || fail "timings on a full disk: a PERFORMANCE line"
! grep -q "check the path is writable" "$work/timings.log" || fail "timings: the old hint"

# The checkpoint directory's file system has room for one checkpoint (~0.8 MB) but not two.
# The ranks share the budget (each writes its part of a checkpoint).
ckdir="$work/ckpt/tiny/checkpoints"
TRIDENT_FULL_DISK_SHARED=$work/ckpt.used full_disk "$ckdir" 2000000 mpirun -np 4 --oversubscribe -x LD_PRELOAD -x TRIDENT_FULL_DISK_DIR \
  -x TRIDENT_FULL_DISK_BYTES -x TRIDENT_FULL_DISK_SHARED "$trident" train "${common[@]}" --set run.steps=6 \
  --set run.checkpoint_every=2 --set parallel.dp=2 --set parallel.tp=2 \
  --set run.out_dir="$work/ckpt" > "$work/ckpt.log" 2>&1
rc=$?
[ $rc -eq 2 ] || { tail -20 "$work/ckpt.log"; fail "a checkpoint on a full disk: exit status $rc, expected 2"; }
grep -q "trident: error: the file system holding $ckdir is full: [0-9.]* MiB free, checkpoint step 4 needs" \
  "$work/ckpt.log" || { grep trident "$work/ckpt.log"; fail "a checkpoint on a full disk: message"; }
[ "$(ls "$ckdir")" = step_000002.h5 ] || fail "checkpoints left: $(ls "$ckdir")"
resumes_from_step_2 ckpt

# A quota or over-committed file system statvfs does not show (TRIDENT_FULL_DISK_HIDDEN=1): a
# rank's write of its elements fails (synchronous, or on the writer thread of
# run.async_checkpoints: every rank then stops with exit status 2), or rank 0's write of the file's
# layout does (HDF5: the job aborts). Either way the run stops naming the cause, no temporary is
# left behind, and --resume auto continues from the last checkpoint written.
for mode in false true; do
  name=hidden_async_$mode
  ckdir="$work/$name/tiny/checkpoints"
  TRIDENT_FULL_DISK_SHARED=$work/$name.used TRIDENT_FULL_DISK_HIDDEN=1 full_disk "$ckdir" 1000000 \
    mpirun -np 4 --oversubscribe -x LD_PRELOAD -x TRIDENT_FULL_DISK_DIR -x TRIDENT_FULL_DISK_BYTES \
    -x TRIDENT_FULL_DISK_SHARED -x TRIDENT_FULL_DISK_HIDDEN "$trident" train "${common[@]}" --set run.steps=6 --set run.checkpoint_every=2 --set parallel.dp=2 \
    --set parallel.tp=2 --set run.async_checkpoints=$mode --set run.out_dir="$work/$name" \
    > "$work/$name.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] || fail "$name: a failing checkpoint write: exit status 0"
  tmp="$ckdir/\.step_000004\.h5\.[0-9]*\.[0-9a-f]*\.tmp"
  grep -q "trident: error: checkpoint $ckdir/step_000004.h5: writing $tmp failed: No space left on device (the file system is full" "$work/$name.log" ||
    { grep -q "HDF5 could not write or read $tmp: No space left on device" "$work/$name.log" &&
      grep -q "hint: the file system is full" "$work/$name.log"; } ||
    { grep trident "$work/$name.log"; fail "$name: the cause is not named"; }
  [ "$(ls -A "$ckdir")" = step_000002.h5 ] || fail "$name: after a failed write: $(ls -A "$ckdir")"
  resumes_from_step_2 "$name"
done
# Fail before step 1, not at the first checkpoint after a few steps (through MPI_Abort, leaving
# run.lock behind): a checkpoint directory on a read-only file system, one without room for a
# checkpoint, and an offload.nvme_dir without room for the optimizer states, whose files are now
# reserved when they are made.
ckdir="$work/ro/tiny/checkpoints"
mkdir -p "$ckdir"
TRIDENT_FULL_DISK_READONLY=1 full_disk "$ckdir" 100000000 mpirun -np 2 --oversubscribe \
  -x LD_PRELOAD -x TRIDENT_FULL_DISK_DIR -x TRIDENT_FULL_DISK_BYTES -x TRIDENT_FULL_DISK_READONLY \
  "$trident" train "${common[@]}" --set run.steps=6 --set run.checkpoint_every=2 \
  --set run.log_every=1 --set parallel.dp=2 --set run.out_dir="$work/ro" > "$work/ro.log" 2>&1
rc=$?
[ $rc -eq 2 ] || { tail -20 "$work/ro.log"; fail "a read-only checkpoint directory: exit status $rc, expected 2"; }
grep -q "trident: error: the checkpoint directory $ckdir is not writable: Read-only file system" \
  "$work/ro.log" || { grep trident "$work/ro.log"; fail "a read-only checkpoint directory: message"; }
! grep -q "^step" "$work/ro.log" || fail "a read-only checkpoint directory was found after steps"
[ ! -e "$work/ro/tiny/run.lock" ] || fail "a read-only checkpoint directory: run.lock left behind"

ckdir="$work/small/tiny/checkpoints"
full_disk "$ckdir" 500000 "$trident" train "${common[@]}" --set run.steps=6 \
  --set run.checkpoint_every=2 --set run.log_every=1 --set run.out_dir="$work/small" \
  > "$work/small.log" 2>&1
rc=$?
[ $rc -eq 2 ] || { tail -20 "$work/small.log"; fail "no room for one checkpoint: exit status $rc, expected 2"; }
grep -q "trident: error: the file system holding $ckdir is full: 0.5 MiB free, the run's first checkpoint needs" \
  "$work/small.log" || { grep trident "$work/small.log"; fail "no room for one checkpoint: message"; }
! grep -q "^step" "$work/small.log" || fail "no room for a checkpoint was found after steps"

# A Hugging Face export onto a full disk (once a 0-byte config.json and index, exit 0): exit 2
# naming the file and the cause, nothing left in the directory.
mkdir -p "$work/hf_full"
full_disk "$work/hf_full" 100000 "$trident" ckpt export "$work/ckpt/tiny/checkpoints/step_000002.h5" \
  --hf "$work/hf_full/out" > "$work/hf_full.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "trident: error: writing '$work/hf_full/out/model.safetensors' failed (write): No space left on device" \
  "$work/hf_full.log" || { cat "$work/hf_full.log"; fail "an export onto a full disk: exit $rc"; }
[ -z "$(ls -A "$work/hf_full/out")" ] || fail "an export onto a full disk left $(ls -A "$work/hf_full/out")"

mkdir -p "$work/nvme"
full_disk "$work/nvme" 100000 "$trident" train "${common[@]}" --set run.steps=6 \
  --set run.log_every=1 --set offload.optimizer=nvme --set offload.nvme_dir="$work/nvme" \
  --set run.out_dir="$work/nvme_run" > "$work/nvme.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "an offload.nvme_dir without room: exit status 0"
grep -q "$work/nvme/tiny.rank0.chunk0.*No space left on device" "$work/nvme.log" ||
  { grep trident "$work/nvme.log"; fail "an offload.nvme_dir without room: message"; }
! grep -q "^outputs:" "$work/nvme.log" || fail "an offload.nvme_dir without room was found after the start"
echo "full disk: ok"
