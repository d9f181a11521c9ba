#!/usr/bin/env bash
# model.vocab_padding pads each rank's vocabulary slice with zero rows that the loss and sampling
# never see: GPT-2 (tied head) and Llama (untied) runs padded to 96 (V = 256 -> 288; at tp 2 to
# 2 x 192) give the unpadded run's losses and gradient norms to 1e-6 in fp32, and its first-step
# gradients of every real row (gathered to global shapes) to 2e-6 of each tensor's largest entry
# (seen: 6.2e-7 with OpenBLAS's SkylakeX kernel; a GEMM with more output columns may block its
# sums otherwise); the memory model predicts
# every category of the padded runs exactly. Checkpoints hold V rows: a padded run's checkpoint
# resumes unpadded (and the reverse) onto the same losses, and `generate` samples the same text
# from either.
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
for run_config in tiny llama-tiny; do
  common=(--config inputs/$run_config.toml --set run.steps=10 --set run.eval_every=0
          --set run.checkpoint_every=5)
  run() {  # run NAME RANKS [args ...]
    local name=$1 ranks=$2
    shift 2
    mpirun -np "$ranks" --oversubscribe "$trident" train "${common[@]}" \
      --set run.out_dir="$work/$run_config/$name" "$@" > "$work/$run_config-$name.log" 2>&1 ||
      { echo "FAIL $run_config $name: trident exited non-zero"; tail -n 20 "$work/$run_config-$name.log"; exit 1; }
  }
  timings() { echo "$work/$run_config/$1/$run_config/timings.h5"; }
  run plain 1 --set model.vocab_padding=1 --dump-grads "$work/$run_config/plain_grads.h5"
  for tp in 1 2; do
    name=padded_tp$tp
    run $name $tp --set model.vocab_padding=96 --set parallel.tp=$tp \
      --dump-grads "$work/$run_config/${name}_grads.h5"
    $check compare "$(timings plain)" "$(timings $name)" --min-steps 10 --rtol 1e-6 --norms
    $check grads "$work/$run_config/plain_grads.h5" "$work/$run_config/${name}_grads.h5" --rtol 2e-6
    $check memory "$(timings $name)" --all-exact
  done
  # A padded checkpoint resumed unpadded, and an unpadded one resumed padded.
  ckpt() { echo "$work/$run_config/$1/$run_config/checkpoints/step_000005.h5"; }
  cp -r "$work/$run_config/padded_tp1" "$work/$run_config/resumed_plain"
  cp -r "$work/$run_config/plain" "$work/$run_config/resumed_padded"
  rm "$work/$run_config"/resumed_*/"$run_config"/checkpoints/step_000010.h5
  run resumed_plain 1 --set model.vocab_padding=1 --resume "$(ckpt resumed_plain)"
  run resumed_padded 1 --set model.vocab_padding=96 --resume "$(ckpt resumed_padded)"
  $check compare "$(timings plain)" "$(timings resumed_plain)" --min-steps 10 --rtol 1e-6
  $check compare "$(timings plain)" "$(timings resumed_padded)" --min-steps 10 --rtol 1e-6
  echo "ok   $run_config: padded checkpoints resume unpadded and the reverse"
done
# Sampling never picks a padded row: the same text from the padded and the unpadded checkpoint.
final() { echo "$work/tiny/$1/tiny/checkpoints/step_000010.h5"; }
for name in plain padded_tp1; do
  "$trident" generate --ckpt "$(final $name)" --prompt "And God said" --tokens 40 --seed 3 \
    > "$work/sample_$name.txt"
done
cmp "$work/sample_plain.txt" "$work/sample_padded_tp1.txt" ||
  { echo "FAIL: the padded run samples other text"; exit 1; }
echo "ok   generate: the same 40 tokens from the padded and the unpadded checkpoint"
