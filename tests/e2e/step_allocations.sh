#!/usr/bin/env bash
# No memory is allocated or freed inside a training step once the first two have run (on a GPU
# a View made in the step is a cudaMalloc and freeing it a cudaFree, which waits for the whole
# device): `trident train --report-allocations` over layouts that exercise every strategy, the
# pipeline schedules, recomputation, 16-bit compute, offload, asynchronous and local SGD and a
# skipped fp16 step, with validation and checkpoints every two steps (they lie between steps).
# Every rank must report, with 4 steps after the warm-up and nothing allocated or freed in them.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work/nvme" && cd "$src"
steps=6
run() {  # run NAME RANKS [--set ...]: trains, then checks every rank's STEP_ALLOCATIONS line
  local name=$1 ranks=$2
  shift 2
  mpirun -np "$ranks" --oversubscribe "$trident" train --config inputs/tiny.toml \
    --set run.steps=$steps --set run.eval_every=2 --set run.checkpoint_every=2 \
    --set run.out_dir="$work/$name" --report-allocations "$@" > "$work/$name.log" 2>&1 ||
    { echo "FAIL $name: trident exited non-zero"; tail -n 20 "$work/$name.log"; exit 1; }
  local reports clean
  reports=$(grep -c '^STEP_ALLOCATIONS ' "$work/$name.log" || true)
  clean=$(grep -c "^STEP_ALLOCATIONS rank=[0-9]* steps=$steps first_step=1 warmup_allocations=[0-9]* allocations_after_warmup=0 frees_after_warmup=0 bytes_after_warmup=0$" \
    "$work/$name.log" || true)
  if [[ $reports != "$ranks" || $clean != "$ranks" ]]; then
    echo "FAIL $name: $reports of $ranks ranks reported, $clean of them clean:"
    grep '^STEP_ALLOCATION' "$work/$name.log"
    exit 1
  fi
  echo "ok   $name: $ranks ranks, steps 3-$steps allocate nothing"
}
run serial 1
run dp2_zero0_bf16_reduce 2 --set parallel.dp=2 --set precision.compute=bf16 \
  --set precision.grad_reduce=bf16 --set parallel.dp_bucket_mb=0.02
run dp2_zero3_nvme 2 --set parallel.dp=2 --set zero.stage=3 --set offload.params=nvme \
  --set offload.optimizer=nvme --set offload.nvme_dir="$work/nvme" --set offload.buffer_mb=0.01
run tp2_sp_full_recompute 2 --set parallel.tp=2 --set parallel.sequence_parallel=true \
  --set recompute.policy=full --set precision.compute=bf16
run pp2_zb_h1 2 --set parallel.pp=2 --set parallel.schedule=zb_h1 --set train.micro_batch_size=1
run pp2_interleaved_zero2 4 --set parallel.pp=2 --set parallel.dp=2 --set zero.stage=2 \
  --set parallel.schedule=interleaved --set parallel.virtual_stages=2 \
  --set train.micro_batch_size=2
run dp2_async 2 --set parallel.dp=2 --set dp.sync=async
run dp2_local_sgd 2 --set parallel.dp=2 --set dp.sync=local_sgd --set dp.local_steps=2
run dp2_fp16_overflow 2 --set parallel.dp=2 --set precision.compute=fp16 --inject-overflow 4:1
grep -q 'fp16 gradient overflow: step skipped' "$work/dp2_fp16_overflow.log" ||
  { echo "FAIL dp2_fp16_overflow: no step was skipped"; exit 1; }
run dp2_tp2_pp2_zero1_sp 8 --set parallel.dp=2 --set parallel.tp=2 --set parallel.pp=2 \
  --set zero.stage=1 --set parallel.sequence_parallel=true --set precision.compute=bf16
