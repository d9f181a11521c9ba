// Parameter table construction and the counter-based initialiser (GPT-2's scheme).
#include "model/params.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/hash.hpp"

namespace trident {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t parameter_count(const ModelConfig& m) {
  return ParamTable(m).total_numel();
}

namespace {

// The share of a parameter one token uses: k of E for the routed experts' tensors.
double active_share(const ModelConfig& m, const ParamSpec& p) {
  return p.name.find(".moe.experts.") != std::string::npos
             ? static_cast<double>(m.moe.top_k) / m.moe.n_experts
             : 1.0;
}

}  // namespace

int64_t active_parameter_count(const ModelConfig& m) {
  int64_t active = 0;
  const ParamTable table(m);
  for (const ParamSpec& p : table.specs())
    active += static_cast<int64_t>(std::llround(p.numel() * active_share(m, p)));
  return active;
}

double flops_per_token(const ModelConfig& m, int T) {
  const double lookup = m.tied() ? 0.0 : static_cast<double>(m.vocab_size) * m.n_embd;
  return 6.0 * (static_cast<double>(active_parameter_count(m)) - lookup) +
         12.0 * m.n_layer * static_cast<double>(m.n_embd) * T;
}

double recompute_flops_per_token(const ModelConfig& m, int T, const Recompute& r, int chunks) {
  if (r.policy != RecomputePolicy::kFull) return 0.0;
  const int per_chunk = m.n_layer / std::max(1, chunks);
  const int blocks = r.layers == 0 ? m.n_layer : std::min(r.layers, per_chunk) * chunks;
  double matrices = 0;  // the blocks' active matrices (2-D, or an expert's slice of 3-D), averaged
  const ParamTable table(m);
  for (const ParamSpec& p : table.specs())
    if (p.layer >= 0 && p.layer < m.n_layer && p.shape.size() >= 2)
      matrices += static_cast<double>(p.numel()) * active_share(m, p) / m.n_layer;
  return blocks * (2.0 * matrices + 4.0 * static_cast<double>(m.n_embd) * T);
}

ParamTable::ParamTable(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.vocab_size, T = m.block_size, F = m.mlp_hidden();
  const int64_t HS = m.head_size(), q_rows = m.n_head * HS, kv_rows = m.kv_heads() * HS;
  const float std = 0.02f;
  // GPT-2 scales the residual projections so the residual stream's variance does not grow
  // with depth: two residual additions per layer.
  const float residual_std = std / std::sqrt(2.0f * m.n_layer);
  struct Split {
    int dim = -1, groups = 1;
    int64_t piece = 1;  // rows of the smallest part a split may cut out (a key/value head)
  };
  const Split replicated, column{0, 1, 1}, row{1, 1, 1};
  auto add = [&](std::string name, std::vector<int64_t> shape, Split split, int layer,
                 InitKind init, float init_std, bool decay) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.tp_split_dim = split.dim;
    p.tp_split_groups = split.groups;
    p.tp_split_piece = split.piece;
    p.vocab_rows = p.name == "wte" || p.name == "lm_head";
    p.layer = layer;
    p.init = init;
    p.init_std = init_std;
    p.weight_decay = decay;
    p.offset = total_;
    total_ += p.numel();
    specs_.push_back(std::move(p));
  };
  add("wte", {V, C}, column, -1, InitKind::kNormal, std, true);  // vocabulary-parallel
  if (!m.llama()) add("wpe", {T, C}, replicated, -1, InitKind::kNormal, std, true);
  for (int l = 0; l < m.n_layer; ++l) {
    const auto name = [l](BlockPart part, const char* kind = "weight") {
      return block_param(l, part, kind);
    };
    auto norm = [&](BlockPart part) {
      add(name(part), {C}, replicated, l, InitKind::kOnes, 0, false);
      if (!m.llama()) add(name(part, "bias"), {C}, replicated, l, InitKind::kZeros, 0, false);
    };
    norm(BlockPart::kLn1);
    if (m.llama()) {
      // Grouped-query attention: q and k | v are separate tensors, adjacent in the buffer so the
      // column-parallel GEMM reads them as one [q_rows + 2 kv_rows, C] matrix. When tp exceeds the
      // key/value heads, each rank holds the one its query heads read (replicated).
      add(name(BlockPart::kQ), {q_rows, C}, column, l, InitKind::kNormal, std, true);
      add(name(BlockPart::kKv), {2 * kv_rows, C}, {0, 2, HS}, l, InitKind::kNormal, std, true);
    } else {
      add(name(BlockPart::kQkv), {3 * C, C}, {0, 3, 1}, l, InitKind::kNormal, std, true);
      add(name(BlockPart::kQkv, "bias"), {3 * C}, {0, 3, 1}, l, InitKind::kZeros, 0, false);
    }
    add(name(BlockPart::kAttnProj), {C, q_rows}, row, l, InitKind::kNormal, residual_std, true);
    if (!m.llama())
      add(name(BlockPart::kAttnProj, "bias"), {C}, replicated, l, InitKind::kZeros, 0, false);
    norm(BlockPart::kLn2);
    // Llama: gate | up, each split alike (SwiGLU reads a rank's gate and up columns together).
    const Split fc = m.llama() ? Split{0, 2, 1} : column;
    // The two projections of a dense MLP of hidden width `width` (the block's, split over tp, or
    // the shared experts', which an MoE layer runs replicated on each tp rank's own rows).
    auto mlp_fc = [&](BlockPart part, int64_t width, bool split) {
      const int64_t fc_rows = m.llama() ? 2 * width : width;
      add(name(part), {fc_rows, C}, split ? fc : replicated, l, InitKind::kNormal, std, true);
      if (!m.llama())
        add(name(part, "bias"), {width}, split ? column : replicated, l, InitKind::kZeros, 0,
            false);
    };
    auto mlp_proj = [&](BlockPart part, int64_t width, bool split) {
      add(name(part), {C, width}, split ? row : replicated, l, InitKind::kNormal, residual_std,
          true);
      if (!m.llama()) add(name(part, "bias"), {C}, replicated, l, InitKind::kZeros, 0, false);
    };
    if (!m.moe_layer(l)) {
      mlp_fc(BlockPart::kFc, F, true);
      mlp_proj(BlockPart::kProj, F, true);
      continue;
    }
    // Mixture of Experts: the router (fp32 arithmetic) and every routed expert's MLP, stacked
    // along a leading expert dimension (the one expert parallelism splits), and the shared
    // experts' MLP; first projections before second ones, so each ZeRO unit is contiguous.
    const int64_t E = m.moe.n_experts, Fe = m.expert_hidden();
    const int64_t shared = static_cast<int64_t>(m.moe.n_shared_experts) * Fe;
    add(name(BlockPart::kRouter), {E, C}, replicated, l, InitKind::kNormal, std, true);
    const size_t first_fc = specs_.size();
    add(name(BlockPart::kExpertsFc), {E, m.expert_fc_width(), C}, replicated, l, InitKind::kNormal,
        std, true);
    if (!m.llama())
      add(name(BlockPart::kExpertsFc, "bias"), {E, Fe}, replicated, l, InitKind::kZeros, 0, false);
    for (size_t i = first_fc; i < specs_.size(); ++i) specs_[i].experts = true;
    if (shared > 0) mlp_fc(BlockPart::kSharedFc, shared, false);
    const size_t first_proj = specs_.size();
    add(name(BlockPart::kExpertsProj), {E, C, Fe}, replicated, l, InitKind::kNormal, residual_std,
        true);
    if (!m.llama())
      add(name(BlockPart::kExpertsProj, "bias"), {E, C}, replicated, l, InitKind::kZeros, 0, false);
    for (size_t i = first_proj; i < specs_.size(); ++i) specs_[i].experts = true;
    if (shared > 0) mlp_proj(BlockPart::kSharedProj, shared, false);
  }
  add("ln_f.weight", {C}, replicated, m.n_layer, InitKind::kOnes, 0, false);
  if (!m.llama()) add("ln_f.bias", {C}, replicated, m.n_layer, InitKind::kZeros, 0, false);
  if (!m.tied()) add("lm_head", {V, C}, column, m.n_layer, InitKind::kNormal, std, true);
}

