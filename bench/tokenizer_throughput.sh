#!/usr/bin/env bash
# `trident prepare --tokenizer` throughput on the shipped corpus (the KJV text, 4.1 MB) with GPT-2's
# own tokenizer.json (byte-level BPE, built from the r50k ranks by tools/bpe/gpt2_tokenizer_json.mjs)
# against the npm gpt-tokenizer (GPT-2's r50k_base, its defaults) encoding the same text in the
# same node, both on one core (taskset -c 0, RAYON_NUM_THREADS=1). Prints tokens per second:
#   prepare:       trident's encoding phase (the node service, Hugging Face's tokenizers, the ids
#                  sent back as JSON), from its last progress line; and the whole command's wall time
#   tokenizers:    the same library alone in node (one encode of the whole text, no transfer)
#   gpt-tokenizer: encode() of the whole text
# and the ratio prepare / gpt-tokenizer. The ids of the two are checked equal (plus prepare's EOS).
# usage: bench/tokenizer_throughput.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: bench/tokenizer_throughput.sh BUILD_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
source bench/require_build.sh
require_build "$build" "$here"
make -s tokenizers
out=$(realpath "$build")/tokenizer_bench
rm -rf "$out" && mkdir -p "$out"
export RAYON_NUM_THREADS=1
bible -f "Gen1:1-Rev22:21" | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$out/kjv.txt"
node tools/bpe/gpt2_tokenizer_json.mjs "$out/gpt2" 2>/dev/null

start=$(date +%s.%N)
taskset -c 0 "$build/src/trident" prepare --text "$out/kjv.txt" --tokenizer "$out/gpt2" \
  --out-dir "$out" --name kjv_hf 2> "$out/prepare.log"
wall=$(echo "$(date +%s.%N) - $start" | bc)
prepare_rate=$(grep -o '[0-9]* tokens/s' "$out/prepare.log" | tail -n 1 | cut -d' ' -f1)

cat > "$out/peers.mjs" <<'JS'
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
const [packages, text_path, tokenizer_json, ids_out] = process.argv.slice(2);
const require = createRequire(`${packages}/`);  // tools/bpe's node_modules
const { encode } = require('gpt-tokenizer/encoding/r50k_base');
const { Tokenizer } = require('tokenizers');
const text = readFileSync(text_path, 'utf8');
const time = async (f) => { const t = performance.now(); const r = await f(); return [r, (performance.now() - t) / 1000]; };
const tokenizer = Tokenizer.fromFile(tokenizer_json);
const [hf, hf_s] = await time(async () => (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds());
const [gt, gt_s] = await time(() => encode(text));
writeFileSync(ids_out, Uint32Array.from(gt));
console.log(`${hf.length} ${hf_s} ${gt.length} ${gt_s}`);
JS
read -r hf_n hf_s gt_n gt_s < <(taskset -c 0 node "$out/peers.mjs" "$here/tools/bpe" \
  "$out/kjv.txt" "$out/gpt2/tokenizer.json" "$out/gpt_tokenizer.ids")
/usr/bin/python3 - "$out" <<'PY'
import sys, numpy as np
out = sys.argv[1]
ids = np.concatenate([np.fromfile(f"{out}/kjv_hf_{s}.bin", dtype=np.uint16, offset=1024)
                      for s in ("train", "val")])
peer = np.fromfile(f"{out}/gpt_tokenizer.ids", dtype=np.uint32)
assert len(ids) == len(peer) + 1 and (ids[:-1] == peer).all() and ids[-1] == 50256, "ids differ"
PY
awk -v bytes="$(stat -c %s "$out/kjv.txt")" -v p="$prepare_rate" -v wall="$wall" -v hn="$hf_n" \
  -v hs="$hf_s" -v gn="$gt_n" -v gs="$gt_s" 'BEGIN {
  printf "corpus: %d bytes, %d GPT-2 tokens (the same ids from both, plus prepare'"'"'s EOS)\n", bytes, gn
  printf "TOKENIZER prepare       %9.0f tokens/s (encoding phase); whole command %.2f s\n", p, wall
  printf "TOKENIZER tokenizers    %9.0f tokens/s (the library alone in node)\n", hn / hs
  printf "TOKENIZER gpt-tokenizer %9.0f tokens/s\n", gn / gs
  printf "TOKENIZER_RATIO prepare / gpt-tokenizer = %.2f\n", p / (gn / gs) }'
