// The GPT stage: its buffers, its layers bound to their parameters, the ZeRO and 16-bit hooks
// around them, and forward / backward over the embedding, the blocks and the head.
#include "model/gpt.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/error.hpp"
#include "kernels/cast.hpp"

namespace trident {

namespace {

// The stage's tensor-parallel group and its buffers, described to (and, given a ledger,
// allocated through) `list`: the constructor and describe_stage share this.
StageStorage build(const StageShape& s, const LocalParamTable& local, Communicator* comm,
                   BufferList& list, std::unique_ptr<TensorParallel>& tp) {
  const size_t rows = static_cast<size_t>(s.max_batch) * s.max_seq;
  tp = std::make_unique<TensorParallel>(comm, s.layout.tp_size, s.layout.tp_rank,
                                        s.buffers.sequence_parallel, s.buffers.precision, rows,
                                        s.model.n_embd, list);
  return lay_out_stage(s, local, list);
}

}  // namespace

BufferList describe_stage(const StageShape& shape, const LocalParamTable& local) {
  BufferList list;
  std::unique_ptr<TensorParallel> tp;
  build(shape, local, nullptr, list, tp);
  return list;
}

GptStage::GptStage(const ModelConfig& m, const StageLayout& layout, Communicator* tp,
                   MemoryLedger& ledger, int max_batch, int max_seq, int slots,
                   const StageBuffers& buffers)
    : shape_{m, layout, max_batch, max_seq, slots, buffers},
      table_(m),
      local_(table_, m, layout, buffers.unit_alignment),
      embedding_(&ctx_, m.n_embd, layout.tp_rank * shape_.V_tp()),
      lnf_(&ctx_, m.n_embd),
      head_(&ctx_, m.n_embd, shape_.V_tp()),
      loss_(&ctx_, shape_.V_tp(), layout.tp_rank * shape_.V_tp(),
            std::clamp(m.vocab_size - layout.tp_rank * shape_.V_tp(), 0, shape_.V_tp())) {
  if (shape_.sequence_parallel() && max_seq % layout.tp_size != 0)
    throw InputError(
        "sequence parallelism splits the tokens over tp = " + std::to_string(layout.tp_size) +
        ": the sequence length " + std::to_string(max_seq) + " must be divisible by it");
  BufferList list(ledger);
  st_ = build(shape_, local_, tp, list, tp_);
  ctx_ = {exec_, buffers.precision, tp_.get(), &st_.layers};
  for (int i = 0; i < shape_.blocks(); ++i)
    blocks_.push_back(
        {LayerNorm(&ctx_, m.n_embd), ColumnParallelLinear(&ctx_, m.n_embd, 3 * shape_.C_tp()),
         Attention(&ctx_, shape_.heads_tp(), m.head_size()),
         RowParallelLinear(&ctx_, shape_.C_tp(), m.n_embd), Residual(&ctx_),
         LayerNorm(&ctx_, m.n_embd), ColumnParallelLinear(&ctx_, m.n_embd, shape_.F_tp()),
         Gelu(&ctx_), RowParallelLinear(&ctx_, shape_.F_tp(), m.n_embd)});
  if (st_.expanded) {
    expanded_unit_.assign(st_.expanded->all().size(), -1);
    redirect_params([this](const LocalParam& p) { return st_.expanded->locate(p); });
  } else if (buffers.full_params) {
    bind(stage_tensors(local_, layout, st_.params), false);
  }
  if (buffers.full_grads) {
    // What zero_grads clears: every parameter's gradient but those backward overwrites, merged
    // into contiguous ranges.
    for (const LocalParam& p : local_.params()) {
      if (overwritten_by_backward(p)) continue;
      if (cleared_grads_.empty() || cleared_grads_.back().end != p.offset)
        cleared_grads_.push_back({p.offset, p.offset});
      cleared_grads_.back().end = p.offset + p.numel;
    }
    bind(stage_tensors(local_, layout, st_.grads), true);
  }
  // create_mirror, not create_mirror_view: on host spaces the latter would alias slot 0's
  // tokens, and staging a later micro-batch would overwrite them before slot 0's backward.
  tokens_host_ = Kokkos::create_mirror(st_.slots[0].tokens);
  targets_host_ = Kokkos::create_mirror(st_.slots[0].targets);
}

// Points every layer's parameter (or, with `grads`, gradient) views at t's tensors.
void GptStage::bind(const StageTensors& t, bool grads) {
  const auto side = [grads](auto& layer) -> auto& {
    return grads ? layer.grads : layer.weights;
  };
  side(embedding_) = {t.wte, t.wpe};
  side(head_).weight = t.wte;  // tied
  side(lnf_) = t.lnf;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    TransformerBlock& b = blocks_[i];
    const BlockTensors& l = t.blocks[i];
    side(b.ln1) = l.ln1, side(b.qkv) = l.qkv, side(b.proj) = l.proj;
    side(b.ln2) = l.ln2, side(b.fc) = l.fc, side(b.fcproj) = l.fcproj;
  }
}

