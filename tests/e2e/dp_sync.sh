#!/usr/bin/env bash
# Synchronous vs asynchronous data parallelism (dp.sync):
#  - async applies each gradient one step late: its first step makes no update (norm 0), its
#    second applies the first step's gradient (the sync run's first norm, bit for bit), and at
#    dp 2 (ZeRO-0 and ZeRO-1 with tp 2) it matches the serial delayed run to 1e-5;
#  - local_sgd with local_steps = 1 is sync bit for bit at dp 2; at dp 1 any local_steps is;
#  - local_sgd with local_steps = 2 at dp 2 takes different (local) steps, yet tracks sync, the
#    same bits with its moments offloaded (averaged block by block), and memory as predicted;
#  - local_sgd under bf16 averages the master weights (the fp32 values their two halves hold)
#    into every replica: a run resumed from the checkpoint after an average (which holds one
#    replica's weights) ends with the bits of the run that went on; memory as predicted.
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.steps=20 --set run.eval_every=0
        --set run.checkpoint_every=0 --set train.batch_size=8)
run() {  # name ranks extra...
  local name=$1 ranks=$2
  shift 2
  mpirun -np "$ranks" --oversubscribe "$trident" train "${common[@]}" \
    --set run.out_dir="$work/$name" "$@" > "$work/$name.log"
  echo "$name: $(grep ^PERFORMANCE "$work/$name.log" | grep -o 'final_loss=[0-9.]*')"
}
run sync1 1
run async1 1 --set dp.sync=async
run async2 2 --set dp.sync=async --set parallel.dp=2
run async4_zero1 4 --set dp.sync=async --set parallel.dp=2 --set parallel.tp=2 --set zero.stage=1
run sync2 2 --set parallel.dp=2
run local1_dp2 2 --set dp.sync=local_sgd --set dp.local_steps=1 --set parallel.dp=2
run local3_dp1 1 --set dp.sync=local_sgd --set dp.local_steps=3
run local2_dp2 2 --set dp.sync=local_sgd --set dp.local_steps=2 --set parallel.dp=2
# Moments offloaded to files and averaged block by block through a small streaming buffer.
mkdir -p "$work/nvme"
run local2_dp2_nvme 2 --set dp.sync=local_sgd --set dp.local_steps=2 --set parallel.dp=2 \
  --set offload.optimizer=nvme --set offload.nvme_dir="$work/nvme" --set offload.buffer_mb=0.01
local_bf16=(--set dp.sync=local_sgd --set dp.local_steps=3 --set parallel.dp=2
            --set precision.compute=bf16 --set run.steps=10 --set run.checkpoint_every=5)
run local3_dp2_bf16 2 "${local_bf16[@]}"
run local3_dp2_bf16_resumed 2 "${local_bf16[@]}" \
  --resume "$work/local3_dp2_bf16/tiny/checkpoints/step_000005.h5"
t() { echo "$work/$1/tiny/timings.h5"; }
$check delayed "$(t sync1)" "$(t async1)"
$check compare "$(t async1)" "$(t async2)" --min-steps 20 --rtol 1e-5 --norms
$check compare "$(t async1)" "$(t async4_zero1)" --min-steps 20 --rtol 1e-5 --norms
$check compare "$(t sync2)" "$(t local1_dp2)" --min-steps 20 --exact --norms
$check compare "$(t sync1)" "$(t local3_dp1)" --min-steps 20 --exact --norms
$check differs "$(t sync2)" "$(t local2_dp2)" --from-step 2
$check compare "$(t sync2)" "$(t local2_dp2)" --min-steps 20 --rtol 0.05
$check compare "$(t local2_dp2)" "$(t local2_dp2_nvme)" --min-steps 20 --exact --norms
$check memory "$(t async2)" --all-exact
$check memory "$(t local2_dp2)" --all-exact
$check params-equal "$work/local3_dp2_bf16/tiny/checkpoints/step_000010.h5" \
  "$work/local3_dp2_bf16_resumed/tiny/checkpoints/step_000010.h5"
$check memory "$(t local3_dp2_bf16)" --all-exact
