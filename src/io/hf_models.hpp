// Hugging Face models in and out: GPT2LMHeadModel's, LlamaForCausalLM's and MixtralForCausalLM's
// config.json and safetensors <-> trident checkpoints.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

// Reads `dir`/config.json and `dir`/model.safetensors (or the shards that
// model.safetensors.index.json names) of a GPT2LMHeadModel, a LlamaForCausalLM or a
// MixtralForCausalLM, checks the
// config against what trident computes and every tensor's name, dtype and shape against the config
// (a missing, extra or misshapen tensor is an InputError naming it), and writes `out`: a step-0
// trident checkpoint (the weights, fresh AdamW moments) that loads on any layout. GPT-2's Conv1D
// weights are stored [in, out] and are transposed to trident's [out, in]; Llama's k_proj | v_proj
// and gate_proj | up_proj are stacked into trident's attn.kv and mlp.fc, Mixtral's experts' w1 | w3
// and w2 into the stacked moe.experts.fc and moe.experts.proj. RoPE is Hugging Face's
// rotate-half layout on both sides, so q_proj and k_proj are taken as they are. A weight that is
// NaN or infinite is refused unless `allow_non_finite`. Prints what it did.
void import_hf(const std::string& dir, const std::string& out, bool allow_non_finite = false);

// Writes a checkpoint's parameters (each checked against its stored checksum) as a
// GPT2LMHeadModel, LlamaForCausalLM or (a Mixture of Experts Mixtral can express)
// MixtralForCausalLM: `dir`/config.json and model.safetensors in `dtype` ("fp32"
// or "bf16"), or, above `max_shard_bytes`, model-0000k-of-0000n.safetensors shards and
// model.safetensors.index.json. Prints what it wrote.
void export_hf(const std::string& checkpoint, const std::string& dir, const std::string& dtype,
               uint64_t max_shard_bytes);

}  // namespace trident
