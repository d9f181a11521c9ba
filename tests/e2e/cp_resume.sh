#!/usr/bin/env bash
# A context-parallel checkpoint holds global tensors: train 20 steps at cp2 with ZeRO-1 (the
# optimizer states sharded over the two cp replicas), save at step 10, and resume at cp2 (the
# next 10 losses bit for bit), serially and at dp2 x cp2 with ZeRO-3 (to 1e-5), for GPT-2 and Llama.
set -euo pipefail
trident=$1 src=$2 work=$3
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
for run_config in tiny llama-tiny; do
  common=(--config inputs/$run_config.toml --set run.steps=20 --set run.checkpoint_every=10
          --set run.eval_every=0 --set train.batch_size=8)
  train() {  # name ranks dp cp zero [extra...]
    local name=$1 ranks=$2 dp=$3 cp=$4 zero=$5; shift 5
    mpirun -np "$ranks" --oversubscribe "$trident" train "${common[@]}" \
      --set run.out_dir="$work/$run_config/$name" --set parallel.dp="$dp" --set parallel.cp="$cp" \
      --set zero.stage="$zero" "$@" > "$work/$run_config.$name.log"
  }
  train full 2 1 2 1
  ckpt="$work/$run_config/full/$run_config/checkpoints/step_000010.h5"
  for resumed in "same exact 2 1 2 1" "serial rtol 1 1 1 0" "dp2_cp2_zero3 rtol 4 2 2 3"; do
    read -r name mode ranks dp cp zero <<<"$resumed"
    train "$name" "$ranks" "$dp" "$cp" "$zero" --resume "$ckpt"
    echo "$run_config: cp2 checkpoint resumed as $name"
    $check compare "$work/$run_config/full/$run_config/timings.h5" \
      "$work/$run_config/$name/$run_config/timings.h5" --from-step 11 --min-steps 10 \
      $([ "$mode" = exact ] && echo --exact || echo --rtol 1e-5)
  done
done
echo "context-parallel resume: ok"
