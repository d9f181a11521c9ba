#!/usr/bin/env bash
# Builds the KJV corpus (Debian's bible-kjv, public domain) as plain text without verse
# references, tokenised byte-level by `trident prepare` (data/kjv_{train,val}.bin) or, with
# "gpt2", as GPT-2 BPE by tools/bpe (data/kjv_gpt2_{train,val}.bin).
set -euo pipefail
trident=${1:?usage: prepare_kjv.sh path/to/trident [out_dir] [byte|gpt2]}
out_dir=${2:-data}
tokenizer=${3:-byte}
suffix=$([ "$tokenizer" = gpt2 ] && echo _gpt2 || true)
if [ -f "$out_dir/kjv${suffix}_train.bin" ] && [ -f "$out_dir/kjv${suffix}_val.bin" ]; then
  exit 0
fi
command -v bible >/dev/null || { echo "prepare_kjv: 'bible' not found (apt-get install bible-kjv)" >&2; exit 1; }
mkdir -p "$out_dir"
text="$out_dir/kjv.txt.tmp"
echo "prepare_kjv: extracting the King James Bible with bible-kjv" >&2
# `bible -f` prints one verse per line as "Ge1:1 In the beginning ..."; drop the reference.
bible -f "Gen1:1-Rev22:21" | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$text"
if [ "$tokenizer" = gpt2 ]; then
  here=$(cd "$(dirname "$0")" && pwd)
  [ -d "$here/bpe/node_modules/gpt-tokenizer" ] ||
    npm install --prefix "$here/bpe" --no-audit --no-fund --loglevel=error
  node "$here/bpe/encode_gpt2.mjs" "$text" "$out_dir" kjv 0.05
else
  "$trident" prepare --text "$text" --out-dir "$out_dir" --name kjv --val-fraction 0.05
fi
rm -f "$text"
