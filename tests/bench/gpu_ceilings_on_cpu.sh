#!/usr/bin/env bash
# bench/gpu_ceilings.py, the GPU check's ceilings, on the CPU at shapes divided by 64: every
# figure is printed and positive, and each GEMM label of a real profile table (a bf16 tiny run's
# step 2) gets its PyTorch time in the TSV beside trident's.
set -euo pipefail
trident=$1 src=$2 work=$3 python=$4
rm -rf "$work" && mkdir -p "$work" && cd "$src"
"$trident" train --config inputs/tiny.toml --set run.steps=3 --set run.checkpoint_every=-1 \
  --set run.eval_every=0 --set precision.compute=bf16 --set run.out_dir="$work/run" \
  --profile-step 2 > "$work/train.log"
table=$work/run/tiny/profile_step_2.tsv
"$python" bench/gpu_ceilings.py --device cpu --quick --repeats 2 --profile "$table" \
  --out "$work/gemms.tsv" | tee "$work/ceilings.txt"
for key in ceiling_copy_gbs ceiling_gemm8192_tflops ceiling_attention_fwd_ms \
  ceiling_attention_fwd_bwd_ms ceiling_gemm_labels_trident_ms ceiling_gemm_labels_torch_ms; do
  value=$(sed -n "s/^$key=//p" "$work/ceilings.txt")
  awk -v v="$value" 'BEGIN { exit !(v + 0 > 0) }' || { echo "FAIL: $key='$value', not positive"; exit 1; }
done
labels=$(grep -v '^#' "$table" | awk -F'\t' '$2 == "library" && $1 ~ /^gemm/' | wc -l)
rows=$(($(wc -l < "$work/gemms.tsv") - 1))
grep -q "^ceiling_gemm_labels=$labels$" "$work/ceilings.txt" && [[ $rows == "$labels" ]] ||
  { echo "FAIL: $labels GEMM labels in the profile, $rows rows timed"; exit 1; }
echo "ok   $labels GEMM labels timed beside trident's; copy, 8192^3 GEMM and attention measured"
