#!/usr/bin/env bash
# The flagship check for one layout: 20 steps of the tiny model at dp x tp x pp (schedule, v,
# ZeRO stage, offload: nvme streams the moments through 10 KiB buffers, nvme+params the ZeRO-3
# parameter shards too; sp 1 turns on sequence parallelism; ep > 1 splits the experts) give the serial run's losses and
# global gradient norms (the clipping norm, reduced over every axis and shard) to a relative
# 1e-5, and the first step's gradients, gathered to global shapes, match the serial ones to 1e-5
# of each tensor's largest entry. Small dp buckets (20 KiB) so the overlapped bucketed all-reduce
# runs many buckets per step. A Mixture-of-Experts model routes (and balances) each micro-batch
# of one data-parallel replica as a group, so its serial run takes the layout's micro-batches,
# and its expert counts and dropped shares must then be the serial run's at every step. cp > 1
# splits every sequence over cp ranks (context parallelism, parallel.cp_comm from LAYOUT_SETS).
# LAYOUT_SETS (environment): more KEY=VALUE overrides for both runs.
set -euo pipefail
trident=$1 src=$2 work=$3 dp=$4 tp=$5 pp=$6 schedule=$7 v=$8 zero=${9:-0} offload=${10:-none}
sp=${11:-0} ep=${12:-1} cp=${13:-1}
run_config=${TRIDENT_TEST_RUN:-tiny}  # inputs/<run_config>.toml: tiny (GPT-2) or llama-tiny
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
ranks=$((dp * cp * tp * pp))
layers=$((pp * v > 4 ? pp * v : 4))  # the tiny model has 4 layers; interleaving at pp 4 needs 8
common=(--config inputs/$run_config.toml --set run.steps=20 --set run.eval_every=0
        --set run.checkpoint_every=0 --set train.batch_size=8 --set model.n_layer="$layers")
for extra in ${LAYOUT_SETS:-}; do common+=(--set "$extra"); done
# Two micro-batches per pipeline (four for interleaved, which needs a multiple of pp).
micro=$((8 / dp / (pp > 1 ? (v > 1 ? 2 * pp : pp) : 1)))
serial_micro=0
if "$trident" config --config "inputs/$run_config.toml" | grep -q '^n_experts = [1-9]'; then
  serial_micro=$micro
fi
"$trident" train "${common[@]}" --set run.out_dir="$work/serial" \
  --set train.micro_batch_size="$serial_micro" --dump-grads "$work/serial_grads.h5" > "$work/serial.log"
mpirun -np "$ranks" --oversubscribe "$trident" train "${common[@]}" \
  --set run.out_dir="$work/layout" --set parallel.dp="$dp" --set parallel.tp="$tp" \
  --set parallel.pp="$pp" --set parallel.schedule="$schedule" --set parallel.virtual_stages="$v" \
  --set train.micro_batch_size="$micro" --set parallel.dp_bucket_mb=0.02 --set zero.stage="$zero" \
  --set offload.optimizer="${offload%+params}" --set offload.nvme_dir="$work" --set offload.buffer_mb=0.01 \
  --set offload.params="$([ "$offload" = nvme+params ] && echo nvme || echo none)" \
  --set parallel.sequence_parallel="$([ "$sp" = 1 ] && echo true || echo false)" \
  --set parallel.ep="$ep" --set parallel.cp="$cp" \
  --dump-grads "$work/layout_grads.h5" > "$work/layout.log"
grep "^layout" "$work/layout.log"
$check schema "$work/layout/$run_config/timings.h5" --steps 20 --ranks "$ranks"
$check compare "$work/serial/$run_config/timings.h5" "$work/layout/$run_config/timings.h5" --min-steps 20 --rtol 1e-5 --norms --routing
$check grads "$work/serial_grads.h5" "$work/layout_grads.h5" --rtol 1e-5
$check memory "$work/layout/$run_config/timings.h5" --all-exact
