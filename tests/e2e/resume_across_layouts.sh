#!/usr/bin/env bash
# A checkpoint holds global tensors whatever wrote it: train 10 steps at 2x2x2 (dp x tp x pp) with
# ZeRO-1, save, and resume at other layouts, stages and offload, among them 1x4x2 ZeRO-3, 4x1x2
# ZeRO-2, 1x1x1 and 8x1x1; the next 10 losses match the uninterrupted run (bit for bit on the
# same layout, to 1e-5 across layouts). TRIDENT_TEST_RUN names the run config (default tiny),
# RESUME_LAYOUTS the resumed layouts to run (default all).
set -euo pipefail
trident=$1 src=$2 work=$3
run_config=${TRIDENT_TEST_RUN:-tiny}  # inputs/<run_config>.toml: tiny (GPT-2) or llama-tiny
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/$run_config.toml --set run.steps=20 --set run.checkpoint_every=10
        --set run.eval_every=0 --set train.batch_size=8)
train() {  # name ranks dp tp pp zero [extra...]
  local name=$1 ranks=$2 dp=$3 tp=$4 pp=$5 zero=$6; shift 6
  mpirun -np "$ranks" --oversubscribe "$trident" train "${common[@]}" \
    --set run.out_dir="$work/$name" --set parallel.dp="$dp" --set parallel.tp="$tp" \
    --set parallel.pp="$pp" --set zero.stage="$zero" "$@" > "$work/$name.log"
}
train full 8 2 2 2 1
ckpt="$work/full/$run_config/checkpoints/step_000010.h5"
# resume NAME exact|rtol RANKS DP TP PP ZERO [extra...]: from the step-10 checkpoint, the next 10
# losses against the uninterrupted run; only the names in $RESUME_LAYOUTS when it is set.
resume() {
  local name=$1 mode=$2; shift 2
  [ -z "${RESUME_LAYOUTS:-}" ] || [[ " $RESUME_LAYOUTS " == *" $name "* ]] || return 0
  train "$name" "$@" --resume "$ckpt"
  $check compare "$work/full/$run_config/timings.h5" "$work/$name/$run_config/timings.h5" \
    --from-step 11 --min-steps 10 $([ "$mode" = exact ] && echo --exact || echo --rtol 1e-5)
}
resume same exact 8 2 2 2 1
resume serial rtol 1 1 1 1 0
resume dp4_zero1 rtol 4 4 1 1 1
resume dp2_zero2 rtol 8 2 2 2 2 --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2 --set train.micro_batch_size=1
resume dp4_zero3 rtol 8 4 1 2 3
resume zero3_offload rtol 8 2 2 2 3 --set offload.optimizer=nvme \
  --set offload.params=nvme --set offload.nvme_dir="$work" --set offload.buffer_mb=0.01
resume tp4_pp2_zero3 rtol 8 1 4 2 3
resume dp4_pp2_zero2 rtol 8 4 1 2 2
resume dp8 rtol 8 8 1 1 0
resume tp4_pp2 rtol 8 1 4 2 0 --set parallel.schedule=gpipe
resume dp2_nvme rtol 2 2 1 1 1 --set offload.optimizer=nvme \
  --set offload.nvme_dir="$work" --set offload.buffer_mb=0.01
if ls "$work"/*.m "$work"/*.v > /dev/null 2>&1; then echo "FAIL: offload files left behind"; exit 1; fi
echo "resume across layouts: ok"
