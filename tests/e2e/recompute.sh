#!/usr/bin/env bash
# Activation recomputation on one layout (dp x tp x pp, schedule, v, ZeRO stage, precision):
# selective, full, and full on the first block of each chunk give losses and first-step
# gradients bit-identical to no recomputation (in fp32, and in bf16 / fp16, whose recomputation
# rounds as the first forward did); full and partial full time the recompute phase, full keeps
# less activation memory than none and than partial full; selective recomputes nothing (the tiled
# attention keeps no probabilities to drop); the memory model predicts each run's memory. A last
# argument "sp" turns on sequence parallelism.
set -euo pipefail
trident=$1 src=$2 work=$3 dp=$4 tp=$5 pp=$6 schedule=$7 v=$8 zero=${9:-0} precision=${10:-fp32}
sp=$([ "${11:-}" = sp ] && echo true || echo false)
run_config=${TRIDENT_TEST_RUN:-tiny}  # inputs/<run_config>.toml: tiny (GPT-2) or llama-tiny
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
ranks=$((dp * tp * pp))
layers=$((pp * v * 2))  # two blocks per chunk, so "the first block" is a strict subset
micro=$((8 / dp / (pp > 1 ? (v > 1 ? 2 * pp : pp) : 1)))
run() {  # name, extra --set arguments
  local name=$1
  shift
  mpirun -np "$ranks" --oversubscribe "$trident" train --config inputs/$run_config.toml \
    --set run.steps=8 --set run.eval_every=0 --set run.checkpoint_every=0 \
    --set train.batch_size=8 --set model.n_layer="$layers" --set run.out_dir="$work/$name" \
    --set parallel.dp="$dp" --set parallel.tp="$tp" --set parallel.pp="$pp" \
    --set parallel.schedule="$schedule" --set parallel.virtual_stages="$v" \
    --set train.micro_batch_size="$micro" --set zero.stage="$zero" \
    --set precision.compute="$precision" --set parallel.sequence_parallel="$sp" "$@" \
    --dump-grads "$work/$name.grads.h5" > "$work/$name.log"
  $check memory "$work/$name/$run_config/timings.h5" --all-exact
}
run none
run selective --set recompute.policy=selective
run full --set recompute.policy=full
run full1 --set recompute.policy=full --set recompute.layers=1
for name in selective full full1; do
  echo "== $name"
  $check compare "$work/none/$run_config/timings.h5" "$work/$name/$run_config/timings.h5" --min-steps 8 --exact --norms
  $check grads "$work/none.grads.h5" "$work/$name.grads.h5" --rtol 0
done
for name in full full1; do $check phase-positive "$work/$name/$run_config/timings.h5" recompute; done
for name in none selective; do $check phase-zero "$work/$name/$run_config/timings.h5" recompute; done
$check activations-less "$work/none/$run_config/timings.h5" "$work/full/$run_config/timings.h5"
$check activations-less "$work/full1/$run_config/timings.h5" "$work/full/$run_config/timings.h5"
