#!/usr/bin/env bash
# `trident generate` continues a prompt from a checkpoint, deterministically for a seed.
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
