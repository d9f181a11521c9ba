#!/usr/bin/env bash
# GPT-2 BPE data path: tools/bpe tokenises text with the npm gpt-tokenizer into llm.c .bin
# files with GPT-2's token ids, and trident trains a V = 50257 model on them.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
[ -d tools/bpe/node_modules/gpt-tokenizer ] ||
  npm install --prefix tools/bpe --no-audit --no-fund --loglevel=error
printf 'In the beginning God created the heaven and the earth.\n%.0s' $(seq 1 200) > "$work/text.txt"
node tools/bpe/encode_gpt2.mjs "$work/text.txt" "$work" gen 0.1 2> "$work/encode.log"
# GPT-2's ids for "In the beginning God created the heaven and the earth.\n"
expected="818 262 3726 1793 2727 262 9538 290 262 4534 13 198"
got=$(/usr/bin/python3 -c "
import numpy as np
t = np.fromfile('$work/gen_gpt2_train.bin', dtype=np.int32, count=3)
assert t[0] == 20240520 and t[1] == 1, t
print(' '.join(map(str, np.fromfile('$work/gen_gpt2_train.bin', dtype=np.uint16)[512:524])))")
[ "$got" = "$expected" ] || { echo "FAIL: tokens '$got', expected '$expected'"; exit 1; }
"$trident" train --config inputs/tiny.toml --set model.vocab_size=50257 --set run.steps=2 \
  --set data.train="$work/gen_gpt2_train.bin" --set data.val="$work/gen_gpt2_val.bin" \
  --set run.out_dir="$work/run" > "$work/train.log"
grep -q "V=50257" "$work/train.log"
grep -q "^PERFORMANCE steps=2 " "$work/train.log"
echo "gpt2 bpe: ok"
