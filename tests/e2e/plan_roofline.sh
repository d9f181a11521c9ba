#!/usr/bin/env bash
# `trident plan --config C --device D` predicts a one-rank config's step launch by launch (the
# CUDA build's kernels, wherever plan runs) and ends with a GPU_ROOFLINE line:
# - GPT-2 124M, bf16, B = 16, T = 1024 on an H200's datasheet: 353 launches with cuDNN's fused
#   attention (attention.kernel = "auto"), 3,017 with the tiled attention ("tiled"); the table's
#   calls and time add up to the line's, and mfu_percent is (6N + 12LCT) x 16,384 tokens over
#   the step and 989.4 TFLOP/s;
# - measured ceilings (--copy-gbs, --gemm-tflops, --gemm-ceilings) print a second line, and a GEMM
#   label timed in the ceilings file takes that time;
# - the roofline's options without --config and --device, half the measured ceilings, a ceilings
#   file without its columns, and a layout it does not predict are each refused or said so;
# - bench/roofline_vs_profile.py joins a profile table with a roofline table label by label.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
plan=("$trident" plan --config inputs/gpu_check.toml --gpus 1 --top 0)
"${plan[@]}" --device h200 --roofline-table "$work/h200.tsv" > "$work/h200.log"
line=$(grep '^GPU_ROOFLINE device=h200 ceilings=datasheet ' "$work/h200.log") ||
  { echo "FAIL: no GPU_ROOFLINE line"; cat "$work/h200.log"; exit 1; }
/usr/bin/python3 - "$work/h200.tsv" "$line" <<'EOF'
import csv, sys
path, line = sys.argv[1], sys.argv[2]
fields = dict(kv.split("=") for kv in line.split()[1:])
rows = list(csv.DictReader(open(path), delimiter="\t"))
launches = sum(int(r["calls"]) for r in rows)
if launches != int(fields["launches"]) or launches != 353:
    sys.exit(f"FAIL: {launches} launches in the table, {fields['launches']} on the line, not 353")
total = sum(float(r["total_ms"]) for r in rows)
step = float(fields["step_ms"])
if abs(total - float(fields["device_ms"])) > 0.01 + 1e-4 * total or step < total - 0.01:
    sys.exit(f"FAIL: the table's {total:.3f} ms against device_ms {fields['device_ms']}, step {step}")
L, C, T, V, tokens = 12, 768, 1024, 50257, 16 * 1024
n = 12 * L * C * C + 13 * L * C + V * C + T * C + 2 * C  # GPT-2 124M's parameters
mfu = 100 * (6 * n + 12 * L * C * T) * tokens / (step * 1e-3) / 989.4e12
if abs(mfu - float(fields["mfu_percent"])) > 0.01:
    sys.exit(f"FAIL: mfu_percent {fields['mfu_percent']}, expected {mfu:.2f}")
print(f"ok   h200 datasheet: {launches} launches, {step} ms, MFU {fields['mfu_percent']}%")
EOF
"${plan[@]}" --device h200 --set attention.kernel=tiled > "$work/tiled.log"
grep -q '^GPU_ROOFLINE device=h200 ceilings=datasheet .* launches=3017 ' "$work/tiled.log" ||
  { echo "FAIL: the tiled attention's step is not 3017 launches"; grep GPU_ROOFLINE "$work/tiled.log"; exit 1; }
echo "ok   attention.kernel = tiled: 3017 launches"
# Measured ceilings: one GEMM label timed at 1234.5 us a call.
printf 'label\tcalls\ttrident_mean_us\ttorch_mean_us\ttorch_tflops\n' > "$work/gemms.tsv"
printf 'gemm16_out NT 16384x50304x768\t1\t9.0\t1234.5\t1.0\n' >> "$work/gemms.tsv"
"${plan[@]}" --device h200 --copy-gbs 3000 --gemm-tflops 600 --gemm-ceilings "$work/gemms.tsv" \
  --roofline-table "$work/measured.tsv" > "$work/measured.log"
