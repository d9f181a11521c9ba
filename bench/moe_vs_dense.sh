#!/usr/bin/env bash
# A Mixture-of-Experts step against a dense step with the same active parameters and tokens: a
# Llama of 4 layers, C = 256, every MLP either dense (F = 1024) or 8 experts of F_e = 512 with
# top-2 (the router's 8 x 256 aside, the same active weights and GEMM FLOPs per token), the same
# batch. Runs each on 1 rank, on 2 ranks (dp 2 dense; dp 2 with ep 2 for the MoE, whose
# all-to-all is the ep_comm phase) and on tp 2 with sequence parallelism (the MoE with ep 2 over
# the tp ranks, each routing its own rows), and prints the median step time after warm-up, the ratio
# MoE / dense (issue 50 asks for at most 1.3 at E = 8, k = 2) and the MoE run's ep_comm share.
# usage: bench/moe_vs_dense.sh BUILD_DIR [STEPS]
set -euo pipefail
build=${1:?usage: bench/moe_vs_dense.sh BUILD_DIR [STEPS]}
steps=${2:-30}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
source bench/require_build.sh
require_build "$build" "$here"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$build/moe_vs_dense_bench
rm -rf "$out" && mkdir -p "$out"
model=(--set model.name=bench --set model.n_layer=4 --set model.n_embd=256 --set model.n_head=8
       --set model.n_kv_head=4 --set model.ffn_hidden=1024 --set model.block_size=256
       --set train.seq_len=256 --set train.batch_size=8 --set run.steps="$steps"
       --set run.eval_every=0 --set run.checkpoint_every=0 --set run.log_every=1000
       --set run.name=bench)
moe=(--set model.n_experts=8 --set model.top_k=2 --set model.expert_ffn_hidden=512
     --set model.moe_layer_every=1)
files=()
run() {  # name ranks [--set ...]
  local name=$1 ranks=$2
  shift 2
  mpirun -np "$ranks" --oversubscribe "$trident" train --config inputs/moe-tiny.toml "${model[@]}" \
    --set run.out_dir="$out/$name" --set parallel.dp="$ranks" "$@" > "$out/$name.log"
  files+=("$name=$out/$name/bench/timings.h5")
}
run dense_1 1 --set model.n_experts=0
run moe_1 1 "${moe[@]}"
run dense_2 2 --set model.n_experts=0
run moe_ep2_2 2 "${moe[@]}" --set parallel.ep=2
tp2=(--set parallel.dp=1 --set parallel.tp=2 --set parallel.sequence_parallel=true)
run dense_tp2 2 --set model.n_experts=0 "${tp2[@]}"
run moe_ep2_tp2 2 "${moe[@]}" --set parallel.ep=2 "${tp2[@]}"
/usr/bin/python3 - "${files[@]}" <<'PY'
import sys
import h5py
import numpy as np

runs = {}
for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    with h5py.File(path, "r") as f:
        phases = f.attrs["phases"]
        phases = (phases.decode() if isinstance(phases, bytes) else phases).split(",")
        warm = min(5, len(f["step"]) - 1)
        step = np.asarray(f["step_seconds_max"][warm:])
        ep = np.asarray(f["phase_seconds"][warm:, :, phases.index("ep_comm")]).max(axis=1)
        runs[name] = dict(step=float(np.median(step)), ep=float(np.median(ep)),
                          params=int(f.attrs["parameters"]), blas=f.attrs["blas"],
                          layout=f.attrs["layout"])
print(f"BLAS: {runs['dense_1']['blas']}")
print("| run | layout | parameters | median ms/step | MoE / dense | ep_comm ms (share) |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for name, r in runs.items():
    dense = runs[name.replace("moe_ep2", "dense").replace("moe", "dense")]
    if name.startswith("moe_ep2_tp2"):
        dense = runs["dense_tp2"]
    ratio = r["step"] / dense["step"]
    print(f"| {name} | {r['layout']} | {r['params']:,} | {r['step'] * 1e3:.1f} | "
          f"{ratio:.3f} | {r['ep'] * 1e3:.2f} ({100 * r['ep'] / r['step']:.1f}%) |")
for label, moe, dense in (("ranks=1", "moe_1", "dense_1"), ("ranks=2", "moe_ep2_2", "dense_2"),
                          ("ranks=2 tp=2", "moe_ep2_tp2", "dense_tp2")):
    ratio = runs[moe]["step"] / runs[dense]["step"]
    print(f"MOE_VS_DENSE {label} ratio={ratio:.3f} target<=1.3 "
          f"{'met' if ratio <= 1.3 else 'NOT met'}")
PY
