#!/usr/bin/env bash
# `trident prepare --tokenizer DIR` with Hugging Face tokenizers the test builds (byte-level BPE
# with merges, BPE with byte fallback and a "▁" normalizer, added special tokens): decode(encode)
# is the text for ASCII, accented, CJK and emoji text; invalid UTF-8 is refused naming the byte;
# BOS/EOS frame every document as each tokenizer's files say; GPT-2's own tokenizer.json gives
# the ids of the GPT-2 path (tools/bpe/encode_gpt2.mjs) on the shipped corpus; 16 or 32 bits an
# id as the vocabulary needs.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
py=/usr/bin/python3
service=$src/tools/bpe/tokenizer_service.mjs
check() { $py "$src/tests/e2e/tokenizer_check.py" "$@"; }
[ -d tools/bpe/node_modules/tokenizers ] || fail "tools/bpe lacks the npm tokenizers: make tokenizers"

# The corpus text as prepare_kjv.sh makes it.
bible -f "Gen1:1-Rev22:21" | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$work/kjv.txt"
head -c 30000 "$work/kjv.txt" > "$work/train.txt"
for kind in bytelevel bytefallback special; do
  $py tests/e2e/make_tokenizers.py $kind "$work/$kind" "$work/train.txt"
done

# Round trips, each text repeated past prepare's 1 KiB minimum.
$py - "$work" <<'PY'
import sys
texts = {"ascii": "In the beginning God created the heaven and the earth.\n",
         "accented": "Café, naïve façade — Ærøskøbing, São Paulo, Straße, Dvořák.\n",
         "cjk": "天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。한국어 テキスト\n",
         "emoji": "Launch 🚀 thumbs 👍🏽 family 👨‍👩‍👧 flag 🇫🇷 ok!\n"}
