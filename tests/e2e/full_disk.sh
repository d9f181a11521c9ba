#!/usr/bin/env bash
# Write failures are errors with their real cause. A preloaded file system that fills up
# (full_disk.c: writes under a directory fail with ENOSPC after a byte budget):
#  - the timings file fills up mid-run: the run stops with a non-zero status and says the disk is
#    full (no PERFORMANCE line, no "check the path is writable");
#  - the checkpoint directory's file system has no room for the next checkpoint (4 ranks): every
#    rank stops before writing it, exit status 2 naming the free and the needed space, and
#    --resume auto continues from the last checkpoint that fitted.
set -uo pipefail
trident=$1 src=$2 work=$3 shim=$4
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.eval_every=0)
fail() { echo "FAIL: $*"; exit 1; }
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
grep -q "timings.cpp.*HDF5 could not write or read the file: No space left on device" "$work/timings.log" ||
  { grep trident "$work/timings.log"; fail "timings on a full disk: the cause is not named"; }
grep -q "hint: the file system is full" "$work/timings.log" || fail "timings: no hint"
! grep -q "^PERFORMANCE" "$work/timings.log" || fail "timings on a full disk: a PERFORMANCE line"
! grep -q "check the path is writable" "$work/timings.log" || fail "timings: the old hint"

# The checkpoint directory's file system has room for one checkpoint (~0.8 MB) but not two.
ckdir="$work/ckpt/tiny/checkpoints"
full_disk "$ckdir" 2000000 mpirun -np 4 --oversubscribe -x LD_PRELOAD -x TRIDENT_FULL_DISK_DIR \
  -x TRIDENT_FULL_DISK_BYTES "$trident" train "${common[@]}" --set run.steps=6 \
  --set run.checkpoint_every=2 --set parallel.dp=2 --set parallel.tp=2 \
  --set run.out_dir="$work/ckpt" > "$work/ckpt.log" 2>&1
rc=$?
[ $rc -eq 2 ] || { tail -20 "$work/ckpt.log"; fail "a checkpoint on a full disk: exit status $rc, expected 2"; }
grep -q "trident: error: the file system holding $ckdir is full: [0-9.]* MiB free, checkpoint step 4 needs" \
  "$work/ckpt.log" || { grep trident "$work/ckpt.log"; fail "a checkpoint on a full disk: message"; }
[ "$(ls "$ckdir")" = step_000002.h5 ] || fail "checkpoints left: $(ls "$ckdir")"
mpirun -np 4 --oversubscribe "$trident" train "${common[@]}" --set run.steps=6 \
  --set run.checkpoint_every=2 --set parallel.dp=2 --set parallel.tp=2 \
  --set run.out_dir="$work/ckpt" --resume auto > "$work/resumed.log" 2>&1 ||
  fail "--resume auto after the refused checkpoint"
grep -q "resumed from .*step_000002.h5 at step 2" "$work/resumed.log" || fail "did not resume from step 2"
echo "full disk: ok"