void GptStage::redirect_grads(const TensorLocator& where) {
  bind(stage_tensors(local_, shape_.layout, where), true);
}

void GptStage::redirect_params(const TensorLocator& where) {
  bind(stage_tensors(local_, shape_.layout, where), false);
}

void GptStage::set_timer(PhaseTimer* timer) {
  timer_ = timer;
  tp_->set_timer(timer);
}

void GptStage::init_params(uint64_t seed) {
  const bool half = shape_.half();
  if ((half ? st_.params16.extent(0) : st_.params.extent(0)) == 0)
    return;  // sharded parameters are initialised by their owner
  const auto value = [&](const LocalParam& p, int64_t i) {
    const int64_t g = local_.global_index(p, i);
    return g < 0 ? 0.0f : initial_value(seed, *p.spec, g);
  };
  if (half) {
    auto host = Kokkos::create_mirror_view(st_.params16);
    for (const LocalParam& p : local_.params())
      for (int64_t i = 0; i < p.numel; ++i) host(p.offset + i) = to_half(value(p, i), precision());
    Kokkos::deep_copy(st_.params16, host);
    invalidate_expanded();
    return;
  }
  auto host = Kokkos::create_mirror_view(st_.params);
  for (const LocalParam& p : local_.params())
    for (int64_t i = 0; i < p.numel; ++i) host(p.offset + i) = value(p, i);
  Kokkos::deep_copy(st_.params, host);
}

void GptStage::invalidate_expanded() {
  std::fill(expanded_unit_.begin(), expanded_unit_.end(), -1);
}

// The next backward writes the weight matrices' gradients with its GEMMs (beta 0, see
// grads_fresh_) instead of adding to zeros: clearing those is half the gradient traffic of a step
// that is memory-bound outside its GEMMs. Everything else (biases, LayerNorms, the embeddings'
// scatter-adds) is cleared here, in contiguous ranges.
void GptStage::zero_grads() {
  grads_fresh_ = true;
  for (const Segment& r : cleared_grads_)
    Kokkos::deep_copy(exec_, window(st_.grads, r.begin, r.size()), 0.0f);
}

bool GptStage::overwritten_by_backward(const LocalParam& p) const {
  const std::string& name = p.spec->name;
  if (name == "wte") return shape_.layout.has_head;  // the head's GEMM precedes any scatter-add
  if (p.spec->layer < 0 || p.spec->layer >= shape_.model.n_layer) return false;
  for (const char* suffix :
       {".attn.qkv.weight", ".attn.proj.weight", ".mlp.fc.weight", ".mlp.proj.weight"})
    if (name.size() > std::strlen(suffix) &&
        name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
      return true;
  return false;
}

// No fences before a hook: communicators order themselves against the kernels launched before
// them, and kernels after them run on the same stream.
void GptStage::unit_done(const std::string& first_param) {
  if (unit_done_) unit_done_(unit_index(first_param));
}

void GptStage::grads_ready_from(int64_t offset) {
  if (grad_ready_) grad_ready_(offset);
}

void GptStage::need(const std::string& name, const std::string& next) {
  if (st_.expanded) {  // expand the unit's 16-bit parameters into its fp32 working buffer
    const int u = unit_index(name);
    const int buffer = st_.expanded->index_of_unit(u);
    if (expanded_unit_[buffer] != u) {
      const ParamUnit& unit = local_.units()[u];
      kernels::load_half(exec_, window(st_.expanded->of_unit(u), 0, unit.padded), st_.params16,
                         unit.offset, unit.padded, precision());
      expanded_unit_[buffer] = u;
    }
  }
  if (unit_needed_) unit_needed_(unit_index(name), next.empty() ? -1 : unit_index(next));
}

std::string GptStage::unit_param(int i, int part) const {
  if (i < 0 || i >= shape_.blocks()) return "";
  return block_unit_first_param(shape_.layout.first_layer + i, part);
}

std::string GptStage::first_backward_unit(int i) const {
  return unit_param(i, shape_.buffers.recompute.full_block(i) ? 0 : kUnitsPerBlock - 1);
}

ConstMat GptStage::logits(int slot) const {
  const ActivationSlot& a = st_.slots[slot];
  const View1& values = a.logits.format == Precision::kFp32 ? a.logits.f32 : st_.work_logits;
  return window(values, 0, static_cast<size_t>(a.B) * a.T, shape_.V_tp());
}

}  // namespace trident
