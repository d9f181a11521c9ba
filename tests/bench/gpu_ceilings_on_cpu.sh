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
# A GPU build's profile holds cuDNN's attention: its two labels get SDPA's forward and backward.
"$python" - "$table" "$work/with_cudnn.tsv" <<'EOF'
import csv, sys
rows = list(csv.DictReader((l for l in open(sys.argv[1]) if not l.startswith("#")), delimiter="\t"))
with open(sys.argv[2], "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
    w.writeheader()
    w.writerows(rows)
    for label in ("attention_cudnn_forward", "attention_cudnn_backward"):
        w.writerow({**{k: "0" for k in rows[0]}, "label": label, "kind": "library", "calls": "2",
                    "mean_us": "100.0"})
EOF
"$python" bench/gpu_ceilings.py --device cpu --quick --repeats 2 --profile "$work/with_cudnn.tsv" \
  --out "$work/with_cudnn_out.tsv" > "$work/ceilings_cudnn.txt"
for label in attention_cudnn_forward attention_cudnn_backward; do
  grep -qP "^$label\t2\t100.000\t[0-9]+\.[0-9]{3}\t" "$work/with_cudnn_out.tsv" ||
    { echo "FAIL: $label not timed"; cat "$work/with_cudnn_out.tsv"; exit 1; }
done
echo "ok   cuDNN's attention labels timed at SDPA's forward and backward"
