// The one description of a stage's buffers (see stage_storage.hpp).
#include "model/stage_storage.hpp"

#include <algorithm>

#include <cstring>
#include <stdexcept>

#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/attention_tiles.hpp"

namespace trident {

BlockExtents StageShape::extents(int B, int T) const {
  const size_t N = static_cast<size_t>(B) * T, C = model.n_embd;
  const size_t rows = sequence_parallel() ? N / layout.tp_size : N;
  return {rows * C, N * qkv_tp(), N * heads_tp(), N * C_tp(), N * fc_tp(), N * F_tp(), rows};
}

bool StageShape::any_moe_block() const {
  for (int i = 0; i < blocks(); ++i)
    if (moe_block(i)) return true;
  return false;
}

bool StageShape::any_dense_block() const {
  for (int i = 0; i < blocks(); ++i)
    if (!moe_block(i)) return true;
  return false;
}

AttentionHeads StageShape::attention_heads() const {
  AttentionHeads h;
  h.heads = heads_tp();
  h.kv_heads = kv_heads_tp();
  h.head_size = model.head_size();
  h.replicas = kv_replicas();
  h.global_kv_heads = model.kv_heads();
  h.kv_head = layout.tp_rank / h.replicas;
  h.rope = model.llama();
  h.tiles = buffers.attention_tiles;
  h.kernel = buffers.attention_kernel;
  return h;
}

namespace {

// What an MoE layer keeps for a micro-batch of N tokens: N k rows of this rank's tokens in expert
// order, and the rows that may arrive at its experts (the bound MoeShape::arrived_rows).
MoeActivations moe_internals(const StageShape& s, size_t N, MemCategory c, BufferList& list) {
  const Precision p = s.buffers.precision;
  const MoeShape m = s.moe();
  const size_t n = N / m.tp, slots = n * m.k, arrived = m.arrived_rows(n);
  MoeActivations a;
  a.logits = list.f32("moe_logits", c, N * m.E);
  a.scores = list.f32("moe_scores", c, N * m.E);
  a.weight = list.f32("moe_weight", c, N * m.k);
  a.choice = list.int32("moe_choice", c, N * m.k);
  a.row = list.int32("moe_row", c, N * m.k);
  if (m.tp > 1) a.local_row = list.int32("moe_local_row", c, slots);
  a.counts = list.int32("moe_counts", c, m.E);
  a.offsets = list.int32("moe_offsets", c, m.E + 1);
  a.dispatched = list.stored("moe_dispatched", c, slots * m.C, p);
  if (m.ep > 1) {
    a.arrivals = list.int32("moe_arrivals", c, m.E);
    a.arrived = list.stored("moe_arrived", c, arrived * m.C, p);
  }
  a.fc = list.stored("moe_fc", c, arrived * m.width(m.Fe), p);
  a.act = list.stored("moe_act", c, arrived * m.Fe, p);
  if (m.Fs > 0) {
    a.shared_fc = list.stored("moe_shared_fc", c, n * m.width(m.Fs), p);
    a.shared_act = list.stored("moe_shared_act", c, n * m.Fs, p);
  }
  a.expert_out = list.stored("moe_expert_out", c, slots * m.C, p);
  return a;
}

// A block's tensors other than its output, in the storage format (the statistics in fp32): a
// dense MLP's and, or, an MoE layer's.
BlockActivations block_internals(const StageShape& s, const BlockExtents& e, MemCategory c,
                                 BufferList& list, bool dense, bool moe) {
  const Precision p = s.buffers.precision;
  const bool layernorm = !s.model.llama();  // RMSNorm keeps no mean
  BlockActivations b;
  b.ln1 = list.stored("ln1", c, e.rows_c, p);
  if (layernorm) b.ln1_mean = list.f32("ln1_mean", c, e.stats);
  b.ln1_rstd = list.f32("ln1_rstd", c, e.stats);
  b.qkv = list.stored("qkv", c, e.qkv, p);
  b.att_lse = list.f32("att_lse", c, e.heads);
  b.atty = list.stored("atty", c, e.atty, p);
  b.res_attn = list.stored("res_attn", c, e.rows_c, p);
  b.ln2 = list.stored("ln2", c, e.rows_c, p);
  if (layernorm) b.ln2_mean = list.f32("ln2_mean", c, e.stats);
  b.ln2_rstd = list.f32("ln2_rstd", c, e.stats);
  if (dense) {
    b.fch = list.stored("fch", c, e.fc, p);
    b.fch_act = list.stored("fch_act", c, e.act, p);
  }
  if (moe) b.moe = moe_internals(s, static_cast<size_t>(s.max_batch) * s.max_seq, c, list);
  return b;
}

// What a slot keeps of a block (an MoE one or not): its output unless it is sent, and unless the
// block is recomputed whole what its backward reads.
BlockActivations kept_block(const StageShape& s, const BlockExtents& e, bool output, bool internals,
                            bool moe, BufferList& list) {
  constexpr MemCategory act = MemCategory::kActivations;
  BlockActivations k = internals ? block_internals(s, e, act, list, !moe, moe) : BlockActivations{};
  if (output) k.res_mlp = list.stored("res_mlp", act, e.rows_c, s.buffers.precision);
  return k;
}

ActivationSlot activation_slot(const StageShape& s, BufferList& list) {
  constexpr MemCategory act = MemCategory::kActivations;
  const Precision p = s.buffers.precision;
  const BlockExtents e = s.extents(s.max_batch, s.max_seq);
  const size_t N = static_cast<size_t>(s.max_batch) * s.max_seq;
  ActivationSlot a;
  a.tokens = list.int32("tokens", act, N);
  a.targets = list.int32("targets", act, N);
  a.input = list.stored("input", act, e.rows_c, p);
  for (int i = 0; i < s.blocks(); ++i) {
    // The last block's output of a stage without the head is sent, not kept.
    const bool output = i + 1 < s.blocks() || s.layout.has_head;
    a.blocks.push_back(
        kept_block(s, e, output, !s.buffers.recompute.full_block(i), s.moe_block(i), list));
  }
  if (s.any_moe_block()) a.moe_losses = list.f32("moe_losses", act, 2 * s.blocks());
  if (s.layout.has_head) {
    a.lnf = list.stored("lnf", act, e.rows_c, p);
    a.logits = list.stored("logits", act, N * s.V_tp(), p);
    if (!s.model.llama()) a.lnf_mean = list.f32("lnf_mean", act, e.stats);
    a.lnf_rstd = list.f32("lnf_rstd", act, e.stats);
    a.losses = list.f32("losses", act, N);
    a.lse = list.f32("lse", act, N);
  }
  return a;
}

DeferredGrads deferred_grads(const StageShape& s, BufferList& list) {
  const BlockExtents e = s.extents(s.max_batch, s.max_seq);
  const auto kept = [&](const char* label, size_t n) {
    return list.stored(label, MemCategory::kActivations, n, s.buffers.precision);
  };
  DeferredGrads d;
  for (int i = 0; i < s.blocks(); ++i)
    d.blocks.push_back({kept("deferred_out", e.rows_c), kept("deferred_mid", e.rows_c),
                        kept("deferred_dln2", e.rows_c), kept("deferred_dln1", e.rows_c),
                        kept("deferred_dfch", e.fc), kept("deferred_dqkv", e.qkv)});
  if (s.layout.has_embedding) d.input = kept("deferred_input", e.rows_c);
  if (s.layout.has_head) d.dlnf = kept("deferred_dlnf", e.rows_c);
  return d;
}

void parameters_and_gradients(const StageShape& s, const LocalParamTable& local, BufferList& list,
                              StageStorage& st) {
  // Under ZeRO-3 the parameter shards hold the gathered units and redirect the parameters.
  if (s.buffers.full_params)
    st.params =
        list.stored("params", MemCategory::kParams, local.total_numel(), s.buffers.precision);
  if (s.buffers.full_grads) st.grads = list.f32("grads", MemCategory::kGrads, local.total_numel());
}

}  // namespace

size_t column_partial_floats(const StageShape& s) {
  const bool biases = !s.model.llama();
  const int widest = std::max(
      {(biases ? 2 : 1) * s.model.n_embd, biases ? s.qkv_tp() : 0, biases ? s.fc_tp() : 0});
  return kernels::column_partials_elements(1, s.max_batch * s.max_seq, widest);
}

namespace {

// What a stage's MoE layers share: the dispatch plan's lists, the router's fp32 operands (16-bit
// storage) and the backward's gradients of the routing and the expert buffers.
MoeScratch moe_scratch(const StageShape& s, BufferList& list) {
  constexpr MemCategory work = MemCategory::kWorkspace;
  const Precision p = s.buffers.precision;
  const MoeShape m = s.moe();
  const size_t N = static_cast<size_t>(s.max_batch) * s.max_seq, n = N / m.tp, slots = n * m.k;
  const size_t arrived = m.arrived_rows(n);
  MoeScratch x;
  x.listed = list.int32("moe_listed", work, N * m.k);
  x.listed_offsets = list.int32("moe_listed_offsets", work, m.E + 1);
  x.kept = list.int32("moe_kept", work, N * m.k);
  if (m.tp > 1) {
    x.group_offsets = list.int32("moe_group_offsets", work, m.E + 1);
    x.grad_share =
        list.f32("moe_grad_share", work, static_cast<size_t>(std::max(m.E, m.width(m.Fs))) * m.C);
  }
  if (s.half()) {
    x.x32 = list.f32("moe_x32", work, n * m.C);
    x.router32 = list.f32("moe_router32", work, static_cast<size_t>(m.E) * m.C);
  }
  x.dlogits = list.f32("moe_dlogits", work, n * m.E);
  x.dweight = list.f32("moe_dweight", work, slots);
  x.dx_router = list.f32("moe_dx_router", work, n * m.C);
  x.dexpert_out = list.stored("moe_dexpert_out", work, slots * m.C, p);
  x.dact = list.stored("moe_dact", work, arrived * m.Fe, p);
  x.dfc = list.stored("moe_dfc", work, arrived * m.width(m.Fe), p);
  x.ddispatched = list.stored("moe_ddispatched", work, slots * m.C, p);
  x.expert_mass = list.f32("moe_expert_mass", work, m.E);
  if (m.ep > 1) x.exchanged = list.stored("moe_exchanged", work, arrived * m.C, p);
  if (m.Fs > 0) {
    x.shared_out = list.stored("moe_shared_out", work, n * m.C, p);
    x.dshared_act = list.stored("moe_dshared_act", work, n * m.Fs, p);
    x.dshared_fc = list.stored("moe_dshared_fc", work, n * m.width(m.Fs), p);
  }
  return x;
}

void workspace(const StageShape& s, BufferList& list, StageStorage& st) {
  const BlockExtents e = s.extents(s.max_batch, s.max_seq);
  const size_t N = static_cast<size_t>(s.max_batch) * s.max_seq, C = s.model.n_embd;
  const Precision p = s.buffers.precision;
  constexpr MemCategory work = MemCategory::kWorkspace;
  const auto f32 = [&](const char* label, size_t n) { return list.f32(label, work, n); };
  const auto stored = [&](const char* label, size_t n) { return list.stored(label, work, n, p); };
  // One block's recomputed tensors, shared by every recomputed block.
  if (s.blocks() > 0 && s.buffers.recompute.full_block(0))
    st.shared = block_internals(s, e, MemCategory::kActivations, list, s.any_dense_block(),
                                s.any_moe_block());
  if (s.any_moe_block()) {
    st.moe = moe_scratch(s, list);
    st.expert_bias = list.f32("moe_expert_bias", MemCategory::kWorkspace,
                              static_cast<size_t>(s.blocks()) * s.model.moe.n_experts);
    // Per block (dense blocks' rows stay zero): kernels::moe_accumulate_stats's layout.
    st.moe_stats = list.f32(
        "moe_stats", MemCategory::kWorkspace,
        static_cast<size_t>(s.blocks()) * (kernels::kMoeStatsHead + s.model.moe.n_experts));
  }
  LayerWorkspace& ws = st.layers;
  ws.partial = stored("scratch_c", N * C);
  if (s.sequence_parallel()) {
    ws.gathered = stored("gathered", N * C);
    ws.scattered = stored("scattered", e.rows_c);
    ws.norm_grad = f32("ln_grad", (s.model.llama() ? 1 : 2) * C);
  }
  ws.row_max = f32("row_max", N);
  ws.row_sums = f32("row_sum", 2 * N);
  st.dresidual = stored("dresidual", e.rows_c);
  ws.dinput = stored("dln", N * C);
  // A block's backward is done with the MLP's gradients (dfch, and Llama's dact) before it writes
  // the attention's (datty, dqkv): both pairs share one buffer.
  const size_t mlp = e.fc + (s.model.llama() ? e.act : 0), attention = e.atty + e.qkv;
  st.block_grads = stored("block_grads", std::max(mlp, attention));
  if (!st.block_grads.empty()) {  // else described only
    st.dfch = st.block_grads.window(0, e.fc);
    st.dact = s.model.llama() ? st.block_grads.window(e.fc, e.act) : st.dfch;
    st.datty = st.block_grads.window(0, e.atty);
    st.dqkv = st.block_grads.window(e.atty, e.qkv);
  }
  if (s.model.llama())  // every position of the sequences this rank holds a part of
    ws.rope =
        f32("rope_table", static_cast<size_t>(s.max_seq) * s.layout.cp_size * s.model.head_size());
  if (s.layout.cp_size > 1) {
    const ContextAttentionElements cp =
        context_attention_elements(s.split(s.max_seq), s.buffers.cp_comm, s.max_batch, s.heads_tp(),
                                   s.kv_heads_tp(), s.model.head_size());
    ws.cp_kv = stored("cp_key_values", cp.kv);
    ws.cp_sums = f32("cp_grad_sums", cp.sums);
  }
  if (s.kv_replicas() > 1)
    ws.kv_sum = stored("kv_sum", N * 2 * s.model.kv_heads() * s.model.head_size());
  ws.attention = f32("attention_tiles", kernels::attention_scratch_elements(
                                            s.max_batch, s.heads_tp(), s.model.head_size(),
                                            s.max_seq, p, s.buffers.attention_tiles));
  // GPU builds: the row blocks' partial sums of the bias and norm gradients (kernels/shapes.hpp),
  // for the widest of them: a LayerNorm's two sums over C (RMSNorm's one), GPT-2's qkv or fc bias.
  if (kernels::kBuildShape == kernels::Shape::kGpu)
    ws.column_partials = f32("column_partials", column_partial_floats(s));
}

// The next backward writes these gradients with its GEMMs (beta 0) instead of adding to zeros.
bool overwritten_by_backward(const StageShape& s, const LocalParam& p) {
  const std::string& name = p.spec->name;
  // The tied head's GEMM precedes any scatter-add into wte.
  if (name == "wte") return s.layout.has_head && s.model.tied();
  if (name == "lm_head") return true;
  if (p.spec->layer < 0 || p.spec->layer >= s.model.n_layer) return false;
  for (const char* suffix : {".attn.qkv.weight", ".attn.q.weight", ".attn.kv.weight",
                             ".attn.proj.weight", ".mlp.fc.weight", ".mlp.proj.weight"})
    if (name.size() > std::strlen(suffix) &&
        name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
      return true;
  return false;
}

}  // namespace

std::vector<Segment> grads_to_clear(const StageShape& s, const LocalParamTable& local) {
  std::vector<Segment> ranges;
  for (const LocalParam& p : local.params()) {
    if (overwritten_by_backward(s, p)) continue;
    if (ranges.empty() || ranges.back().end != p.offset) ranges.push_back({p.offset, p.offset});
    ranges.back().end = p.offset + p.numel;
  }
  return ranges;
}

void init_stage_params(const StageShape& s, const LocalParamTable& local, const StageStorage& st,
                       uint64_t seed) {
  const auto value = [&](const LocalParam& p, int64_t i) {
    const int64_t g = local.global_index(p, i);
    return g < 0 ? 0.0f : initial_value(seed, *p.spec, g);
  };
  const auto fill = [&](const auto& view, auto&& convert) {
    if (view.extent(0) == 0) return;  // sharded parameters are initialised by their owner
    auto host = Kokkos::create_mirror_view(view);
    for (const LocalParam& p : local.params())
      for (int64_t i = 0; i < p.numel; ++i) host(p.offset + i) = convert(value(p, i));
    Kokkos::deep_copy(view, host);
  };
  if (s.half())
    fill(st.params.f16, [&](float v) { return to_compute_half(v, s.buffers.precision); });
  else
    fill(st.params.f32, [](float v) { return v; });
}

BufferList describe_kept_block(const StageShape& shape, bool internals) {
  BufferList list;
  kept_block(shape, shape.extents(shape.max_batch, shape.max_seq), true, internals,
             shape.any_moe_block(), list);
  return list;
}

StageStorage lay_out_stage(const StageShape& s, const LocalParamTable& local, BufferList& list) {
  if (s.blocks() < 1 && !s.layout.has_head)
    throw std::logic_error("a pipeline stage without the head needs a block to make its output");
  StageStorage st;
  parameters_and_gradients(s, local, list, st);
  for (int k = 0; k < s.slots; ++k) st.slots.push_back(activation_slot(s, list));
  for (int k = 0; k < s.buffers.deferred_sets; ++k) st.deferred.push_back(deferred_grads(s, list));
  workspace(s, list, st);
  return st;
}

StageStorage build_stage(const StageShape& s, const LocalParamTable& local, Communicator* comm,
                         BufferList& list, std::unique_ptr<TensorParallel>& tp) {
  tp = std::make_unique<TensorParallel>(comm, s.layout.tp_size, s.layout.tp_rank,
                                        s.buffers.sequence_parallel, s.model.n_embd);
  return lay_out_stage(s, local, list);
}

BufferList describe_stage(const StageShape& shape, const LocalParamTable& local) {
  BufferList list;
  std::unique_ptr<TensorParallel> tp;
  build_stage(shape, local, nullptr, list, tp);
  return list;
}

const StageShape& checked_shape(const StageShape& s) {
  if (s.sequence_parallel() && s.max_seq % s.layout.tp_size != 0)
    throw InputError(
        "sequence parallelism splits the tokens over tp = " + std::to_string(s.layout.tp_size) +
        ": the sequence length " + std::to_string(s.max_seq) + " must be divisible by it");
  return s;
}

void stage_tokens(const Exec& exec, ActivationSlot& a, const IntView1::HostMirror& tokens_host,
                  const IntView1::HostMirror& targets_host, const int32_t* tokens,
                  const int32_t* targets, int N) {
  for (int n = 0; n < N; ++n) {
    tokens_host(n) = tokens ? tokens[n] : 0;
    targets_host(n) = targets ? targets[n] : -1;
  }
  const auto first = std::make_pair(0, N);
  Kokkos::deep_copy(exec, Kokkos::subview(a.tokens, first), Kokkos::subview(tokens_host, first));
  Kokkos::deep_copy(exec, Kokkos::subview(a.targets, first), Kokkos::subview(targets_host, first));
}

}  // namespace trident
