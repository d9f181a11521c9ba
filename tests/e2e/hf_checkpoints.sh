#!/usr/bin/env bash
# Hugging Face GPT2LMHeadModel directories in and out: round trips byte for byte (fp32, bf16,
# sharded), greedy tokens and logits (to 1e-5) equal to an independent float64 GPT-2 reading the
# same files, the import training on any layout, and hostile safetensors files refused with exit 2 naming the
# tensor, nothing written, under a 4 GiB address-space limit.
# shellcheck source=tests/e2e/hf_common.sh
source "$(dirname "$0")/hf_common.sh" "$@"
files="/usr/bin/python3 $src/tests/e2e/hf_files.py"

# Round trips: fp32 with GPT2LMHeadModel's "transformer." names, one file; bf16 with the Hub's
# GPT2Model names, the causal-mask buffers and a tied lm_head, in 3 shards, exported in 2+.
$files make "$work/f32" --prefix transformer. || fail "writing the fp32 model"
"$trident" ckpt import --hf "$work/f32" --out "$work/f32.h5" || fail "importing fp32"
"$trident" ckpt verify "$work/f32.h5" | tail -n 1
"$trident" ckpt export "$work/f32.h5" --hf "$work/f32_out" || fail "exporting fp32"
$files compare "$work/f32" "$work/f32_out" || fail "fp32 round trip differs"
$files make "$work/bf16" --dtype BF16 --shards 3 --extras || fail "writing the bf16 model"
"$trident" ckpt import --hf "$work/bf16" --out "$work/bf16.h5" || fail "importing sharded bf16"
"$trident" ckpt export "$work/bf16.h5" --hf "$work/bf16_out" --dtype bf16 --max-shard-mb 0.05 ||
  fail "exporting bf16 in shards"
shards=$(ls "$work/bf16_out"/model-*-of-*.safetensors | wc -l)
((shards >= 2)) && [ -f "$work/bf16_out/model.safetensors.index.json" ] ||
  fail "no sharded export ($shards shards)"
$files compare "$work/bf16" "$work/bf16_out" || fail "bf16 round trip differs"
echo "round trips: fp32 and bf16 ($shards shards) byte for byte"

# The imported weights compute what Hugging Face's definition computes: 40 greedy tokens past
# the 16-token window, against float64 numpy reading the safetensors directly.
$files make "$work/wide" --scale 10 --prefix transformer. || fail "writing the wide model"
"$trident" ckpt import --hf "$work/wide" --out "$work/wide.h5" >/dev/null || fail "importing"
greedy_matches "$files" "$work/wide" "$work/wide.h5" "And God said" 40
echo "greedy decoding equals the float64 reference: $greedy_tokens"
# And its next-token logits on the prompt, within 1e-5 of the largest.
logits_match "$files" "$work/wide" "$work/wide.h5" "And God said" wide_logits
echo "logits on the prompt: max |trident - reference| / max |reference| = $logits_error"

# The import trains on any layout: serial and dp1 x tp2 x pp2 from it give the same losses.
model=(--set model.n_layer=2 --set model.n_embd=32 --set model.n_head=4 --set model.vocab_size=256
       --set model.block_size=16)
for layout in serial tp2pp2; do
  launch=() sets=()
  [ $layout = tp2pp2 ] && launch=(mpirun -np 4 --oversubscribe) &&
    sets=(--set parallel.tp=2 --set parallel.pp=2)
  ${launch[@]+"${launch[@]}"} "$trident" train --config inputs/tiny.toml "${model[@]}" \
    ${sets[@]+"${sets[@]}"} --set run.steps=4 --set run.checkpoint_every=-1 \
    --set run.out_dir="$work/$layout" --resume "$work/wide.h5" --allow-config-change \
    >"$work/$layout.log" 2>&1 || { tail "$work/$layout.log"; fail "training from the import ($layout)"; }
done
$check compare "$work/serial/tiny/timings.h5" "$work/tp2pp2/tiny/timings.h5" --min-steps 4 ||
  fail "the import trains differently on tp2 x pp2"

