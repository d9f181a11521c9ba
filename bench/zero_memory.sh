#!/usr/bin/env bash
# Per-rank memory by category at dp = 1, 2, 4, 8 and each ZeRO stage, measured (trident's
# allocation ledger) next to the memory model's prediction, and the model states' reduction
# against ZeRO-0 at the same dp next to the ideal: for trident's bytes per parameter (bf16:
# 2 parameter + 4 gradient + 4 master + 8 moment bytes; fp32: 4 + 4 + 0 + 8) and the ZeRO
# paper's (2 + 2 + K, K = 12), whose limits are 4x, 8x and Nd x.
# usage: bench/zero_memory.sh BUILD_DIR [PRECISION] [LAYERS] [CONFIG]
set -euo pipefail
build=${1:?usage: bench/zero_memory.sh BUILD_DIR [PRECISION] [LAYERS] [CONFIG]}
precision=${2:-bf16} layers=${3:-16} config=${4:-inputs/small.toml}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
out=$build/zero_memory
rm -rf "$out" && mkdir -p "$out"
files=()
for stage in 0 1 2 3; do
  for dp in 1 2 4 8; do
    name=dp${dp}_zero${stage}
    # One step is enough: every buffer is allocated before the first step.
    mpirun -np "$dp" --oversubscribe "$build/src/trident" train --config "$config" \
      --set run.steps=1 --set run.eval_batches=1 --set run.checkpoint_every=0 \
      --set model.n_layer="$layers" --set train.batch_size=8 --set zero.stage="$stage" \
      --set precision.compute="$precision" --set run.out_dir="$out/$name" --set run.name=run \
      > "$out/$name.log"
    rm -rf "$out/$name/run/checkpoints"
    files+=("$name=$out/$name/run/timings.h5")
  done
done
/usr/bin/python3 - "$precision" "${files[@]}" <<'PY'
import sys
import h5py

MIB = 1048576.0
precision = sys.argv[1]
rows = {}
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    with h5py.File(path, "r") as f:
        cats = f.attrs["memory_categories"].split(",")
        rows[name] = (f["peak_memory_by_category"][-1][0], f["predicted_memory_bytes"][0])
states = [cats.index(c) for c in ["params", "grads", "master_weights", "optimizer"]]
p, g, m, o = (2, 4, 4, 8) if precision != "fp32" else (4, 4, 0, 8)
total = p + g + m + o

def ideal(stage, nd):  # trident's bytes per parameter, unsharded / sharded
    return total / [total, p + g + (m + o) / nd, p + (g + m + o) / nd, total / nd][stage]

def paper(stage, nd, k=12.0):  # ZeRO (Rajbhandari et al. 2020), Figure 1
    return (4 + k) / [4 + k, 4 + k / nd, 2 + (2 + k) / nd, (4 + k) / nd][stage]

print(f"rank 0 memory by category, MiB: measured (predicted); precision {precision}; model-state "
      f"reduction against ZeRO-0 at the same dp, the ideal for trident's {p}+{g}+{m}+{o} bytes "
      f"per parameter, and the ZeRO paper's ideal (2+2+12 bytes; limits 4x, 8x, Nd x)")
shown = [c for c in cats]
print("| layout | " + " | ".join(shown) + " | model states | reduction | ideal | paper |")
print("|---" * (len(shown) + 5) + "|")
for name, (measured, predicted) in rows.items():
    dp, stage = int(name.split("_")[0][2:]), int(name.split("zero")[1])
    cells = " | ".join(f"{measured[i] / MIB:.3f} ({predicted[i] / MIB:.3f})"
                       for i in range(len(cats)))
    ms = sum(measured[i] for i in states)
    base = sum(rows[f"dp{dp}_zero0"][0][i] for i in states)
    print(f"| {name} | {cells} | {ms / MIB:.3f} | {base / ms:.2f}x | {ideal(stage, dp):.2f}x | "
          f"{paper(stage, dp):.2f}x |")
PY
