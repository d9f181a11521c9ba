// Model hyper-parameters of the two families (GPT-2, Llama) and the derived quantities every
// layer uses.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/build_options.hpp"
#include "core/names.hpp"
#include "kernels/moe_options.hpp"
#include "model/recompute.hpp"

namespace trident {

// Which architecture the layers are configured as. GPT-2: LayerNorm with biases, learned
// positions, GELU MLP (4C), multi-head attention, biases everywhere, tied output head. Llama:
// RMSNorm, rotary positions (Hugging Face's rotate-half layout), SwiGLU MLP, grouped-query
// attention, no biases, untied output head by default.
enum class ModelFamily { kGpt2, kLlama };
template <>
inline constexpr std::array<Named<ModelFamily>, 2> kNames<ModelFamily>{
    {{ModelFamily::kGpt2, "gpt2"}, {ModelFamily::kLlama, "llama"}}};

// A Mixture of Experts in place of the dense MLP on some layers (model.n_experts = 0: dense).
// Each routed expert is the family's MLP (GPT-2: GELU with biases; Llama: SwiGLU) of width
// expert_ffn_hidden; shared experts are one dense MLP of n_shared x that width beside them.
struct MoeConfig {
  int n_experts = 0;          // E routed experts per MoE layer
  int top_k = 2;              // experts per token
  int expert_ffn_hidden = 0;  // an expert's hidden width; 0: the dense MLP's
  int n_shared_experts = 0;   // always-on experts, run on every token
  int moe_layer_every = 1;    // layer l has the MoE when l % moe_layer_every == 0 (Megatron)
  kernels::RouterScore router = kernels::RouterScore::kSoftmax;
  double capacity_factor = 0;  // 0: dropless; else capacity ceil(T k / E x factor) per expert
  kernels::DropPolicy drop_policy = kernels::DropPolicy::kProbs;
  bool enabled() const { return n_experts > 0; }
};

// model.vocab_padding's default. GPU builds pad the vocabulary to a multiple of 128 (Megatron's
// make-vocab-size-divisible-by): GPT-2's 50,257 logits make rows that are no multiple of 16 bytes,
// which cuBLAS's tensor-core kernels and 16-byte loads need. Host builds keep the vocabulary as it
// is (their BLAS gains nothing from it), so their tables and figures stay as measured.
constexpr int kGpuVocabPadding = 128;
#if defined(TRIDENT_GPU_BUILD)
constexpr int kDefaultVocabPadding = kGpuVocabPadding;
#else
constexpr int kDefaultVocabPadding = 1;
#endif

struct ModelConfig {
  std::string name = "custom";
  ModelFamily family = ModelFamily::kGpt2;
  int n_layer = 2;       // L
  int n_embd = 64;       // C
  int n_head = 4;        // NH
  int vocab_size = 256;  // V
  int block_size = 64;   // maximum T
  // Llama's knobs (GPT-2 takes only their GPT-2 values).
  int n_kv_head = 0;      // key/value heads (grouped-query attention); 0: n_head
  int ffn_hidden = 0;     // SwiGLU width F; 0: 8C/3 rounded up to multiple_of
  int multiple_of = 256;  // the rounding of the default F
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  std::optional<bool> tie_embeddings;  // unset: GPT-2 ties, Llama does not
  // Each rank's slice of the vocabulary (token table, untied head, logits) is padded to a multiple
  // of this: rows past V are zero, stay zero and are masked out of the loss and of sampling, and
  // nothing outside a rank's buffers sees them (the parameter table, checkpoints and exports hold
  // V rows). A layout choice, like tp's own padding: it changes no result.
  int vocab_padding = kDefaultVocabPadding;
  MoeConfig moe;

