#!/usr/bin/env bash
# dp.sync with a Mixture of Experts, whose experts have replicas of their own (expert
# parallelism, or tp ranks routing their own rows): the experts' part of every reduction and
# average runs over those replicas, the dense part over dp.
#  - async applies each gradient one step late: at dp2 x ep2, and at dp2 x tp2 x ep2 with ZeRO-1,
#    it matches the serial delayed run (routing the same groups) to 1e-5, expert counts equal;
#  - local_sgd with local_steps = 1 is sync bit for bit at dp4 x ep2 (two replicas per expert);
#    with local_steps = 2 it takes different (local) steps yet tracks sync, the same bits with its
#    moments offloaded (averaged block by block), and memory as predicted.
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/moe-tiny.toml --set run.steps=20 --set run.eval_every=0
        --set run.checkpoint_every=0 --set train.batch_size=8)
run() {  # name ranks extra...
  local name=$1 ranks=$2
  shift 2
  mpirun -np "$ranks" --oversubscribe "$trident" train "${common[@]}" \
    --set run.out_dir="$work/$name" "$@" > "$work/$name.log"
  echo "$name: $(grep ^PERFORMANCE "$work/$name.log" | grep -o 'final_loss=[0-9.]*')"
}
async=(--set dp.sync=async)
run sync1 1 --set train.micro_batch_size=4
run async1 1 "${async[@]}" --set train.micro_batch_size=4
run async_dp2_ep2 2 "${async[@]}" --set parallel.dp=2 --set parallel.ep=2
run async_dp2_tp2_ep2_zero1 4 "${async[@]}" --set parallel.dp=2 --set parallel.tp=2 \
  --set parallel.sequence_parallel=true --set parallel.ep=2 --set zero.stage=1
dp4=(--set parallel.dp=4 --set parallel.ep=2)
run sync_dp4 4 "${dp4[@]}"
run local1_dp4 4 "${dp4[@]}" --set dp.sync=local_sgd --set dp.local_steps=1
run local2_dp4 4 "${dp4[@]}" --set dp.sync=local_sgd --set dp.local_steps=2
mkdir -p "$work/nvme"
run local2_dp4_nvme 4 "${dp4[@]}" --set dp.sync=local_sgd --set dp.local_steps=2 \
  --set offload.optimizer=nvme --set offload.nvme_dir="$work/nvme" --set offload.buffer_mb=0.01
t() { echo "$work/$1/moe-tiny/timings.h5"; }
$check delayed "$(t sync1)" "$(t async1)"
$check compare "$(t async1)" "$(t async_dp2_ep2)" --min-steps 20 --rtol 1e-5 --norms --routing
$check compare "$(t async1)" "$(t async_dp2_tp2_ep2_zero1)" --min-steps 20 --rtol 1e-5 --norms \
  --routing
$check compare "$(t sync_dp4)" "$(t local1_dp4)" --min-steps 20 --exact --norms --routing
$check differs "$(t sync_dp4)" "$(t local2_dp4)" --from-step 2
$check compare "$(t sync_dp4)" "$(t local2_dp4)" --min-steps 20 --rtol 0.05
$check compare "$(t local2_dp4)" "$(t local2_dp4_nvme)" --min-steps 20 --exact --norms --routing
$check memory "$(t async_dp2_ep2)" --all-exact
$check memory "$(t local2_dp4)" --all-exact
