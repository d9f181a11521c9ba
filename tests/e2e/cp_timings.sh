#!/usr/bin/env bash
# Context parallelism's timings: every rank's cp_bytes at every step equal the formula (keys and
# values per layer and micro-batch, forward and backward, their gradients on the ring's cp hops),
# for the ring at cp2 x tp2 (one key/value head per tp rank), the all-gather with full
# recomputation and bf16 at cp4, and the waits are timed as the cp_comm phase. The evaluation's
# loss at cp2 (every rank's tokens over the global count) equals the serial run's.
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/llama-tiny.toml --set run.steps=3 --set run.eval_every=0
        --set run.checkpoint_every=0)
run() {  # name ranks overrides...
  local name=$1 ranks=$2; shift 2
  mpirun -np "$ranks" --oversubscribe "$trident" train "${common[@]}" \
    --set run.out_dir="$work/$name" "$@" > "$work/$name.log"
  $check cp-bytes "$work/$name/llama-tiny/timings.h5"
  $check phase-positive "$work/$name/llama-tiny/timings.h5" cp_comm
}
run ring_tp2 4 --set parallel.cp=2 --set parallel.tp=2 --set parallel.sequence_parallel=true
run allgather_recompute 2 --set parallel.cp=2 --set parallel.cp_comm=allgather \
  --set recompute.policy=full
run ring_bf16_cp4 4 --set parallel.cp=4 --set precision.compute=bf16 --set train.micro_batch_size=4
"$trident" train "${common[@]}" --set run.eval_every=1 --set run.out_dir="$work/serial_eval" \
  > "$work/serial_eval.log"
mpirun -np 2 --oversubscribe "$trident" train "${common[@]}" --set run.eval_every=1 \
  --set parallel.cp=2 --set run.out_dir="$work/cp2_eval" > "$work/cp2_eval.log"
$check compare "$work/serial_eval/llama-tiny/timings.h5" "$work/cp2_eval/llama-tiny/timings.h5" \
  --min-steps 3 --val
echo "context-parallel timings: ok"
