#!/usr/bin/env bash
# `trident generate` continues a prompt from a checkpoint, deterministically for a seed; the
# --help text and `trident plan` are checked here too.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
"$trident" train --config inputs/tiny.toml --set run.steps=3 --set run.out_dir="$work" > /dev/null
ckpt="$work/tiny/checkpoints/step_000003.h5"
a=$("$trident" generate --ckpt "$ckpt" --prompt "In the beginning" --tokens 40 --seed 7)
b=$("$trident" generate --ckpt "$ckpt" --prompt "In the beginning" --tokens 40 --seed 7)
[ "$a" = "$b" ] || { echo "FAIL: same seed gave different text"; exit 1; }
case "$a" in "In the beginning"*) ;; *) echo "FAIL: output does not start with the prompt"; exit 1;; esac
n=$(printf '%s' "$a" | wc -c)
[ "$n" -ge 40 ] || { echo "FAIL: only $n bytes"; exit 1; }

"$trident" --help | grep -q "generate" || { echo "FAIL: --help does not list the subcommands"; exit 1; }
"$trident" train --help | grep -q -- "--resume" || { echo "FAIL: train --help lacks --resume"; exit 1; }
echo "generate and --help: ok ($n bytes)"
# `trident plan` reproduces the ZeRO paper's Figure 1 (Psi = 7.5B, Nd = 64, K = 12).
"$trident" plan --params 7.5e9 --layers 32 --hidden 4096 --heads 32 --gpus 64 > "$work/plan.txt"
grep -q "baseline 120.0 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB" "$work/plan.txt" ||
  { echo "FAIL: plan's ZeRO table"; cat "$work/plan.txt"; exit 1; }
grep -q "^RECOMMEND dp=" "$work/plan.txt" || { echo "FAIL: no recommendation"; exit 1; }
echo "plan: ok"
