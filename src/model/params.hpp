// The parameter table: one row per parameter, the single source of truth for init, slicing,
// optimizer grouping, checkpoint datasets and (later) ZeRO partitioning and memory modelling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace trident {

enum class InitKind { kNormal, kZeros, kOnes };

// The parts of a transformer block, each named as its parameters are after "h.<layer>." (then
// ".weight" or ".bias"): the one list the parameter table, its ZeRO units, the layers' binding
// and the exports share. GPT-2 fuses q, k and v (attn.qkv); Llama keeps q apart from k | v.
enum class BlockPart {
  kLn1,
  kQkv,
  kQ,
  kKv,
  kAttnProj,
  kLn2,
  kFc,
  kProj,
  kRouter,
  kExpertsFc,
  kExpertsProj,
  kSharedFc,
  kSharedProj
};
const char* name_of(BlockPart part);  // "ln_1", "attn.qkv", ..., "moe.shared.proj"
// "h.<layer>.<part>.<kind>", e.g. "h.3.attn.proj.weight".
std::string block_param(int layer, BlockPart part, const char* kind = "weight");

struct ParamSpec {
  std::string name;            // global name, e.g. "h.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // global shape
  int tp_split_dim = -1;       // dimension a tensor-parallel split cuts, -1 = replicated
  int tp_split_groups = 1;  // the split dim holds this many equal blocks, each cut alike (qkv: 3)
  // Rows of the smallest part a split may cut a block into (a key/value head: HS). A block of
  // fewer such pieces than tp ranks is not cut finer: each piece is held by tp / pieces ranks.
  int64_t tp_split_piece = 1;
  bool vocab_rows = false;  // rows are the vocabulary, padded to a multiple of tp (wte, lm_head)
  // Stacked routed experts (moe.experts.*): dimension 0 is the expert, split over ep into
  // contiguous blocks; the tensor is replicated over the ranks holding the same experts.
  bool experts = false;
  int layer = -1;  // -1: embeddings (first stage); n_layer: final norm and untied head (last)
  InitKind init = InitKind::kNormal;
  float init_std = 0.0f;
  bool weight_decay = false;  // matrices decay; biases and norm gains do not
  int64_t offset = 0;         // element offset in this rank's flat parameter buffer
  int64_t numel() const;
};

class ParamTable {
 public:
  explicit ParamTable(const ModelConfig& m);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  const ParamSpec& at(const std::string& name) const;
  int64_t total_numel() const { return total_; }

 private:
  std::vector<ParamSpec> specs_;
  int64_t total_ = 0;
};

// Which part of the model a rank holds: a contiguous range of layers (a pipeline stage or
// one interleaved chunk of it) and a tensor-parallel slice.
struct StageLayout {
  int first_layer = 0, last_layer = 0;  // [first, last)
  bool has_embedding = true;            // first stage: token and position embeddings
  bool has_head = true;                 // last stage: final norm, output head, loss
  int tp_rank = 0, tp_size = 1;
  int ep_rank = 0, ep_size = 1;  // expert parallelism: experts [ep_rank E / ep, ...) of each layer
  int cp_rank = 0, cp_size = 1;  // context parallelism: this rank's chunks of each sequence
};
StageLayout whole_model(const ModelConfig& m);
// The part held by pipeline rank pp_rank (of pp), model chunk `chunk` (of v per rank, Megatron's
// interleaving: virtual stage chunk * pp + pp_rank), tp rank tp_rank (of tp). Layers are split
// evenly; n_layer must be divisible by pp * v.
StageLayout stage_layout(const ModelConfig& m, int pp, int v, int pp_rank, int chunk, int tp,
                         int tp_rank);
// The vocabulary padded to a multiple of tp * model.vocab_padding, so every rank holds an equal
// slice, itself a multiple of vocab_padding.
int padded_vocab(const ModelConfig& m, int tp_size);

// One parameter as a rank holds it: its tensor-parallel slice of the global tensor.
struct LocalParam {
  const ParamSpec* spec = nullptr;
  std::vector<int64_t> shape;  // local shape
  int64_t offset = 0;          // in the rank's flat buffer
  int64_t numel = 0;
  // How many tp ranks hold this same slice: 1 for a split tensor, tp for a replicated one, and in
  // between for key/value heads shared by several ranks' query heads.
  int tp_replicas = 1;
  bool experts() const { return spec->experts; }
  // Whether tp rank r holds the first copy of its slice: the one that counts it once (norms,
  // checkpoint writes).
  bool first_replica(int tp_rank) const { return tp_rank % tp_replicas == 0; }
};

