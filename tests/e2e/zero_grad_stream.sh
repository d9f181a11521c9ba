#!/usr/bin/env bash
# ZeRO-2/3 stream the large matrices' gradients out of their GEMMs in blocks of rows
# (parallel.dp_bucket_mb), each reduce-scattered to the ranks whose shards it covers: blocks of
# one row give the training of one block per matrix on GPT (tied wte: the head's blocks, then the
# embedding's) and Llama (untied lm_head, q and kv one matrix), with pipeline stages and tp slices,
# in fp32 and bf16 with a bf16 reduction: the same losses and gradient norms over 6 steps, to 1e-6
# in fp32 and 1e-4 in bf16, not bit for bit, because a BLAS may sum a one-row product in another
# order than the whole matrix's (OpenBLAS's Haswell kernel does; its SkylakeX kernel gives the same
# bits). A block sent to the wrong place or lost moves them by far more. The smaller blocks take
# less gradient memory, and every rank's memory is as predicted.
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
# config:dp:tp:pp:zero:compute:reduce
for run in tiny:2:1:1:2:fp32:fp32 tiny:2:1:2:3:bf16:bf16 llama-tiny:2:2:1:3:fp32:fp32 \
  llama-tiny:2:1:2:2:bf16:fp32; do
  IFS=: read -r config dp tp pp zero compute reduce <<< "$run"
  name=${config}_dp${dp}_tp${tp}_pp${pp}_zero${zero}_${compute}_${reduce}
  for bucket in 25 0.0001; do  # a whole matrix per block; one row (under the 32 channels)
    mpirun -np $((dp * tp * pp)) --oversubscribe "$trident" train --config "inputs/$config.toml" \
      --set run.steps=6 --set run.eval_every=0 --set run.checkpoint_every=0 \
      --set parallel.dp="$dp" --set parallel.tp="$tp" --set parallel.pp="$pp" \
      --set zero.stage="$zero" --set parallel.dp_bucket_mb=$bucket \
      --set precision.compute="$compute" --set precision.grad_reduce="$reduce" \
      --set run.out_dir="$work/${name}_$bucket" > "$work/${name}_$bucket.log"
  done
  echo "== $name: one row per block against one block per matrix"
  run_name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "inputs/$config.toml")
  whole=$work/${name}_25/$run_name rows=$work/${name}_0.0001/$run_name
  $check memory "$rows/timings.h5" --all-exact
  tolerance=$([ "$compute" = fp32 ] && echo 1e-6 || echo 1e-4)
  $check compare "$whole/timings.h5" "$rows/timings.h5" --min-steps 6 --rtol "$tolerance" --norms
  /usr/bin/python3 - "$whole/timings.h5" "$rows/timings.h5" <<'PY'
import sys
import h5py
def grads(path):
    with h5py.File(path, "r") as f:
        cats = f.attrs["memory_categories"].split(",")
        return f["peak_memory_by_category"][-1][:, cats.index("grads")]
whole, rows = grads(sys.argv[1]), grads(sys.argv[2])
assert (rows < whole).all(), f"gradient bytes per rank {rows.tolist()} not below {whole.tolist()}"
print(f"gradient bytes per rank: {whole.tolist()} -> {rows.tolist()}")
PY
done
echo OK