grep -q '^GPU_ROOFLINE device=h200 ceilings=datasheet ' "$work/measured.log" &&
  grep -q '^GPU_ROOFLINE device=h200 ceilings=measured .* launches=353 ' "$work/measured.log" ||
  { echo "FAIL: not both GPU_ROOFLINE lines"; grep GPU_ROOFLINE "$work/measured.log"; exit 1; }
grep -qP '^gemm16_out NT 16384x50304x768\tlibrary\t1\t1.2345\t1234.50\t' "$work/measured.tsv" ||
  { echo "FAIL: the timed label did not take its measured time"; grep 50304x768 "$work/measured.tsv"; exit 1; }
echo "ok   measured ceilings: a second GPU_ROOFLINE line, the timed GEMM at 1234.5 us"
refused() {  # refused WHAT PATTERN ARGS...: exit 2 with PATTERN in the message
  local what=$1 pattern=$2 status=0
  shift 2
  "$trident" plan "$@" > "$work/refused.log" 2>&1 || status=$?
  [[ $status == 2 ]] && grep -q -- "$pattern" "$work/refused.log" ||
    { echo "FAIL: $what gave exit $status:"; cat "$work/refused.log"; exit 1; }
  echo "ok   refused: $what"
}
refused "--roofline-table without --device" "needs --config and --device" \
  --config inputs/gpu_check.toml --roofline-table "$work/x.tsv"
refused "--copy-gbs alone" "need both --copy-gbs and --gemm-tflops" \
  --config inputs/gpu_check.toml --device h200 --gpus 1 --copy-gbs 3000
refused "a ceilings file without its columns" "no 'label' and 'torch_mean_us' columns" \
  --config inputs/gpu_check.toml --device h200 --gpus 1 --copy-gbs 3000 --gemm-tflops 600 \
  --gemm-ceilings inputs/tiny.toml
refused "--device auto on a host build" "--device auto" --config inputs/gpu_check.toml \
  --device auto --gpus 1
"$trident" plan --config inputs/gpu_check.toml --top 0 --device h200 --set parallel.dp=2 --gpus 2 \
  > "$work/dp2.log"
grep -q '^launch roofline: not predicted: .*dp = 2' "$work/dp2.log" && ! grep -q GPU_ROOFLINE "$work/dp2.log" ||
  { echo "FAIL: dp 2 was not said to be unpredicted"; grep -i roofline "$work/dp2.log"; exit 1; }
echo "ok   dp 2: not predicted, and said so"
# The comparison script: a host profile against itself agrees; against the GPU shape's roofline
# the host's one-kernel attention shows as launched but not predicted.
common=(--config inputs/tiny.toml --set run.steps=2 --set run.eval_every=0
        --set run.checkpoint_every=0 --set train.micro_batch_size=4)
mpirun -np 1 "$trident" train "${common[@]}" --set run.out_dir="$work/run" --profile-step 2 \
  > "$work/run.log" 2>&1 || { echo "FAIL: the profiled run"; tail -n 20 "$work/run.log"; exit 1; }
"$trident" plan "${common[@]}" --gpus 1 --top 0 --device h100 --roofline-table "$work/tiny.tsv" \
  > "$work/tiny.log"
compare=(/usr/bin/python3 bench/roofline_vs_profile.py)
"${compare[@]}" "$work/run/tiny/profile_step_2.tsv" "$work/run/tiny/profile_step_2.tsv" > "$work/same.log"
grep -q '^roofline_calls_mismatched=0$' "$work/same.log" &&
  grep -q '^roofline_top10_within_30=10$' "$work/same.log" ||
  { echo "FAIL: a table against itself"; cat "$work/same.log"; exit 1; }
"${compare[@]}" "$work/run/tiny/profile_step_2.tsv" "$work/tiny.tsv" > "$work/shapes.log"
grep -q '^calls differ: attention_forward: measured 8, predicted 0$' "$work/shapes.log" &&
  grep -q '^calls differ: attention_softmax: measured 0, predicted 32$' "$work/shapes.log" &&
  grep -q '^roofline_calls_mismatched=[1-9]' "$work/shapes.log" ||
  { echo "FAIL: host against GPU shape"; cat "$work/shapes.log"; exit 1; }
echo "ok   roofline_vs_profile.py: a table against itself agrees; host against GPU shape differs"