// A group of consecutive parameters that ZeRO moves together, and that 16-bit storage widens to
// fp32 together: the token embedding, the position embedding, a quarter of a transformer block
// (kUnitsPerBlock: each of its four matrices with its bias, the norm before it joined to the first
// two; Llama's q and kv together), or the final norm with an untied head. A unit is what one op
// reads, so the working buffers hold two of the largest quarter (4h^2/tp), not two blocks
// (12h^2/tp). Its segment [offset, offset
// + padded) of the flat buffer is padded with zeros to a multiple of the unit alignment (dp under
// ZeRO), so every dp rank owns an equal, contiguous shard of every unit, and a unit is all-gathered
// or reduce-scattered as one equal-count collective.
inline constexpr int kUnitsPerBlock = 4;
// The unit within its block of a block parameter (its name's part after "h.<layer>."): 0 for
// ln_1 and attn.qkv (Llama: attn.q, attn.kv), 1 for attn.proj, 2 for ln_2 and mlp.fc (an MoE
// layer: moe.router, moe.experts.fc, moe.shared.fc), 3 for mlp.proj (moe.experts.proj,
// moe.shared.proj).
int block_unit_part(const std::string& name);
// The first parameter of part `part` (0..kUnitsPerBlock-1) of block `layer` of model m.
std::string block_unit_first_param(const ModelConfig& m, int layer, int part);

// Whether ZeRO-2/3 streams this parameter's gradient out of its GEMM a block of rows at a time
// (model/grad_sink.hpp) instead of keeping it until its unit is done: the linear layers' matrices,
// the token table and an untied head; not the position table, the norms or the biases.
bool streams_grad(const ParamSpec& spec);

struct ParamUnit {
  int64_t offset = 0, numel = 0, padded = 0;
  bool experts = false;  // expert tensors only (units of their own: expert_unit_alignment > 0)
  // What one op reads together: the embedding, a block's quarter, the head. A group is one unit,
  // or consecutive ones where expert tensors form units of their own.
  int group = 0;
};

// The rank's parameters: the rows of the global table its stage holds, sliced for its tp rank,
// laid out unit by unit in one flat buffer. The local <-> global index map is a pure function of
// the layout, so any rank can compute where any other rank's elements live (initialisation,
// gathering, checkpoints).
class LocalParamTable {
 public:
  // Units are padded to a multiple of unit_alignment; with expert_unit_alignment > 0 the expert
  // tensors form units of their own (a block's quarter may then hold several units), padded to a
  // multiple of it.
  LocalParamTable(const ParamTable& table, const ModelConfig& m, const StageLayout& layout,
                  int64_t unit_alignment = 1, int64_t expert_unit_alignment = 0);
  const StageLayout& layout() const { return layout_; }
  const std::vector<LocalParam>& params() const { return params_; }
  const std::vector<ParamUnit>& units() const { return units_; }
  // Index into units() of the unit holding p.
  int unit_of(const LocalParam& p) const;
  // One past the last unit of unit u's group (units [u, group_end(u)) when u opens it).
  int group_end(int u) const;
  const LocalParam& at(const std::string& name) const;
  bool holds(const std::string& name) const;
  // Elements in the flat buffer, unit padding included.
  int64_t total_numel() const { return total_; }
  // Global flat index (row-major in the global shape) of local element i, or -1 for an element
  // of vocabulary padding that has no global counterpart.
  int64_t global_index(const LocalParam& p, int64_t i) const;

 private:
  StageLayout layout_;
  std::vector<LocalParam> params_;
  std::vector<ParamUnit> units_;
  int64_t total_ = 0;  // the flat buffer, unit padding included
};

// Counter-based initial value: a pure function of (seed, parameter name, global element
// index), so any rank can generate exactly its slice of any tensor.
float initial_value(uint64_t seed, const ParamSpec& spec, int64_t global_index);

}  // namespace trident