# run.init_from starts a run from the import's weights (fresh optimizer, step 0): the same losses
# as the resume above, bit for bit, and on dp 2 x tp 2 with ZeRO-3 to 1e-5.
for layout in init_serial init_dp2tp2z3; do
  launch=() sets=()
  [ $layout = init_dp2tp2z3 ] && launch=(mpirun -np 4 --oversubscribe) &&
    sets=(--set parallel.dp=2 --set parallel.tp=2 --set zero.stage=3)
  ${launch[@]+"${launch[@]}"} "$trident" train --config inputs/tiny.toml "${model[@]}" \
    ${sets[@]+"${sets[@]}"} --set run.steps=4 --set run.checkpoint_every=-1 \
    --set run.out_dir="$work/$layout" --set run.init_from="$work/wide.h5" \
    >"$work/$layout.log" 2>&1 || { tail "$work/$layout.log"; fail "run.init_from ($layout)"; }
  grep -q "run.init_from: weights of $work/wide.h5" "$work/$layout.log" ||
    fail "$layout: no run.init_from line"
done
$check compare "$work/serial/tiny/timings.h5" "$work/init_serial/tiny/timings.h5" --min-steps 4 \
  --exact || fail "run.init_from differs from resuming the import"
$check compare "$work/init_serial/tiny/timings.h5" "$work/init_dp2tp2z3/tiny/timings.h5" \
  --min-steps 4 || fail "run.init_from trains differently on dp 2 x tp 2, ZeRO-3"
"$trident" train --config inputs/tiny.toml "${model[@]}" --set model.n_layer=4 \
  --set run.out_dir="$work/init_bad" --set run.init_from="$work/wide.h5" >"$work/init_bad.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "holds another model: model.n_layer = 2 (this config: 4)" "$work/init_bad.log" ||
  { tail -n 3 "$work/init_bad.log"; fail "run.init_from with another model: exit $rc"; }

# The fine-tuning recipe end to end at tiny size: import, train from it, export.
"$trident" train --config inputs/finetune/gpt2_hf.toml "${model[@]}" \
  --set data.train=data/kjv_train.bin --set data.val=data/kjv_val.bin --set train.seq_len=16 \
  --set train.batch_size=8 --set run.steps=4 --set run.eval_every=2 --set run.checkpoint_every=0 \
  --set run.out_dir="$work/recipe" --set run.init_from="$work/wide.h5" >"$work/recipe.log" 2>&1 ||
  { tail "$work/recipe.log"; fail "the fine-tuning recipe"; }
"$trident" ckpt export "$work/recipe/gpt2_kjv/checkpoints/step_000004.h5" --hf "$work/recipe_hf" \
  >/dev/null || fail "exporting the fine-tuned model"
"$trident" ckpt import --hf "$work/recipe_hf" --out "$work/recipe_again.h5" >/dev/null ||
  fail "importing the fine-tuned model"
echo "run.init_from: equal to resuming, on dp2 x tp2 ZeRO-3 too; the recipe ran and exported"

# Hostile files: exit 2, the tensor (or header) named, no checkpoint written.
$files hostile "$work/f32" "$work/hostile" >"$work/cases.txt" || fail "writing hostile files"
hostile_refused "$work/cases.txt" "$work/hostile" 22
"$trident" ckpt import --hf "$work/hostile/nan_weight" --out "$work/nan.h5" --allow-non-finite \
  >/dev/null || fail "a NaN weight asked for with --allow-non-finite"
# Sampling from it refuses the non-finite logits (once one repeated byte, exit 0).
"$trident" generate --ckpt "$work/nan.h5" --prompt hi --tokens 4 >/dev/null 2>"$work/nan_generate.log"
rc=$?
[ $rc = 2 ] && grep -q "^trident: error: '$work/nan.h5': logit [0-9]* of the token after [0-9]* is -\?nan: the checkpoint's weights are not finite" \
  "$work/nan_generate.log" || { cat "$work/nan_generate.log"; fail "generate from NaN weights: exit $rc"; }

"$trident" ckpt export "$work/f32.h5" >/dev/null 2>&1
[ $? = 2 ] || fail "ckpt export without --llmc or --hf did not exit 2"
"$trident" ckpt export "$work/f32.h5" --hf "$work/x" --dtype fp8 >/dev/null 2>&1
[ $? = 2 ] || fail "ckpt export --dtype fp8 did not exit 2"
echo "hf checkpoints: ok"
