#!/usr/bin/env bash
# Activation recomputation on gpt2-124m at one rank: step time and activation memory for
# recompute none / selective / full, measured (allocation ledger) and predicted (memory model),
# in the same run. Runs with BLAS on one thread; the ratios are against `none` from this run.
# usage: bench/recompute.sh BUILD_DIR [BATCH] [SEQ] [STEPS]
set -euo pipefail
build=${1:?usage: bench/recompute.sh BUILD_DIR [BATCH] [SEQ] [STEPS]}
batch=${2:-4} seq=${3:-256} steps=${4:-4}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
export OPENBLAS_NUM_THREADS=1
out=$build/recompute_bench
rm -rf "$out" && mkdir -p "$out"
files=()
for policy in none selective full; do
  "$build/src/trident" train --config inputs/small.toml --set model.name=gpt2-124m \
    --set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12 \
    --set model.vocab_size=50257 --set model.block_size=1024 --set train.seq_len="$seq" \
    --set train.batch_size="$batch" --set run.steps="$steps" --set run.eval_every=0 \
    --set run.eval_batches=1 --set run.checkpoint_every=0 --set recompute.policy=$policy \
    --set run.out_dir="$out/$policy" --set run.name=run > "$out/$policy.log"
  rm -rf "$out/$policy/run/checkpoints"
  files+=("$policy=$out/$policy/run/timings.h5")
done
/usr/bin/python3 - "$batch" "$seq" "${files[@]}" <<'PY'
import sys
import h5py
import numpy as np

MIB = 1048576.0
batch, seq = sys.argv[1], sys.argv[2]
rows = []
for arg in sys.argv[3:]:
    name, path = arg.split("=", 1)
    with h5py.File(path, "r") as f:
        cats = f.attrs["memory_categories"].split(",")
        act = cats.index("activations")
        step_s = float(np.median(f["step_seconds_max"][1:]))  # the first step warms caches
        recompute_s = float(np.median(f["phase_seconds"][1:, 0, 2]))
        rows.append((name, step_s, recompute_s, f["peak_memory_by_category"][-1][0][act],
                     f["predicted_memory_bytes"][0][act], f["peak_memory_bytes"][-1][0]))
base_s, base_act = rows[0][1], rows[0][3]
print(f"gpt2-124m, fp32, 1 rank, micro-batch {batch} x {seq} tokens")
print("| recompute | s/step | vs none | recompute s | activations MiB (predicted) | vs none | peak MiB |")
print("|---|---|---|---|---|---|---|")
for name, s, r, a, p, peak in rows:
    print(f"| {name} | {s:.3f} | {s / base_s:.2f}x | {r:.3f} | {a / MIB:.1f} ({p / MIB:.1f}) | "
          f"{a / base_act:.2f}x | {peak / MIB:.1f} |")
PY
