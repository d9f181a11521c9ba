#!/usr/bin/env bash
# Step time with a checkpoint every K steps, synchronous and asynchronous (run.async_checkpoints),
# against the same run without checkpoints, measured in the same invocation: the small model
# (0.84M parameters, 10 MB a checkpoint) on 4 ranks, dp 4 with ZeRO-3, one thread per rank. Time
# per step is wall time between step ends (timings step_end_unix) after a warm-up and before the
# last step (which waits for the final checkpoint in every mode), so it holds everything a
# checkpoint costs the run: the write or its copy, and the background thread's share
# of the cores. Runs alternate by mode, REPEATS times; the table takes each mode's median. With
# MBPS, every run writes its outputs through tests/e2e/full_disk.c's preloaded file system, here
# one that takes MBPS MB/s
# per process (a shared parallel file system's share of a rank; this machine's disk takes
# hundreds), so that the write itself, not the file's creation, is what a checkpoint costs.
# usage: bench/checkpoint_async.sh BUILD_DIR [EVERY [STEPS [REPEATS [MBPS]]]]
set -euo pipefail
build=${1:?usage: bench/checkpoint_async.sh BUILD_DIR [EVERY [STEPS [REPEATS [MBPS]]]]}
every=${2:-10} steps=${3:-60} repeats=${4:-3} mbps=${5:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
out=$build/checkpoint_async
rm -rf "$out" && mkdir -p "$out"
slow=()
if [ -n "$mbps" ]; then
  export LD_PRELOAD=$build/tests/e2e/libtrident_full_disk.so TRIDENT_FULL_DISK_DIR=$out
  export TRIDENT_FULL_DISK_MBPS=$mbps
  slow=(-x LD_PRELOAD -x TRIDENT_FULL_DISK_DIR -x TRIDENT_FULL_DISK_MBPS)
fi
runs=()
for r in $(seq "$repeats"); do
  for mode in none sync async; do
    case $mode in
      none) ckpt=(--set run.checkpoint_every=-1) ;;
      sync) ckpt=(--set run.checkpoint_every="$every") ;;
      async) ckpt=(--set run.checkpoint_every="$every" --set run.async_checkpoints=true) ;;
    esac
    name=$mode.$r
    mpirun -np 4 --oversubscribe "${slow[@]}" "$build/src/trident" train --config inputs/small.toml \
      --set parallel.dp=4 --set zero.stage=3 --set run.steps="$steps" --set run.eval_every=0 \
      --set run.log_every="$steps" --set run.keep_checkpoints=2 --set run.out_dir="$out" \
      --set run.name="$name" "${ckpt[@]}" > "$out/$name.log"
    runs+=("$mode=$out/$name/timings.h5")
  done
done
unset LD_PRELOAD
/usr/bin/python3 - "$every" "${mbps:-}" "${runs[@]}" <<'PY'
import statistics
import sys

import h5py

WARMUP = 4  # steps left out first: allocation, first touches, the scheduler placing ranks
every, mbps = int(sys.argv[1]), sys.argv[2]
per_mode = {}
for arg in sys.argv[3:]:
    mode, path = arg.split("=", 1)
    # The last step is left out: the run waits there for its final checkpoint, whatever the mode.
    with h5py.File(path) as f:
        end = f["step_end_unix"][:-1]
        saved = f["checkpoint_saved"][:-1].astype(bool)
        on_thread = f["checkpoint_seconds"][:-1].sum() / max(saved.sum(), 1)
        behind = f["checkpoint_background_seconds"][:-1].sum() / max(saved.sum(), 1)
    per_step = (end[-1] - end[WARMUP - 1]) / (len(end) - WARMUP)
    per_mode.setdefault(mode, []).append((per_step, on_thread, behind))
base = statistics.median(r[0] for r in per_mode["none"])
disk = f"a file system of {mbps} MB/s per process" if mbps else "this machine's disk"
print(f"small model, 4 ranks dp 4 ZeRO-3, a checkpoint every {every} steps, {disk} "
      f"({len(per_mode['none'])} runs per mode, medians)")
print("| checkpoints | ms per step | vs none | training thread s per checkpoint | "
      "background s per checkpoint |")
print("|---|---|---|---|---|")
for mode in ("none", "sync", "async"):
    rows = per_mode[mode]
    step = statistics.median(r[0] for r in rows)
    thread = statistics.median(r[1] for r in rows)
    behind = statistics.median(r[2] for r in rows)
    cells = ("-", "-") if mode == "none" else (f"{thread:.4f}", f"{behind:.4f}")
    print(f"| {mode} | {step * 1e3:.1f} | {step / base:.3f} | {cells[0]} | {cells[1]} |")
PY
