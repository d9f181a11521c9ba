#!/usr/bin/env bash
# Hugging Face LlamaForCausalLM directories in and out: round trips byte for byte (fp32, bf16,
# sharded, tied), logits and greedy tokens equal to an independent float64 Llama reading the same
# files, the import training on any layout (tp 4 > 2 key/value heads too), a trained checkpoint
# exported and re-imported, and hostile files refused with exit 2 naming their cause, nothing
# written, under a 4 GiB address-space limit.
# shellcheck source=tests/e2e/hf_common.sh
source "$(dirname "$0")/hf_common.sh" "$@"
llama="/usr/bin/python3 $src/tests/e2e/hf_llama.py"

# Round trips: fp32 untied in one file; bf16 with each layer's rotary_emb.inv_freq in 3 shards,
# exported as bf16 in 2+; a tied model (no lm_head.weight in the files, none written back).
$llama make "$work/f32" || fail "writing the fp32 model"
"$trident" ckpt import --hf "$work/f32" --out "$work/f32.h5" || fail "importing fp32"
"$trident" ckpt verify "$work/f32.h5" | tail -n 1
"$trident" ckpt export "$work/f32.h5" --hf "$work/f32_out" >/dev/null || fail "exporting fp32"
$llama compare "$work/f32" "$work/f32_out" || fail "fp32 round trip differs"
$llama make "$work/bf16" --dtype BF16 --shards 3 --extras --seed 1 || fail "writing the bf16 model"
"$trident" ckpt import --hf "$work/bf16" --out "$work/bf16.h5" >/dev/null ||
  fail "importing sharded bf16"
"$trident" ckpt export "$work/bf16.h5" --hf "$work/bf16_out" --dtype bf16 --max-shard-mb 0.02 \
  >/dev/null || fail "exporting bf16 in shards"
shards=$(ls "$work/bf16_out"/model-*-of-*.safetensors | wc -l)
((shards >= 2)) && [ -f "$work/bf16_out/model.safetensors.index.json" ] ||
  fail "no sharded export ($shards shards)"
$llama compare "$work/bf16" "$work/bf16_out" || fail "bf16 round trip differs"
$llama make "$work/tied" --tied --seed 2 || fail "writing the tied model"
"$trident" ckpt import --hf "$work/tied" --out "$work/tied.h5" >/dev/null || fail "importing tied"
"$trident" ckpt export "$work/tied.h5" --hf "$work/tied_out" >/dev/null || fail "exporting tied"
$llama compare "$work/tied" "$work/tied_out" || fail "tied round trip differs"
$llama make "$work/tied_copy" --tied --extras --seed 2 || fail "writing the tied model with a head"
"$trident" ckpt import --hf "$work/tied_copy" --out "$work/tied_copy.h5" >/dev/null ||
  fail "importing a tied model that saved its head"
echo "round trips: fp32, bf16 ($shards shards) and tied byte for byte"

# The imported weights compute what Hugging Face's definition computes: the next-token logits of
# a prompt longer than the 16-token window and of a short one, and 40 greedy tokens past the
# window, against float64 PyTorch reading the safetensors directly.
$llama make "$work/wide" --scale 10 --seed 6 || fail "writing the wide model"
"$trident" ckpt import --hf "$work/wide" --out "$work/wide.h5" >/dev/null || fail "importing"
n=0
for prompt in "In the beginning God created the heaven and the earth." "And God said"; do
  n=$((n + 1))
  logits_match "$llama" "$work/wide" "$work/wide.h5" "$prompt" "logits$n"
  echo "logits of '$prompt': max|trident - reference| / max|reference| = $logits_error"
done
prompt="And God said"
greedy_matches "$llama" "$work/wide" "$work/wide.h5" "$prompt" 40
echo "greedy decoding equals the float64 reference: $greedy_tokens"

# The import trains on any layout: serial, tp 4 (more ranks than the 2 key/value heads, which
# are replicated) and dp1 x tp2 x pp2 from it give the same losses.
model=(--set model.n_layer=2 --set model.n_embd=32 --set model.n_head=4 --set model.n_kv_head=2
       --set model.ffn_hidden=88 --set model.block_size=16)
for layout in serial tp4 tp2pp2; do
  launch=() sets=()
  [ $layout = tp4 ] && launch=(mpirun -np 4 --oversubscribe) && sets=(--set parallel.tp=4)
  [ $layout = tp2pp2 ] && launch=(mpirun -np 4 --oversubscribe) &&
    sets=(--set parallel.tp=2 --set parallel.pp=2)
  ${launch[@]+"${launch[@]}"} "$trident" train --config inputs/llama-tiny.toml "${model[@]}" \
    ${sets[@]+"${sets[@]}"} --set run.steps=4 --set run.checkpoint_every=0 \
    --set run.out_dir="$work/$layout" \
    --set run.init_from="$work/wide.h5" >"$work/$layout.log" 2>&1 ||
    { tail "$work/$layout.log"; fail "training from the import ($layout)"; }
  grep -q "run.init_from: weights of $work/wide.h5" "$work/$layout.log" ||
    fail "$layout: no run.init_from line"
done
for layout in tp4 tp2pp2; do
  $check compare "$work/serial/llama-tiny/timings.h5" "$work/$layout/llama-tiny/timings.h5" \
    --min-steps 4 || fail "the import trains differently on $layout"
done
echo "the import trains alike serially, on tp 4 and on tp 2 x pp 2"

# A trained checkpoint exports to a directory that re-imports, exports again byte for byte, and
# computes what trident computes (the tp 4 one too: its replicated key/value heads gathered).
for layout in serial tp4; do
  reexport "$work/$layout/llama-tiny/checkpoints/step_000004.h5" "$layout" "$llama" "$prompt"
done
echo "trained checkpoints (serial, tp 4) export, re-import and compute what trident computes"

# Hostile files: exit 2, the tensor (or config key) named, no checkpoint written.
$llama hostile "$work/f32" "$work/hostile" >"$work/cases.txt" || fail "writing hostile files"
hostile_refused "$work/cases.txt" "$work/hostile" 9
echo "hf llama: ok"
