#!/usr/bin/env bash
# Context parallelism on a long sequence: a tiny Llama (4 layers, C = 64, 4 heads of 16, 2
# key/value heads) at S = 4096, one micro-batch of one sequence, one thread per rank.
#  memory: a rank's activations and workspace at cp 4 (ring) against the memory model's claim for
#          it, a cp 1 run at S / 4 plus the key/value chunks in flight and backward's sums
#          (model/context_parallel.hpp: 2 n_kv stored and n_q + 3 n_kv fp32) and the rope table's
#          other positions; issue 51 asks for within 5%.
#  time:   a cp 2 step on 2 ranks against half the serial step at the same S (issue 51 asks for
#          at most 1.3), with the ring's exposed communication (the cp_comm phase) beside it.
#  balance: each rank's forward + backward seconds at cp 4, balanced chunks against contiguous
#          blocks (parallel.cp_split; the last block's rank does 7 times the first's attention).
# usage: bench/context_parallel.sh BUILD_DIR [STEPS]
set -euo pipefail
build=${1:?usage: bench/context_parallel.sh BUILD_DIR [STEPS]}
steps=${2:-6}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
source bench/require_build.sh
require_build "$build" "$here"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
out=$build/context_parallel_bench
rm -rf "$out" && mkdir -p "$out"
S=4096
model=(--set model.name=bench --set model.n_layer=4 --set model.n_embd=64 --set model.n_head=4
       --set model.n_kv_head=2 --set model.ffn_hidden=256 --set model.block_size=$S
       --set train.batch_size=1 --set train.micro_batch_size=1 --set run.steps="$steps"
       --set run.eval_every=0 --set run.checkpoint_every=0 --set run.log_every=1000
       --set run.name=bench)
files=()
run() {  # name ranks seq_len [--set ...]
  local name=$1 ranks=$2 seq=$3
  shift 3
  mpirun -np "$ranks" --oversubscribe "$trident" train --config inputs/llama-tiny.toml \
    "${model[@]}" --set train.seq_len="$seq" --set run.out_dir="$out/$name" "$@" \
    > "$out/$name.log"
  files+=("$name=$out/$name/bench/timings.h5")
}
run serial 1 $S
run cp2 2 $S --set parallel.cp=2
run cp4 4 $S --set parallel.cp=4
run cp4_contiguous 4 $S --set parallel.cp=4 --set parallel.cp_split=contiguous
run quarter 1 $((S / 4))
/usr/bin/python3 - "$S" "${files[@]}" <<'PY'
import sys
import h5py
import numpy as np

S = int(sys.argv[1])
runs = {}
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    with h5py.File(path, "r") as f:
        attr = lambda k: f.attrs[k].decode() if isinstance(f.attrs[k], bytes) else f.attrs[k]
        phases = attr("phases").split(",")
        cats = attr("memory_categories").split(",")
        warm = min(2, len(f["step"]) - 1)
        peak = np.asarray(f["peak_memory_by_category"][-1])  # [ranks, categories]
        runs[name] = dict(
            step=float(np.median(f["step_seconds_max"][warm:])),
            cp_comm=float(np.median(np.asarray(
                f["phase_seconds"][warm:, :, phases.index("cp_comm")]).max(axis=1))),
            compute=np.median(np.asarray(f["phase_seconds"][warm:, :, phases.index("forward")]) +
                              np.asarray(f["phase_seconds"][warm:, :, phases.index("backward")]),
                              axis=0),
            activations=float(peak[:, cats.index("activations")].max()),
            workspace=float(peak[:, cats.index("workspace")].max()),
            blas=attr("blas"), layout=attr("layout"))
print(f"BLAS: {runs['serial']['blas']}; S = {S}, one sequence, one thread per rank")
# The model's claim for a cp 4 rank: the cp 1 run at S / 4, plus what cp adds (fp32 here): the
# key/value chunks in flight and backward's sums for B = 1, T = S / 4, NH = 4, KVH = 2, HS = 16,
# and the rope table's other 3 S / 4 positions (HS / 2 cosines and sines each).
T, NH, KVH, HS = S // 4, 4, 2, 16
n_q, n_kv = T * NH * HS, T * 2 * KVH * HS
added = 4 * (2 * n_kv + n_q + 3 * n_kv) + 4 * (S - T) * HS
q, c = runs["quarter"], runs["cp4"]
claim = q["activations"] + q["workspace"] + added
measured = c["activations"] + c["workspace"]
print("| run | layout | activations MiB | workspace MiB | median s/step | cp_comm s |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for name, r in runs.items():
    print(f"| {name} | {r['layout']} | {r['activations'] / 2**20:.2f} | "
          f"{r['workspace'] / 2**20:.2f} | {r['step']:.3f} | {r['cp_comm']:.4f} |")
ratio = measured / claim
print(f"CP_MEMORY cp=4 measured_mib={measured / 2**20:.3f} claim_mib={claim / 2**20:.3f} "
      f"ratio={ratio:.4f} target=within 5% {'met' if abs(ratio - 1) <= 0.05 else 'NOT met'}")
for name in ("cp4", "cp4_contiguous"):
    compute = runs[name]["compute"]
    print(f"CP_BALANCE {name} forward_backward_s_per_rank="
          f"{','.join(f'{x:.3f}' for x in compute)} max_over_min={compute.max() / compute.min():.2f}")
half = runs["serial"]["step"] / 2
ratio = runs["cp2"]["step"] / half
print(f"CP_STEP cp=2 step_s={runs['cp2']['step']:.3f} half_serial_s={half:.3f} "
      f"ratio={ratio:.3f} cp_comm_s={runs['cp2']['cp_comm']:.4f} target<=1.3 "
      f"{'met' if ratio <= 1.3 else 'NOT met'}")
PY
