#!/usr/bin/env bash
# Hugging Face MixtralForCausalLM directories in and out: every expert's w1, w2 and w3 and each
# layer's router read into trident's stacked experts and written back byte for byte (fp32, and
# bf16 in shards); logits and greedy tokens equal to a float64 Mixtral written from Hugging
# Face's definition; the import fine-tuned with run.init_from serially, at dp 2 x ep 2 and at
# pp 2 alike; a trained expert-parallel checkpoint exported, re-imported and computing what
# trident computes; hostile directories (an expert missing, one too many, ...) refused naming
# their cause.
# shellcheck source=tests/e2e/hf_common.sh
source "$(dirname "$0")/hf_common.sh" "$@"
llama="/usr/bin/python3 $src/tests/e2e/hf_llama.py"

$llama make "$work/f32" --experts 4 || fail "writing the fp32 Mixtral"
"$trident" ckpt import --hf "$work/f32" --out "$work/f32.h5" | quiet || fail "importing fp32"
"$trident" ckpt verify "$work/f32.h5" | tail -n 1
"$trident" ckpt export "$work/f32.h5" --hf "$work/f32_out" >/dev/null || fail "exporting fp32"
$llama compare "$work/f32" "$work/f32_out" || fail "fp32 round trip differs"
$llama make "$work/bf16" --experts 4 --dtype BF16 --shards 3 --seed 1 || fail "writing bf16"
"$trident" ckpt import --hf "$work/bf16" --out "$work/bf16.h5" >/dev/null ||
  fail "importing sharded bf16"
"$trident" ckpt export "$work/bf16.h5" --hf "$work/bf16_out" --dtype bf16 --max-shard-mb 0.02 \
  >/dev/null || fail "exporting bf16 in shards"
$llama compare "$work/bf16" "$work/bf16_out" || fail "bf16 round trip differs"
echo "round trips: fp32 and bf16 (sharded) byte for byte, every expert"

# The imported experts compute what Hugging Face's Mixtral computes.
$llama make "$work/wide" --experts 4 --scale 10 --seed 6 || fail "writing the wide Mixtral"
"$trident" ckpt import --hf "$work/wide" --out "$work/wide.h5" >/dev/null || fail "importing"
prompt="In the beginning God created the heaven and the earth."
logits_match "$llama" "$work/wide" "$work/wide.h5" "$prompt" logits
echo "logits: max|trident - reference| / max|reference| = $logits_error"
prompt="And God said"
greedy_matches "$llama" "$work/wide" "$work/wide.h5" "$prompt" 30
echo "greedy decoding equals the float64 reference: $greedy_tokens"

# Fine-tuning the import: serially, at dp 2 with ep 2 and at pp 2 (two sequences per routing
# group on each), the same losses.
model=(--set model.n_layer=2 --set model.n_embd=32 --set model.n_head=4 --set model.n_kv_head=2
       --set model.ffn_hidden=88 --set model.block_size=16 --set model.n_experts=4
       --set model.top_k=2 --set model.expert_ffn_hidden=88 --set model.moe_layer_every=1
       --set train.seq_len=16 --set train.micro_batch_size=2)
for layout in serial dp2ep2 pp2; do
  launch=() sets=()
  [ $layout = dp2ep2 ] && launch=(mpirun -np 2 --oversubscribe) &&
    sets=(--set parallel.dp=2 --set parallel.ep=2)
  [ $layout = pp2 ] && launch=(mpirun -np 2 --oversubscribe) && sets=(--set parallel.pp=2)
  ${launch[@]+"${launch[@]}"} "$trident" train --config inputs/moe-tiny.toml "${model[@]}" \
    ${sets[@]+"${sets[@]}"} --set run.steps=4 --set run.checkpoint_every=0 \
    --set run.out_dir="$work/$layout" --set run.init_from="$work/wide.h5" \
    >"$work/$layout.log" 2>&1 || { tail "$work/$layout.log"; fail "training from the import ($layout)"; }
  grep -q "run.init_from: weights of $work/wide.h5" "$work/$layout.log" ||
    fail "$layout: no run.init_from line"
done
for layout in dp2ep2 pp2; do
  $check compare "$work/serial/moe-tiny/timings.h5" "$work/$layout/moe-tiny/timings.h5" \
    --min-steps 4 --rtol 1e-5 || fail "the import trains differently on $layout"
done
echo "the import fine-tunes alike serially, at dp 2 x ep 2 and at pp 2"

# The expert-parallel run's checkpoint exports, re-imports and exports again byte for byte, and
# the export computes what trident computes.
reexport "$work/dp2ep2/moe-tiny/checkpoints/step_000004.h5" trained "$llama" "$prompt"
echo "the dp 2 x ep 2 checkpoint exports, re-imports and computes what trident computes" \
  "($reexport_error)"

# A model Mixtral cannot express is refused before anything is written.
"$trident" train --config inputs/moe-tiny.toml --set run.steps=1 --set run.out_dir="$work/every2" \
  >/dev/null 2>&1 || fail "training the moe_layer_every = 2 model"
out=$("$trident" ckpt export "$work/every2/moe-tiny/checkpoints/step_000001.h5" \
  --hf "$work/every2_hf" 2>&1) && fail "exported a model with dense layers as Mixtral"
grep -q "MixtralForCausalLM cannot express: model.moe_layer_every is not 1" <<<"$out" ||
  fail "unclear refusal: $out"
[ ! -e "$work/every2_hf/config.json" ] || fail "the refused export wrote config.json"

$llama hostile "$work/f32" "$work/hostile" >"$work/cases.txt" || fail "writing hostile files"
hostile_refused "$work/cases.txt" "$work/hostile" 6
echo "hf mixtral: ok"
