#!/usr/bin/env bash
# Per-rank memory by category at dp = 1, 2, 4, 8 and each built ZeRO stage, measured (trident's
# allocation ledger) next to the memory model's prediction and the ideal reduction of the
# sharded category (Nd x for the optimizer states under ZeRO-1).
# usage: bench/zero_memory.sh BUILD_DIR [CONFIG]
set -euo pipefail
build=${1:?usage: bench/zero_memory.sh BUILD_DIR [CONFIG]}
config=${2:-inputs/small.toml}
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
      --set train.batch_size=8 --set zero.stage="$stage" --set run.out_dir="$out/$name" \
      --set run.name=run > "$out/$name.log"
    rm -rf "$out/$name/run/checkpoints"
    files+=("$name=$out/$name/run/timings.h5")
  done
done
/usr/bin/python3 - "${files[@]}" <<'PY'
import sys
import h5py

MIB = 1048576.0
rows = []
for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    with h5py.File(path, "r") as f:
        cats = f.attrs["memory_categories"].split(",")
        measured = f["peak_memory_by_category"][-1][0]  # rank 0
        predicted = f["predicted_memory_bytes"][0]
    rows.append((name, cats, measured, predicted))
base = {r[0]: r for r in rows}
print("rank 0 memory by category, MiB: measured (predicted); optimizer reduction vs dp=1 and the ideal")
cats = rows[0][1]
shown = [c for c in cats if c != "master_weights"]
print(f"{'layout':<12}" + "".join(f"{c:>24}" for c in shown) + f"{'total':>22}{'opt. reduction':>16}{'ideal':>7}")
for name, _, measured, predicted in rows:
    dp = int(name.split("_")[0][2:])
    stage = int(name.split("zero")[1])
    cells = ""
    for c in shown:
        i = cats.index(c)
        cells += f"{measured[i] / MIB:>13.3f} ({predicted[i] / MIB:>7.3f})"
    opt = cats.index("optimizer")
    ref = base[f"dp1_zero{stage}"][2][opt]
    ideal = dp if stage >= 1 else 1  # the optimizer states shrink Nd-fold from stage 1 on
    print(f"{name:<12}{cells}{measured.sum() / MIB:>12.3f} ({predicted.sum() / MIB:>7.3f})"
          f"{ref / measured[opt]:>15.2f}x{ideal:>6}x")
PY
