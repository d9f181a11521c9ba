#!/usr/bin/env bash
# `trident plan --device NAME` takes a GPU's datasheet figures (each option given beside it wins),
# and `plan` names two utilisations wherever it predicts a step: MFU as `train` counts it (no
# recomputation) and hardware FLOPs utilisation (recomputation counted). For GPT-2 124M at
# T = 1024 under full recomputation HFU / MFU is (6N + 12LCT + L (2 x 7,077,888 + 4CT)) /
# (6N + 12LCT) = 1.2414; without recomputation the two are equal. An unknown device is refused.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
plan=("$trident" plan --config inputs/gpu_check.toml --top 0)
"${plan[@]}" --device h200 > "$work/h200.log"
grep -q '^device H200 SXM 141GB: 141 GB, 989.4 TFLOP/s bf16 dense, 4800 GB/s HBM' "$work/h200.log" ||
  { echo "FAIL: no H200 device line"; cat "$work/h200.log"; exit 1; }
grep -q 'planning with 141 GB, 989.4 TFLOP/s, 4800 GB/s HBM, 225 GB/s in a node, 50 GB/s between' \
  "$work/h200.log" || { echo "FAIL: the H200 preset was not applied"; cat "$work/h200.log"; exit 1; }
"${plan[@]}" --device h200 --gpu-mem 100 --peak-tflops 500 > "$work/given.log"
grep -q 'planning with 100 GB, 500.0 TFLOP/s, 4800 GB/s HBM' "$work/given.log" ||
  { echo "FAIL: --gpu-mem / --peak-tflops did not win over the preset"; cat "$work/given.log"; exit 1; }
"${plan[@]}" --device h200 --set recompute.policy=full > "$work/full.log"
ratio() {  # HFU / MFU of CONFIG_TIME in FILE
  sed -n 's/^CONFIG_TIME .* mfu_percent=\([0-9.]*\) hfu_percent=\([0-9.]*\)$/\2 \1/p' "$1" |
    awk '{ if ($2 > 0) printf "%.4f", $1 / $2; else print "none" }'
}
none=$(ratio "$work/h200.log") full=$(ratio "$work/full.log")
awk -v r="$none" 'BEGIN { exit !(r == 1) }' ||
  { echo "FAIL: without recomputation HFU / MFU = $none, not 1"; grep CONFIG_TIME "$work/h200.log"; exit 1; }
awk -v r="$full" 'BEGIN { e = r / 1.2414 - 1; exit !(e < 0.01 && e > -0.01) }' ||
  { echo "FAIL: under full recomputation HFU / MFU = $full, not 1.2414"; grep CONFIG_TIME "$work/full.log"; exit 1; }
grep -q '^utilisation: MFU [0-9.]*% (train.s: 6N + 12LCT' "$work/full.log" ||
  { echo "FAIL: no utilisation line naming MFU and HFU"; exit 1; }
echo "ok   HFU / MFU: $none without recomputation, $full with full recomputation (1.2414 exact)"
"$trident" plan --layers 12 --hidden 768 --heads 12 --seq 1024 --gpus 8 --device h100 --top 3 \
  > "$work/layouts.log"
grep -qE '^layout +mem GB +states +activ\. +step s +tok/s/GPU +MFU% +HFU%$' "$work/layouts.log" ||
  { echo "FAIL: the layout table has no MFU and HFU columns"; cat "$work/layouts.log"; exit 1; }
set +e
"$trident" plan --config inputs/gpu_check.toml --device h300 > "$work/bad.log" 2>&1
status=$?
set -e
[[ $status == 2 ]] && grep -q "presets: a100-40gb, a100-80gb, h100, h200, b200" "$work/bad.log" ||
  { echo "FAIL: --device h300 gave exit $status:"; cat "$work/bad.log"; exit 1; }
echo "ok   presets applied, options win over them, an unknown device refused (exit 2)"
# Fused attention at the preset's published rate (FlashAttention-2 on Hopper: 35% of the peak),
# --attention-efficiency winning over it: a faster kernel, more model FLOP/s; out of (0, 1] refused.
rate() { sed -n 's/^CONFIG_TIME .* model_tflops_per_gpu=\([0-9.]*\) .*/\1/p' "$1"; }
"${plan[@]}" --device h200 --attention fused > "$work/fused.log"
grep -q 'between nodes, fused attention at 35% of the peak$' "$work/fused.log" ||
  { echo "FAIL: no fused attention rate on the device line"; cat "$work/fused.log"; exit 1; }
"${plan[@]}" --device h200 --attention fused --attention-efficiency 0.7 > "$work/fast.log"
grep -q 'fused attention at 70% of the peak$' "$work/fast.log" ||
  { echo "FAIL: --attention-efficiency did not win over the preset"; cat "$work/fast.log"; exit 1; }
awk -v a="$(rate "$work/fused.log")" -v b="$(rate "$work/fast.log")" 'BEGIN { exit !(b > a) }' ||
  { echo "FAIL: a faster attention kernel did not raise the model TFLOP/s"; exit 1; }
set +e
"${plan[@]}" --device h200 --attention fused --attention-efficiency 2 > "$work/bad_share.log" 2>&1
status=$?
set -e
[[ $status == 2 ]] && grep -q 'attention-efficiency = 2 must be between' "$work/bad_share.log" ||
  { echo "FAIL: --attention-efficiency 2 gave exit $status:"; cat "$work/bad_share.log"; exit 1; }
echo "ok   fused attention at the preset's 35%, --attention-efficiency 0.7 runs faster, 2 refused"