StageLayout whole_model(const ModelConfig& m) {
  StageLayout s;
  s.last_layer = m.n_layer;
  return s;
}

StageLayout stage_layout(const ModelConfig& m, int pp, int v, int pp_rank, int chunk, int tp,
                         int tp_rank) {
  const int stages = pp * v, per_stage = m.n_layer / stages;
  const int vstage = chunk * pp + pp_rank;
  StageLayout s;
  s.first_layer = vstage * per_stage;
  s.last_layer = s.first_layer + per_stage;
  s.has_embedding = vstage == 0;
  s.has_head = vstage == stages - 1;
  s.tp_rank = tp_rank;
  s.tp_size = tp;
  return s;
}

int padded_vocab(const ModelConfig& m, int tp_size) {
  const int64_t multiple = static_cast<int64_t>(tp_size) * std::max(1, m.vocab_padding);
  return static_cast<int>((m.vocab_size + multiple - 1) / multiple * multiple);
}

LocalParamTable::LocalParamTable(const ParamTable& table, const ModelConfig& m,
                                 const StageLayout& layout, int64_t unit_alignment,
                                 int64_t expert_unit_alignment)
    : layout_(layout) {
  // Unit of a held parameter: 0 for wte, 1 for wpe, 2 + 4l + part for block l, 2 + 4 n_layer
  // for ln_f, and one more for lm_head. wte is a unit of its own so the first and the last stage,
  // which both hold it, shard it alike.
  auto unit_of = [&](const ParamSpec& spec) {
    if (spec.layer < 0) return spec.name == "wte" ? 0 : 1;  // wpe
    if (spec.layer >= m.n_layer)  // ln_f; an untied head is a unit of its own
      return 2 + kUnitsPerBlock * m.n_layer + (spec.name == "lm_head" ? 1 : 0);
    return 2 + kUnitsPerBlock * spec.layer + block_unit_part(spec.name);
  };
  // With expert units of their own, a parameter's unit is its quarter's and its kind's.
  const bool expert_units = expert_unit_alignment > 0;
  const auto unit_key = [&](const ParamSpec& spec) {
    return 2 * unit_of(spec) + (expert_units && spec.experts ? 1 : 0);
  };
  int current_unit = -1;
  auto close_unit = [&] {
    if (units_.empty()) return;
    ParamUnit& u = units_.back();
    const int64_t align = u.experts ? expert_unit_alignment : unit_alignment;
    u.padded = (u.numel + align - 1) / align * align;
    total_ = u.offset + u.padded;
  };
  for (const ParamSpec& spec : table.specs()) {
    bool held = false;
    if (spec.name == "wte")
      held = layout.has_embedding || (layout.has_head && m.tied());
    else if (spec.layer < 0)
      held = layout.has_embedding;
    else if (spec.layer >= m.n_layer)
      held = layout.has_head;
    else
      held = spec.layer >= layout.first_layer && spec.layer < layout.last_layer;
    if (!held) continue;
    if (unit_key(spec) != current_unit) {
      close_unit();
      current_unit = unit_key(spec);
      units_.push_back({total_, 0, 0, expert_units && spec.experts, unit_of(spec)});
    }
    LocalParam p;
    p.spec = &spec;
    p.shape = spec.shape;
    // Experts are not split over tp; which ranks hold the same ones is the expert fold's
    // replica group (ShardOwner::expert_dp), not tp: each tp rank counts its own.
    p.tp_replicas = spec.tp_split_dim >= 0 || spec.experts ? 1 : layout.tp_size;
    if (spec.tp_split_dim >= 0 && (layout.tp_size > 1 || spec.vocab_rows)) {
      int64_t& dim = p.shape[spec.tp_split_dim];
      if (spec.vocab_rows) dim = padded_vocab(m, layout.tp_size);
      const int64_t pieces = dim / spec.tp_split_groups / spec.tp_split_piece;
      if (pieces >= layout.tp_size) {
        dim /= layout.tp_size;
      } else {  // fewer pieces than ranks: each piece held by tp / pieces ranks
        p.tp_replicas = static_cast<int>(layout.tp_size / pieces);
        dim = spec.tp_split_groups * spec.tp_split_piece;
      }
    }
    if (spec.experts) p.shape[0] /= layout.ep_size;  // this rank's contiguous block of experts
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= d;
    p.offset = units_.back().offset + units_.back().numel;
    units_.back().numel += p.numel;
    params_.push_back(p);
  }
  close_unit();
}

