#!/usr/bin/env bash
# Mixed precision x activation recomputation on gpt2-124m at one rank: step time and memory for
# fp32 / bf16 / fp16 x recompute none / selective / full, measured (allocation ledger) and
# predicted (memory model), in the same run. BLAS on one thread; ratios are against fp32 / none
# from this run. Step time: the median over the steps between the first (warm-up) and the last
# (which writes the checkpoint).
# usage: bench/precision_recompute.sh BUILD_DIR [BATCH] [SEQ] [STEPS]
set -euo pipefail
build=${1:?usage: bench/precision_recompute.sh BUILD_DIR [BATCH] [SEQ] [STEPS]}
batch=${2:-4} seq=${3:-256} steps=${4:-4}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
export OPENBLAS_NUM_THREADS=1
out=$build/precision_recompute_bench
rm -rf "$out" && mkdir -p "$out"
files=()
for precision in fp32 bf16 fp16; do
  for policy in none selective full; do
    name=${precision}_$policy
    "$build/src/trident" train --config inputs/small.toml --set model.name=gpt2-124m \
      --set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12 \
      --set model.vocab_size=50257 --set model.block_size=1024 --set train.seq_len="$seq" \
      --set train.batch_size="$batch" --set run.steps="$steps" --set run.eval_every=0 \
      --set run.eval_batches=1 --set run.checkpoint_every=0 --set recompute.policy=$policy \
      --set precision.compute=$precision --set run.out_dir="$out/$name" --set run.name=run \
      > "$out/$name.log"
    rm -rf "$out/$name/run/checkpoints"
    files+=("$name=$out/$name/run/timings.h5")
  done
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
        measured, predicted = f["peak_memory_by_category"][-1][0], f["predicted_memory_bytes"][0]
        rows.append(dict(name=name, step=float(np.median(f["step_seconds_max"][1:-1])),
                         recompute=float(np.median(f["phase_seconds"][1:-1, 0, 2])),
                         act=measured[cats.index("activations")],
                         act_pred=predicted[cats.index("activations")],
                         states=sum(measured[cats.index(c)] for c in
                                    ["params", "grads", "master_weights", "optimizer"]),
                         work=measured[cats.index("workspace")],
                         peak=f["peak_memory_bytes"][-1][0], total_pred=predicted.sum(),
                         loss=float(f["loss"][-1])))
base = rows[0]
print(f"gpt2-124m, 1 rank, micro-batch {batch} x {seq} tokens (ratios against fp32 / none)")
print("| precision | recompute | s/step | vs base | recompute s | activations MiB (predicted) "
      "| model states MiB | workspace MiB | peak MiB (predicted) | vs base |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    precision, policy = r["name"].split("_")
    print(f"| {precision} | {policy} | {r['step']:.2f} | {r['step'] / base['step']:.2f}x | "
          f"{r['recompute']:.2f} | {r['act'] / MIB:.1f} ({r['act_pred'] / MIB:.1f}) | "
          f"{r['states'] / MIB:.1f} | {r['work'] / MIB:.1f} | {r['peak'] / MIB:.1f} "
          f"({r['total_pred'] / MIB:.1f}) | {r['peak'] / base['peak']:.2f}x |")
PY
