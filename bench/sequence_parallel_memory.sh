#!/usr/bin/env bash
# Measures activation memory per layer with and without sequence parallelism at tp 1, 2, 4
# against Korthikanti et al. 2022's Table 2 formula and trident's memory model.
#
# usage: bench/sequence_parallel_memory.sh BUILD_DIR
#   env: TP_LIST="1 2 4"  PRECISION=bf16  RECOMPUTE=none  SEQ=128  MICRO=2  LAYERS="2 4"
#        PYTHON=/usr/bin/python3  OUT=BUILD_DIR/sequence_parallel_memory
# Trains one step of the gpt2-124m layer shape (C=768, NH=12; bench/pipeline_bubble.toml, V=256)
# at dp = pp = 1 and tp ranks, once per layer count in LAYERS, and takes the activation bytes
# every rank allocated (the memory ledger's peak, timings.h5). The difference between the two
# layer counts, divided by the layers added, is one layer's activations for one micro-batch of
# MICRO x SEQ tokens, with the embedding and head taken out. It is set beside `trident plan
# --config`'s per-layer figures (trident's model; the paper's formula, which assumes 16-bit
# activations, dropout masks and the attention-dropout output that trident does not keep) and the
# memory model's whole-rank prediction. Memory does not depend on the CPU or its BLAS kernel.
set -euo pipefail

build=${1:?usage: bench/sequence_parallel_memory.sh BUILD_DIR}
build=$(cd "$build" && pwd)
tp_list=${TP_LIST:-"1 2 4"}
precision=${PRECISION:-bf16}
recompute=${RECOMPUTE:-none}
seq=${SEQ:-128}
micro=${MICRO:-2}
read -r -a layers <<<"${LAYERS:-2 4}"
python=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
# shellcheck source=bench/require_build.sh
source "$here/require_build.sh"
require_build "$build" "$root"
if ((${#layers[@]} != 2 || layers[1] <= layers[0])); then
  echo "error: LAYERS must be two increasing layer counts, e.g. \"2 4\"" >&2
  exit 2
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
out=${OUT:-$build/sequence_parallel_memory}
log=$out.log
rm -rf "$out"
mkdir -p "$out"
: >"$log"
cd "$root"
echo "sequence parallelism, activation memory: gpt2-124m layer shape (C=768 NH=12), s=$seq," \
  "b=$micro, $precision, recompute $recompute, layers ${layers[*]}; raw output: $log"
rows=$out/rows.csv
echo "tp,sp,layers,measured_bytes,predicted_bytes,trident_layer_bytes,paper_layer_bytes" >"$rows"
for tp in $tp_list; do
  for sp in false true; do
    [[ $tp == 1 && $sp == true ]] && continue
    for L in "${layers[@]}"; do
      name=tp${tp}_sp${sp}_L${L}
      settings=(--set model.n_layer="$L" --set model.vocab_size=256 --set parallel.tp="$tp"
        --set parallel.dp=1 --set parallel.pp=1 --set parallel.sequence_parallel="$sp"
        --set precision.compute="$precision" --set recompute.policy="$recompute"
        --set train.seq_len="$seq" --set train.micro_batch_size="$micro"
        --set train.batch_size="$micro")
      echo "== $name" >>"$log"
      if ! mpirun -np "$tp" --oversubscribe "$trident" train --config bench/pipeline_bubble.toml \
        "${settings[@]}" --set run.name="$name" --set run.out_dir="$out" --set run.steps=1 \
        --set run.checkpoint_every=-1 >>"$log" 2>&1; then
        echo "failed; see $log" >&2
        exit 1
      fi
      plan=$("$trident" plan --config bench/pipeline_bubble.toml "${settings[@]}" --top 0 \
        --batch-tokens 1048576 2>>"$log")
      echo "$plan" >>"$log"
      line=$(grep '^CONFIG_LAYER_ACTIVATIONS' <<<"$plan")
      ours=$(sed -n 's/.*trident_bytes=\([0-9]*\).*/\1/p' <<<"$line")
      paper=$(sed -n 's/.*paper_bytes=\([0-9]*\).*/\1/p' <<<"$line")
      "$python" - "$out/$name/timings.h5" "$tp" "$sp" "$L" "$ours" "$paper" >>"$rows" <<'EOF'
import sys
import h5py
path, tp, sp, L, ours, paper = sys.argv[1:]
with h5py.File(path, "r") as f:
    cats = f.attrs["memory_categories"].split(",")
    k = cats.index("activations")
    measured = f["peak_memory_by_category"][:, :, k].max()
    predicted = f["predicted_memory_bytes"][:, k].max()
print(f"{tp},{sp},{L},{measured:.0f},{predicted:.0f},{ours},{paper}")
EOF
    done
  done
done
"$python" - "$rows" "${layers[0]}" "${layers[1]}" <<'EOF'
import sys
import pandas as pd
rows, l0, l1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
df = pd.read_csv(rows)
out = []
for (tp, sp), g in df.groupby(["tp", "sp"], sort=True):
    a, b = g[g.layers == l0].iloc[0], g[g.layers == l1].iloc[0]
    per_layer = (b.measured_bytes - a.measured_bytes) / (l1 - l0)
    out.append({"tp": tp, "sequence_parallel": "on" if sp else "off",
                "measured_MB": per_layer / 1e6, "trident_model_MB": b.trident_layer_bytes / 1e6,
                "paper_MB": b.paper_layer_bytes / 1e6,
                "measured/paper": per_layer / b.paper_layer_bytes,
                "rank_activations_MB": b.measured_bytes / 1e6,
                "predicted_MB": b.predicted_bytes / 1e6,
                "model_exact": bool(b.measured_bytes == b.predicted_bytes
                                    and a.measured_bytes == a.predicted_bytes)})
t = pd.DataFrame(out)
base = t[t.tp == 1].measured_MB.iloc[0] if (t.tp == 1).any() else float("nan")
t["vs_tp1"] = t.measured_MB / base
print(f"one layer, one micro-batch (measured: rank activations at {l1} minus {l0} layers, per layer);"
      f" rank_activations / predicted at {l1} layers:")
print(t.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
if not t.model_exact.all():
    sys.exit("the memory model missed a run's activations")
sp = t[t.sequence_parallel == "on"]
if ((sp.vs_tp1 - 1 / sp.tp).abs() > 1e-9).any():
    sys.exit("sequence parallelism did not divide a layer's activations by tp")
EOF