for name, text in texts.items():
    with open(f"{sys.argv[1]}/{name}.txt", "w", encoding="utf-8") as f:
        f.write(text * (2048 // len(text.encode()) + 1))
PY
for kind in bytelevel bytefallback special; do
  for text in ascii accented cjk emoji; do
    "$trident" prepare --text "$work/$text.txt" --tokenizer "$work/$kind" --out-dir "$work/tokens" \
      --name "$kind-$text" 2> "$work/$kind-$text.log" || { cat "$work/$kind-$text.log"; fail "$kind $text"; }
    echo -n "$kind $text: "
    check roundtrip "$service" "$work/$kind" "$work/$text.txt" "$work/tokens/$kind-$text" ||
      fail "$kind $text does not round trip"
  done
done

# Invalid UTF-8 is refused, naming the byte; nothing is written.
{ head -c 1500 "$work/kjv.txt"; printf 'caf\xc3'; } > "$work/truncated.txt"
{ head -c 1500 "$work/kjv.txt"; printf '\xff rest\n'; } > "$work/invalid.txt"
for bad in truncated:1503 invalid:1500; do
  at=${bad#*:} bad=${bad%:*}
  set +e
  "$trident" prepare --text "$work/$bad.txt" --tokenizer "$work/bytelevel" --out-dir "$work/bad" \
    > "$work/$bad.log" 2>&1
  status=$?
  set -e
  [ $status = 2 ] || fail "$bad UTF-8: exit $status, not 2"
  grep -q "is not UTF-8 text: byte $at " "$work/$bad.log" || { cat "$work/$bad.log"; fail "$bad UTF-8: no byte named"; }
  [ ! -e "$work/bad" ] || fail "$bad UTF-8: files written"
done
echo "invalid UTF-8 refused at the byte it starts: $(grep -o 'byte 1500 .*' "$work/invalid.log" | head -c 60)"

# Documents: BOS from tokenizer_config.json (bytefallback) or the post-processor (bytelevel),
# none (special); every document closed by EOS; added tokens one id each.
$py -c "
import sys
sys.stdout.write(''.join(f'<|user|>How long, {i}?<|assistant|>Six days shalt thou labour.\n@@\n'
                         for i in range(60)))" > "$work/chat.txt"
for kind in bytelevel bytefallback special; do
  "$trident" prepare --text "$work/chat.txt" --tokenizer "$work/$kind" --doc-separator $'\n@@\n' \
    --out-dir "$work/tokens" --name "$kind-chat" 2> "$work/$kind-chat.log"
  echo -n "$kind: "
  extra=()
  [ $kind = special ] && extra=("<|user|>=60" "<|assistant|>=60")
  check frame "$service" "$work/$kind" "$work/tokens/$kind-chat" 60 ${extra[@]+"${extra[@]}"} ||
    fail "$kind documents framed wrongly"
done
grep -q "tokenised 60 / 60 documents, .* tokens/s" "$work/special-chat.log" ||
  fail "no progress line with documents and throughput"

# GPT-2's tokenizer.json (built from the r50k ranks) against the GPT-2 path on the whole corpus;
# 16 bits an id for its 50,257 ids, 32 bits for a vocabulary past 65,536.
node tools/bpe/gpt2_tokenizer_json.mjs "$work/gpt2" 2>/dev/null
"$trident" prepare --text "$work/kjv.txt" --tokenizer "$work/gpt2" --out-dir "$work/tokens" \
  --name kjv-hf 2> "$work/kjv-hf.log"
node tools/bpe/encode_gpt2.mjs "$work/kjv.txt" "$work/tokens" kjv 0.05 2>/dev/null
echo -n "GPT-2 through tokenizer.json vs the GPT-2 path: "
check same "$work/tokens/kjv-hf" "$work/tokens/kjv_gpt2" || fail "GPT-2 ids differ"
grep -q "2 bytes an id" "$work/kjv-hf.log" || fail "GPT-2's ids not in 16 bits"
$py - "$work/gpt2/tokenizer.json" "$work/wide/tokenizer.json" <<'PY'
import json, os, sys
tok = json.load(open(sys.argv[1], encoding="utf-8"))
vocab = tok["model"]["vocab"]  # GPT-2's, grown to 70,000 ids with tokens no merge makes
vocab.update({f"extra{i}": i for i in range(len(vocab), 70000)})
tok["added_tokens"].append(dict(tok["added_tokens"][0], id=70000, content="<|wide|>"))
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
json.dump(tok, open(sys.argv[2], "w", encoding="utf-8"))
PY
head -c 3000 "$work/kjv.txt" > "$work/short.txt"
printf '<|wide|>' >> "$work/short.txt"
"$trident" prepare --text "$work/short.txt" --tokenizer "$work/wide" --out-dir "$work/tokens" \
  --name wide 2> "$work/wide.log"
grep -q "70001 ids" "$work/wide.log" && grep -q "4 bytes an id" "$work/wide.log" ||
  { cat "$work/wide.log"; fail "70,001 ids not in 32 bits"; }
$py -c "
import numpy as np
ids = np.fromfile('$work/tokens/wide_val.bin', dtype=np.uint32, offset=1024)
assert ids[-1] == 70000, ids[-2:]  # no tokenizer_config.json: no EOS"
set +e
"$trident" prepare --text "$work/short.txt" --tokenizer "$work/wide" --token-bytes 2 \
  --out-dir "$work/tokens" --name wide16 > "$work/wide16.log" 2>&1
status=$?
set -e
[ $status = 2 ] && grep -q "use --token-bytes 4" "$work/wide16.log" ||
  fail "--token-bytes 2 with 70,001 ids: exit $status"
echo "ids past 65,535 go to 32-bit files (and --token-bytes 2 is refused for them)"

# Tokenizer directories that are not: each refused with exit 2 and its cause, nothing written.
mkdir -p "$work/none" "$work/broken" "$work/fifo"
echo '{"model": ' > "$work/broken/tokenizer.json"
cp "$work/special/tokenizer.json" "$work/fifo/" && mkfifo "$work/fifo/tokenizer_config.json"
for case in "none:its tokenizer.json does not exist" "broken:tokenizer.json: " \
            "fifo:tokenizer_config.json is not a regular file" "missing:is not a directory"; do
  dir=${case%%:*} want=${case#*:}
  set +e
  timeout 60 "$trident" prepare --text "$work/short.txt" --tokenizer "$work/$dir" \
    --out-dir "$work/refused" > "$work/$dir.log" 2>&1
  status=$?
  set -e
  [ $status = 2 ] && grep -q "$want" "$work/$dir.log" && [ ! -e "$work/refused" ] ||
    { cat "$work/$dir.log"; fail "tokenizer '$dir': exit $status"; }
done
echo "a directory without tokenizer.json, a broken one, a FIFO config, no directory: refused"
echo "hf tokenizers: ok"
