#!/usr/bin/env bash
# Mixed precision on one layout (dp x tp x pp, schedule, v, ZeRO stage), 50 steps of the tiny
# model (8 layers): bf16 and fp16 track the fp32 serial run's loss within a stated tolerance
# (bf16 2e-3, fp16 2e-4 relative, every step; bf16 keeps 8 significant bits, fp16 11), match
# their own serial runs within 5e-4 / 1e-4 (layout invariance under rounding), and the memory
# model predicts their memory (16-bit parameters and activations, fp32 master weights). Last
# arguments: "sp" turns on sequence parallelism, "cpN" splits every sequence over N ranks. The serial runs are the same for every layout: the
# argument "serial" in place of the layout writes only them, into WORK, and PRECISION_SERIAL=DIR
# makes a layout's test read them from DIR instead of running them (a ctest fixture does both).
set -euo pipefail
trident=$1 src=$2 work=$3 dp=$4 tp=${5:-} pp=${6:-} schedule=${7:-} v=${8:-} zero=${9:-0}
sp=false cp=1
for option in "${@:10}"; do
  case $option in
    sp) sp=true ;;
    cp*) cp=${option#cp} ;;
  esac
done
run_config=${TRIDENT_TEST_RUN:-tiny}  # inputs/<run_config>.toml: tiny (GPT-2) or llama-tiny
check="/usr/bin/python3 $src/tests/e2e/check_run.py"
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/$run_config.toml --set run.steps=50 --set run.eval_every=0
        --set run.checkpoint_every=0 --set model.n_layer=8 --set train.batch_size=8)
serial=${PRECISION_SERIAL:-$work}
if [ "$dp" = serial ] || [ -z "${PRECISION_SERIAL:-}" ]; then
  for p in fp32 bf16 fp16; do
    "$trident" train "${common[@]}" --set precision.compute=$p --set run.out_dir="$work/serial_$p" \
      > "$work/serial_$p.log"
  done
  [ "$dp" != serial ] || exit 0
fi
micro=$((8 / dp / (pp > 1 ? (v > 1 ? 2 * pp : pp) : 1)))
for p in bf16 fp16; do
  mpirun -np $((dp * cp * tp * pp)) --oversubscribe "$trident" train "${common[@]}" \
    --set precision.compute=$p --set run.out_dir="$work/layout_$p" --set parallel.dp="$dp" \
    --set parallel.tp="$tp" --set parallel.pp="$pp" --set parallel.schedule="$schedule" \
    --set parallel.virtual_stages="$v" --set train.micro_batch_size="$micro" \
    --set zero.stage="$zero" --set parallel.sequence_parallel="$sp" --set parallel.cp="$cp" \
    > "$work/layout_$p.log"
  grep "^precision:" "$work/layout_$p.log"
  $check memory "$work/layout_$p/$run_config/timings.h5" --all-exact
done
t() { echo "$([[ $1 == serial_* ]] && echo "$serial" || echo "$work")/$1/$run_config/timings.h5"; }
# PRECISION_RTOL replaces the four tolerances for another model (tests/e2e/CMakeLists.txt says
# why the Llama's differ).
read -r rtol_bf16 rtol_fp16 rtol_bf16_layout rtol_fp16_layout <<<"${PRECISION_RTOL:-2e-3 2e-4 5e-4 1e-4}"
echo "bf16 vs fp32:"; $check compare "$(t serial_fp32)" "$(t layout_bf16)" --min-steps 50 --rtol "$rtol_bf16"
echo "fp16 vs fp32:"; $check compare "$(t serial_fp32)" "$(t layout_fp16)" --min-steps 50 --rtol "$rtol_fp16"
echo "bf16 layout vs serial:"; $check compare "$(t serial_bf16)" "$(t layout_bf16)" --min-steps 50 --rtol "$rtol_bf16_layout"
echo "fp16 layout vs serial:"; $check compare "$(t serial_fp16)" "$(t layout_fp16)" --min-steps 50 --rtol "$rtol_fp16_layout"
