#!/usr/bin/env bash
# Synchronous vs asynchronous data parallelism on the small model at dp = 2: throughput of
# sync, async and local_sgd (mean step time after the first: local_sgd's cost is periodic), and
# a convergence comparison (training loss every 50 steps, final validation loss).
# usage: bench/dp_sync.sh BUILD_DIR [STEPS] [LOCAL_STEPS]
set -euo pipefail
build=${1:?usage: bench/dp_sync.sh BUILD_DIR [STEPS] [LOCAL_STEPS]}
steps=${2:-300} local_steps=${3:-4}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
out=$build/dp_sync_bench
rm -rf "$out" && mkdir -p "$out"
files=()
for mode in sync async local_sgd; do
  mpirun -np 2 --oversubscribe "$build/src/trident" train --config inputs/small.toml \
    --set run.steps="$steps" --set run.eval_every=0 --set run.checkpoint_every=0 \
    --set dp.sync=$mode --set dp.local_steps="$local_steps" --set run.out_dir="$out/$mode" \
    --set run.name=run > "$out/$mode.log"
  rm -rf "$out/$mode/run/checkpoints"
  files+=("$mode=$out/$mode/run/timings.h5")
done
/usr/bin/python3 - "$local_steps" "${files[@]}" <<'PY'
import sys
import h5py
import numpy as np

local_steps = sys.argv[1]
runs = {}
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    with h5py.File(path, "r") as f:
        runs[name] = dict(loss=f["loss"][:], val=f["val_loss"][-1],
                          step_s=float(np.mean(f["step_seconds_max"][1:])),
                          dp_s=float(np.mean(f["phase_seconds"][1:, :, 5].max(axis=1))),
                          tokens=int(f["tokens"][0]))
base = runs["sync"]["step_s"]
print(f"small model, dp = 2 (2 ranks), local_sgd every {local_steps} steps")
print("| mode | ms/step | tokens/s | vs sync | dp_comm ms/step | final val loss |")
print("|---|---|---|---|---|---|")
for name, r in runs.items():
    print(f"| {name} | {r['step_s'] * 1e3:.1f} | {r['tokens'] / r['step_s']:.0f} | "
          f"{base / r['step_s']:.2f}x | {r['dp_s'] * 1e3:.2f} | {r['val']:.4f} |")
n = len(runs["sync"]["loss"])
marks = [s for s in range(50, n + 1, 50)] or [n]
print()
print("| step | " + " | ".join(runs) + " |")
print("|---|" + "---|" * len(runs))
for s in marks:
    # Mean of the 10 steps ending at s, to see the trend through batch noise.
    print(f"| {s} | " + " | ".join(f"{r['loss'][max(0, s - 10):s].mean():.4f}" for r in runs.values()) + " |")
PY