const char* name_of(BlockPart part) {
  switch (part) {
    case BlockPart::kLn1:
      return "ln_1";
    case BlockPart::kQkv:
      return "attn.qkv";
    case BlockPart::kQ:
      return "attn.q";
    case BlockPart::kKv:
      return "attn.kv";
    case BlockPart::kAttnProj:
      return "attn.proj";
    case BlockPart::kLn2:
      return "ln_2";
    case BlockPart::kFc:
      return "mlp.fc";
    case BlockPart::kProj:
      return "mlp.proj";
    case BlockPart::kRouter:
      return "moe.router";
    case BlockPart::kExpertsFc:
      return "moe.experts.fc";
    case BlockPart::kExpertsProj:
      return "moe.experts.proj";
    case BlockPart::kSharedFc:
      return "moe.shared.fc";
    case BlockPart::kSharedProj:
      return "moe.shared.proj";
  }
  throw std::logic_error("unknown block part");
}

std::string block_param(int layer, BlockPart part, const char* kind) {
  return "h." + std::to_string(layer) + "." + name_of(part) + "." + kind;
}

namespace {
// Each block unit's parts, the first naming its first parameter (the fourth unit's first: a dense
// layer's, then an MoE layer's).
const std::vector<BlockPart> kUnitParts[kUnitsPerBlock] = {
    {BlockPart::kLn1, BlockPart::kQkv, BlockPart::kQ, BlockPart::kKv},
    {BlockPart::kAttnProj},
    {BlockPart::kLn2, BlockPart::kFc, BlockPart::kRouter, BlockPart::kExpertsFc,
     BlockPart::kSharedFc},
    {BlockPart::kProj, BlockPart::kExpertsProj, BlockPart::kSharedProj}};
}  // namespace

