#!/usr/bin/env bash
# The Llama fine-tuning recipe (inputs/finetune/llama_hf.toml) at tiny size, the whole path a user
# takes: a Hugging Face Llama directory with a SentencePiece-style tokenizer (byte fallback) is
# imported (its tokenizer recorded), a text prepared with that tokenizer, the import fine-tuned on
# tp 2, text sampled and decoded as it streams, exported with the tokenizer, and re-imported with
# equal tensors that sample the same text.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
py=/usr/bin/python3
[ -d tools/bpe/node_modules/tokenizers ] || fail "tools/bpe lacks the npm tokenizers: make tokenizers"
tiny=(--set model.n_layer=2 --set model.n_embd=32 --set model.n_head=4 --set model.n_kv_head=2
      --set model.ffn_hidden=88 --set model.block_size=32 --set model.vocab_size=384)

# A Hugging Face Llama directory: a tiny Llama of 384 ids, exported, with a tokenizer beside it.
"$trident" train --config inputs/llama-tiny.toml "${tiny[@]}" --set run.steps=1 \
  --set run.out_dir="$work/base" > "$work/base.log" 2>&1 || { tail "$work/base.log"; fail "base"; }
"$trident" ckpt export "$work/base/llama-tiny/checkpoints/step_000001.h5" --hf "$work/hf" >/dev/null
bible -f "Gen1:1-Gen9:29" | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$work/text.txt"
printf 'Grüße, naïve café. 天地玄黄 🚀\n%.0s' 1 2 3 >> "$work/text.txt"
$py tests/e2e/make_tokenizers.py bytefallback "$work/hf" "$work/text.txt" --merges 60

# Import, prepare, fine-tune on tp 2 (the recipe's layout on 2 ranks).
"$trident" ckpt import --hf "$work/hf" --out "$work/hf.h5" > "$work/import.log"
grep -q "its tokenizer: data.tokenizer = $work/hf " "$work/import.log" ||
  { cat "$work/import.log"; fail "the import does not record its tokenizer"; }
"$trident" prepare --text "$work/text.txt" --tokenizer "$work/hf" --out-dir "$work/data" \
  --name mytext 2> "$work/prepare.log"
mpirun -np 2 --oversubscribe "$trident" train --config inputs/finetune/llama_hf.toml "${tiny[@]}" \
  --set run.init_from="$work/hf.h5" --set run.out_dir="$work/runs" \
  --set data.train="$work/data/mytext_train.bin" --set data.val="$work/data/mytext_val.bin" \
  --set data.tokenizer="$work/hf" --set run.steps=6 --set run.log_every=1 --set run.eval_every=3 \
  --set run.eval_batches=2 --set train.seq_len=16 --set train.batch_size=8 \
  --set optim.lr=1e-3 --set optim.warmup_steps=2 > "$work/train.log" 2>&1 ||
  { tail "$work/train.log"; fail "fine-tuning"; }
grep -q "run.init_from: weights of $work/hf.h5" "$work/train.log" || fail "no run.init_from line"
grep -q "tp=2" "$work/train.log" || fail "not on tp 2"
ckpt=$work/runs/llama_text/checkpoints/step_000006.h5
[ -f "$ckpt" ] || fail "no final checkpoint"
echo "fine-tuned: $(grep -c '^step ' "$work/train.log") steps on tp 2, $(grep '^PERFORMANCE' "$work/train.log" | head -c 60)"

# generate encodes the prompt and streams the decoded sample with the checkpoint's tokenizer.
sample() {
  "$trident" generate --ckpt "$1" --prompt "$2" --tokens 40 --seed 5 --print-tokens 2>/dev/null
}
for prompt in "And God said" "天地"; do
  sample "$ckpt" "$prompt" > "$work/sample.txt" || fail "generate from '$prompt'"
  $py - "$src/tools/bpe/tokenizer_service.mjs" "$work/hf" "$prompt" "$work/sample.txt" <<'PY' ||
import json, subprocess, sys
service, directory, prompt, path = sys.argv[1:5]
out = open(path, encoding="utf-8", newline="").read()  # a UTF-8 error here fails the test
text, ids = out.rsplit("\nprompt tokens (", 1)
prompt_line, sampled_line = ids.split("\nsampled tokens (")
prompt_ids = [int(t) for t in prompt_line.split(": ")[1].split()]
sampled = [int(t) for t in sampled_line.split(": ")[1].split()]
child = subprocess.Popen(["node", service, directory], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, encoding="utf-8")
hello = json.loads(child.stdout.readline())
def decode(ids):
    child.stdin.write(json.dumps({"decode": ids}) + "\n")
    child.stdin.flush()
    return json.loads(child.stdout.readline())["text"]
assert prompt_ids[0] == hello["bos"], f"the prompt does not start with BOS: {prompt_ids[:3]}"
if sampled and sampled[-1] == hello["eos"]:
    sampled = sampled[:-1]  # sampling stops at EOS, which is not printed
assert text.startswith(prompt), f"the output does not start with the prompt: {text[:40]!r}"
# What the stream prints after the prompt: the sample decoded after the prompt's last 5 ids
# before a trailing run of byte tokens (<0xNN>, which a sampled byte would join).
anchor = prompt_ids
while anchor and anchor[-1] in hello["byte_ids"]:
    anchor = anchor[:-1]
anchor = anchor[-5:]
head, whole = decode(anchor), decode(anchor + sampled)
assert whole.startswith(head)
assert text[len(prompt):] == whole[len(head):], \
    f"streamed {text[len(prompt):]!r}, decoded at once {whole[len(head):]!r}"
if anchor == prompt_ids[-5:]:  # no byte run to split: the sample is the whole decode's tail
    assert text[len(prompt):] == decode(prompt_ids + sampled)[len(decode(prompt_ids)):]
print(f"'{prompt}': {len(prompt_ids)} prompt ids, {len(sampled)} sampled, streamed text equal to "
      f"the decode of all ids: {text[len(prompt):][:50]!r}")
PY
    fail "the sample from '$prompt' is not the tokenizer's text"
done

# Export with the tokenizer, re-import: equal tensors, the tokenizer recorded, the same sample.
"$trident" ckpt export "$ckpt" --hf "$work/out" > "$work/export.log"
grep -q "and the tokenizer of $work/hf" "$work/export.log" || fail "the export has no tokenizer"
for f in tokenizer.json tokenizer_config.json; do
  cmp -s "$work/hf/$f" "$work/out/$f" || fail "$f not copied as it was"
done
"$trident" ckpt import --hf "$work/out" --out "$work/again.h5" >/dev/null
"$trident" ckpt export "$work/again.h5" --hf "$work/again" >/dev/null
$py tests/e2e/hf_llama.py compare "$work/out" "$work/again" || fail "re-import changed tensors"
sample "$ckpt" "And God said" > "$work/first.txt"
sample "$work/again.h5" "And God said" > "$work/second.txt"
cmp -s "$work/first.txt" "$work/second.txt" || fail "the re-import samples other text"
echo "exported with its tokenizer, re-imported with equal tensors and the same sample"
echo "llama finetune text: ok"