  // A GPT-2 of these sizes (the family's other knobs at their defaults).
  static ModelConfig gpt2(int layers, int embd, int heads, int vocab, int block) {
    ModelConfig m;
    m.n_layer = layers, m.n_embd = embd, m.n_head = heads, m.vocab_size = vocab;
    m.block_size = block;
    return m;
  }
  bool llama() const { return family == ModelFamily::kLlama; }
  int head_size() const { return n_embd / n_head; }  // HS
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  bool tied() const { return tie_embeddings.value_or(!llama()); }
  // The MLP's hidden width: 4C (GPT-2) or F (Llama).
  int mlp_hidden() const {
    if (!llama()) return 4 * n_embd;
    if (ffn_hidden > 0) return ffn_hidden;
    const int64_t f = 8 * static_cast<int64_t>(n_embd) / 3;
    return static_cast<int>((f + multiple_of - 1) / multiple_of * multiple_of);
  }
  // Columns of the MLP's first (column-parallel) projection: 4C, or gate | up = 2F.
  int mlp_fc_width() const { return llama() ? 2 * mlp_hidden() : mlp_hidden(); }
  // Whether layer l's MLP is a Mixture of Experts.
  bool moe_layer(int l) const { return moe.enabled() && l % moe.moe_layer_every == 0; }
  int moe_layers() const {
    return moe.enabled() ? (n_layer + moe.moe_layer_every - 1) / moe.moe_layer_every : 0;
  }
  // The global indices of the MoE layers, in order.
  std::vector<int> moe_layer_indices() const {
    std::vector<int> out;
    for (int l = 0; l < n_layer; ++l)
      if (moe_layer(l)) out.push_back(l);
    return out;
  }
  // One expert's hidden width and the columns of its first projection (gate | up for SwiGLU).
  int expert_hidden() const {
    return moe.expert_ffn_hidden > 0 ? moe.expert_ffn_hidden : mlp_hidden();
  }
  int expert_fc_width() const { return llama() ? 2 * expert_hidden() : expert_hidden(); }
  // Rows of the fused q | k | v projection.
  int qkv_width() const { return (n_head + 2 * kv_heads()) * head_size(); }
  // The shape that decides the parameter table, one line: "gpt2 L=12 C=768 NH=12 V=50257
  // block=1024", Llama adding KVH, F and whether the head is tied. Equal lines, equal tables.
  std::string shape_line() const {
    std::string s = std::string(name_of(family)) + " L=" + std::to_string(n_layer) +
                    " C=" + std::to_string(n_embd) + " NH=" + std::to_string(n_head);
    if (llama())
      s += " KVH=" + std::to_string(kv_heads()) + " F=" + std::to_string(mlp_hidden()) +
           (tied() ? " tied" : " untied");
    if (moe.enabled())
      s += " E=" + std::to_string(moe.n_experts) + " Fe=" + std::to_string(expert_hidden()) +
           " shared=" + std::to_string(moe.n_shared_experts) +
           " moe_every=" + std::to_string(moe.moe_layer_every);
    return s + " V=" + std::to_string(vocab_size) + " block=" + std::to_string(block_size);
  }
};

// Parameter count of the model (its parameter table).
int64_t parameter_count(const ModelConfig& m);
// The parameters one token uses: all but the routed experts it is not sent to (a dense model's
// every parameter; an MoE layer counts its router, top_k experts and the shared ones).
int64_t active_parameter_count(const ModelConfig& m);

// Training FLOPs per token: 6 * the active parameters that multiply (forward + backward: all of
// them but an untied input embedding, a lookup; a tied one is the head's matrix; of an MoE layer,
// the experts a token is sent to, as Megatron counts MFU) plus the attention score and value
// products, 12 * L * C * T (PaLM appendix B). Printed at start-up.
double flops_per_token(const ModelConfig& m, int T);

// What recomputation adds to a token's FLOPs (hardware FLOPs utilisation counts them, MFU does
// not): each block recomputed whole repeats its forward, 2 x its matrices' parameters plus
// attention's 4 C T. `chunks` model chunks (pp x virtual stages) each recompute their first
// r.layers blocks (0: all of theirs); selective recomputation adds nothing (the tiled attention
// keeps no probabilities to drop).
double recompute_flops_per_token(const ModelConfig& m, int T, const Recompute& r, int chunks);

}  // namespace trident