bool streams_grad(const ParamSpec& spec) {
  return spec.shape.size() == 2 && spec.name != "wpe" &&
         spec.name.find(".moe.") == std::string::npos;
}

int block_unit_part(const std::string& name) {
  const size_t layer_end = name.find('.', 2);  // "h.<layer>."
  if (name.rfind("h.", 0) != 0 || layer_end == std::string::npos)
    throw std::invalid_argument(name + " is not a block parameter");
  const std::string rest = name.substr(layer_end + 1);
  for (int unit = 0; unit < kUnitsPerBlock; ++unit)
    for (const BlockPart part : kUnitParts[unit])
      if (rest.rfind(std::string(name_of(part)) + ".", 0) == 0) return unit;
  throw std::invalid_argument(name + " belongs to no block unit");
}

std::string block_unit_first_param(const ModelConfig& m, int layer, int part) {
  const bool moe_proj = part == kUnitsPerBlock - 1 && m.moe_layer(layer);
  return block_param(layer, kUnitParts[part][moe_proj ? 1 : 0]);
}

int LocalParamTable::unit_of(const LocalParam& p) const {
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].offset <= p.offset && p.offset < units_[u].offset + units_[u].padded)
      return static_cast<int>(u);
  return -1;
}

int LocalParamTable::group_end(int u) const {
  int end = u + 1;
  while (end < static_cast<int>(units_.size()) && units_[end].group == units_[u].group) ++end;
  return end;
}

const LocalParam& LocalParamTable::at(const std::string& name) const {
  for (const auto& p : params_)
    if (p.spec->name == name) return p;
  throw std::out_of_range("this rank holds no parameter named " + name);
}

bool LocalParamTable::holds(const std::string& name) const {
  for (const auto& p : params_)
    if (p.spec->name == name) return true;
  return false;
}

int64_t LocalParamTable::global_index(const LocalParam& p, int64_t i) const {
  const ParamSpec& s = *p.spec;
  // An expert block is contiguous in the global tensor; experts are not split over tp.
  if (s.experts) return static_cast<int64_t>(layout_.ep_rank) * p.numel + i;
  if (p.tp_replicas == layout_.tp_size && !s.vocab_rows) return i;
  const int r = layout_.tp_rank / p.tp_replicas;  // which distinct slice this rank holds
  if (s.tp_split_dim == 0) {
    const int64_t inner = p.numel / p.shape[0];
    const int64_t local_row = i / inner, col = i % inner;
    const int64_t local_block = p.shape[0] / s.tp_split_groups;   // rows per group, this rank
    const int64_t global_block = s.shape[0] / s.tp_split_groups;  // rows per group, globally
    const int64_t b = local_row / local_block, j = local_row % local_block;
    const int64_t row = b * global_block + r * local_block + j;
    if (row >= s.shape[0]) return -1;  // wte's slices cover the padded vocabulary
    return row * inner + col;
  }
  // Split along the last dimension of a matrix (row-parallel weights).
  const int64_t local_cols = p.shape[1], row = i / local_cols, j = i % local_cols;
  return row * s.shape[1] + r * local_cols + j;
}

const ParamSpec& ParamTable::at(const std::string& name) const {
  for (const auto& p : specs_)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named " + name);
}

float initial_value(uint64_t seed, const ParamSpec& spec, int64_t global_index) {
  switch (spec.init) {
    case InitKind::kZeros:
      return 0.0f;
    case InitKind::kOnes:
      return 1.0f;
    case InitKind::kNormal:
      break;
  }
  const uint64_t key = mix64(seed ^ mix64(fnv1a(spec.name)));
  const uint64_t bits = mix64(key ^ mix64(static_cast<uint64_t>(global_index)));
  // Box-Muller on two 32-bit uniforms; u1 in (0, 1] so the log is finite.
  const double u1 = (static_cast<double>(bits >> 32) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(bits & 0xffffffffULL) / 4294967296.0;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  return static_cast<float>(z * spec.init_std);
}

}  // namespace trident
