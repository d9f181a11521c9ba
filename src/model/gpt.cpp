// The GPT stage: its buffers, its layers bound to their parameters, and forward / backward over
// the embedding, the blocks (model/transformer_block.cpp) and the head (model/output_head.cpp).
#include "model/gpt.hpp"

#include <algorithm>
#include <stdexcept>

#include "core/error.hpp"
#include "kernels/cast.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/moe_routing.hpp"
#include "kernels/rope.hpp"

namespace trident {

GptStage::GptStage(const ModelConfig& m, const StageLayout& layout, Communicator* tp,
                   MemoryLedger& ledger, int max_batch, int max_seq, int slots,
                   const StageBuffers& buffers, const ExpertComms& ep, Communicator* cp)
    : shape_(checked_shape({m, layout, max_batch, max_seq, slots, buffers})),
      table_(m),
      local_(table_, m, layout, buffers.unit_alignment, buffers.expert_unit_alignment),
      ep_(ep.rows, ep.counts, layout.ep_size, layout.ep_rank),
      context_attention_(cp, layout.cp_size, layout.cp_rank, buffers.cp_comm, buffers.cp_split),
      st_([&] {
        BufferList list(ledger);
        return build_stage(shape_, local_, tp, list, tp_);
      }()),
      layer_context_{exec_,     buffers.precision,
                     tp_.get(), &st_.layers,
                     &ep_,      layout.cp_size > 1 ? &context_attention_ : nullptr},
      hooks_(shape_, local_),
      context_{&shape_, &st_, &layer_context_, &hooks_, nullptr, {}},
      embedding_(&layer_context_, m.n_embd, layout.tp_rank * shape_.V_tp()),
      head_(&context_) {
  if (shape_.any_moe_block() && layout.tp_size > 1 && !shape_.sequence_parallel())
    throw InputError(
        "Mixture-of-Experts layers with tp > 1 need parallel.sequence_parallel = true: each "
        "tensor-parallel rank routes its own rows (Megatron-Core's rule)");
  for (int i = 0; i < shape_.blocks(); ++i) {
    blocks_.emplace_back(&context_, i);
    const size_t E = static_cast<size_t>(m.moe.n_experts);
    if (blocks_.back().moe) {
      if (st_.expert_bias.extent(0) < (i + 1) * E)
        throw std::logic_error("GptStage: the MoE selection bias is not laid out");
      blocks_.back().moe->selection_bias = window(st_.expert_bias, i * E, E);
    }
  }
  if (buffers.full_params) bind(stage_tensors(local_, layout, st_.params), false);
  if (buffers.full_grads) {
    cleared_grads_ = grads_to_clear(shape_, local_);
    bind(stage_tensors(local_, layout, stored_f32(st_.grads.data(), st_.grads.extent(0))), true);
  }
  // create_mirror, not create_mirror_view: on host spaces the latter would alias slot 0's
  // tokens, and staging a later micro-batch would overwrite them before slot 0's backward.
  if (m.llama()) {
    auto table = Kokkos::create_mirror_view(st_.layers.rope);
    kernels::fill_rope_table(table.data(), max_seq * layout.cp_size, m.head_size(), m.rope_theta);
    Kokkos::deep_copy(st_.layers.rope, table);
  }
  tokens_host_ = Kokkos::create_mirror(st_.slots[0].tokens);
  targets_host_ = Kokkos::create_mirror(st_.slots[0].targets);
}

// Points every layer's parameter (or, with `grads`, gradient) views at t's tensors.
void GptStage::bind(const StageTensors& t, bool grads) {
  const auto side = [grads](auto& layer) -> auto& {
    return grads ? layer.grads : layer.weights;
  };
  side(embedding_) = {t.wte, t.wpe};
  side(head_.proj).weight = t.head;  // wte when tied
  side(head_.lnf) = t.lnf;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    TransformerBlock& b = blocks_[i];
    const BlockTensors& l = t.blocks[i];
    side(b.ln1) = l.ln1, side(b.qkv) = l.qkv, side(b.proj) = l.proj;
    side(b.ln2) = l.ln2, side(b.fc) = l.fc, side(b.fcproj) = l.fcproj;
    if (b.moe) side(*b.moe) = l.moe;
  }
}

void GptStage::redirect_grads(const TensorLocator& where) {
  bind(stage_tensors(local_, shape_.layout, where), true);
}

void GptStage::stream_weight_grads(GradSink* sink) {
  std::vector<std::string> bound;
  const auto stream = [&](const std::vector<std::string>& names) {
    bound.insert(bound.end(), names.begin(), names.end());
    return GradStream{sink, local_.at(names[0]).offset};  // q and kv: one matrix from q's first
  };
  if (shape_.layout.has_embedding) embedding_.wte_grad_stream = stream({"wte"});
  if (shape_.layout.has_head)
    head_.proj.weight_grad_stream = stream({local_.holds("lm_head") ? "lm_head" : "wte"});
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const int l = shape_.layout.first_layer + static_cast<int>(i);
    TransformerBlock& b = blocks_[i];
    const std::string qkv = block_param(l, BlockPart::kQkv);
    b.qkv.weight_grad_stream =
        stream(local_.holds(qkv) ? std::vector<std::string>{qkv}
                                 : std::vector<std::string>{block_param(l, BlockPart::kQ),
                                                            block_param(l, BlockPart::kKv)});
    b.proj.weight_grad_stream = stream({block_param(l, BlockPart::kAttnProj)});
    if (b.moe) continue;  // an MoE layer keeps its gradients whole (streams_grad)
    b.fc.weight_grad_stream = stream({block_param(l, BlockPart::kFc)});
    b.fcproj.weight_grad_stream = stream({block_param(l, BlockPart::kProj)});
  }
  // A streamed parameter no layer sends would keep no gradient at all.
  for (const LocalParam& p : local_.params())
    if (streams_grad(*p.spec) && std::find(bound.begin(), bound.end(), p.spec->name) == bound.end())
      throw std::logic_error("GptStage::stream_weight_grads: no layer streams " + p.spec->name);
}

void GptStage::redirect_params(const TensorLocator& where) {
  bind(stage_tensors(local_, shape_.layout, where), false);
}

void GptStage::set_timer(PhaseTimer* timer) {
  context_.timer = timer;
  tp_->set_timer(timer);
  ep_.set_timer(timer);
  context_attention_.set_timer(timer);
}

void GptStage::init_params(uint64_t seed) {
  init_stage_params(shape_, local_, st_, seed);
}

// The next backward's GEMMs overwrite the weight matrices' gradients (beta 0): not clearing them
// halves the gradient traffic of a step that is memory-bound outside its GEMMs.
void GptStage::zero_grads() {
  grads_fresh_ = true;
  for (const Segment& r : cleared_grads_)
    Kokkos::deep_copy(exec_, window(st_.grads, r.begin, r.size()), 0.0f);
}

double GptStage::forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                         const StoredTensor& output, float gradient_scale) {
  forward_pass(slot, tokens, targets, B, T, output, gradient_scale);
  if (targets == nullptr) return 0.0;
  const std::array<double, 2> moe = moe_losses(slot);
  double host = static_cast<double>(B) * T * (moe_aux_coeff_ * moe[0] + moe_z_coeff_ * moe[1]);
  if (!shape_.layout.has_head) return host;
  const Kokkos::View<double, Device> sum("loss_sum");
  loss_sum(slot, sum);
  double ce = 0.0;
  Kokkos::deep_copy(ce, sum);
  return host + ce;
}

void GptStage::set_moe_loss_coefficients(double aux, double z) {
  moe_aux_coeff_ = aux;
  moe_z_coeff_ = z;
}

std::vector<int32_t> GptStage::moe_routing(int slot) const {
  const ActivationSlot& a = st_.slots[slot];
  const size_t n = static_cast<size_t>(a.B) * a.T * shape_.model.moe.top_k;
  std::vector<int32_t> routing;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (!blocks_[i].moe) continue;
    const BlockActivations b = blocks_[i].working(a);
    for (const IntView1& v : {b.moe.choice, b.moe.row}) {
      const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
      routing.insert(routing.end(), host.data(), host.data() + n);
    }
  }
  return routing;
}

void GptStage::set_expert_bias(const std::vector<float>& table) {
  if (st_.expert_bias.extent(0) == 0) return;
  const std::vector<int> layers = shape_.model.moe_layer_indices();
  const size_t E = static_cast<size_t>(shape_.model.moe.n_experts);
  if (table.size() != layers.size() * E)
    throw std::logic_error("set_expert_bias: the table is not [moe layers x experts]");
  const auto host = Kokkos::create_mirror_view(st_.expert_bias);
  for (int i = 0; i < shape_.blocks(); ++i) {
    if (!shape_.moe_block(i)) continue;
    const size_t row = static_cast<size_t>(
        std::find(layers.begin(), layers.end(), shape_.layout.first_layer + i) - layers.begin());
    for (size_t e = 0; e < E; ++e) host(i * E + e) = table[row * E + e];
  }
  Kokkos::deep_copy(st_.expert_bias, host);
}

std::vector<MoeBlockStats> GptStage::take_moe_stats() {
  std::vector<MoeBlockStats> out;
  if (st_.moe_stats.extent(0) == 0) return out;
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), st_.moe_stats);
  const int E = shape_.model.moe.n_experts, width = kernels::kMoeStatsHead + E;
  for (int i = 0; i < shape_.blocks(); ++i) {
    if (!shape_.moe_block(i)) continue;
    const float* v = host.data() + static_cast<size_t>(i) * width;
    MoeBlockStats b{shape_.layout.first_layer + i, v[0], v[1], v[2], v[3], v[4], {}};
    b.tokens.assign(v + kernels::kMoeStatsHead, v + width);
    out.push_back(std::move(b));
  }
  Kokkos::deep_copy(exec_, st_.moe_stats, 0.0f);
  return out;
}

std::array<double, 2> GptStage::moe_losses(int slot) const {
  const View1& kept = st_.slots[slot].moe_losses;
  std::array<double, 2> sums{0.0, 0.0};
  if (kept.extent(0) == 0) return sums;
  const std::vector<float> values =
      host_values(stored_f32(kept.data(), kept.extent(0)), 0, kept.extent(0));
  for (int i = 0; i < shape_.blocks(); ++i)
    if (shape_.moe_block(i)) sums[0] += values[2 * i], sums[1] += values[2 * i + 1];
  return sums;
}

void GptStage::loss_sum(int slot, const Kokkos::View<double, Device>& sum) const {
  const ActivationSlot& a = st_.slots[slot];
  const int N = a.B * a.T;
  kernels::cross_entropy_loss_sum(exec_, window(a.losses, 0, N), N, sum);
}

void GptStage::forward_pass(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                            const StoredTensor& output, float gradient_scale) {
  ActivationSlot& a = st_.slots[slot];
  a.B = B;
  a.T = T;
  if (shape_.sequence_parallel() && T % shape_.layout.tp_size != 0)
    throw InputError("sequence parallelism: sequence length " + std::to_string(T) +
                     " is not divisible by tp = " + std::to_string(shape_.layout.tp_size));
  const int N = B * T, n_blocks = shape_.blocks();
  const size_t rows_c = static_cast<size_t>(local_rows(N)) * shape_.model.n_embd;
  const bool sends = !shape_.layout.has_head;
  if (sends && (output.size() < rows_c || output.format != precision()))
    throw std::logic_error("GptStage::forward: a stage without the head needs an output tensor");
  if (tokens || targets) stage_tokens(exec_, a, tokens_host_, targets_host_, tokens, targets, N);
  if (shape_.layout.has_embedding) {
    if (local_.holds("wpe")) hooks_.need("wte", "");
    hooks_.need(local_.holds("wpe") ? "wpe" : "wte", hooks_.unit_param(0, 0));
    embedding_.forward(a.input, a.tokens, B, T);
  }  // else the caller received the input there
  const StoredTensor* x = &a.input;
  for (int i = 0; i < n_blocks; ++i) {
    const StoredTensor& sent = sends && i + 1 == n_blocks ? output : StoredTensor();
    const BlockActivations b = blocks_[i].working(a, sent);
    const std::string next = i + 1 < n_blocks ? hooks_.unit_param(i + 1, 0) : "";
    blocks_[i].forward(b, *x, B, T, true, next.empty() && !sends ? "ln_f.weight" : next);
    if (blocks_[i].moe) {
      const Vec losses = window(a.moe_losses, 2 * i, 2);
      blocks_[i].moe_losses(losses, b, N);
      const int E = shape_.model.moe.n_experts, width = kernels::kMoeStatsHead + E;
      kernels::moe_accumulate_stats(
          exec_, window(st_.moe_stats, static_cast<size_t>(i) * width, width), losses,
          ConstIntVec(b.moe.row.data(), N * shape_.model.moe.top_k),
          ConstIntVec(b.moe.counts.data(), E));
    }
    x = sends && i + 1 == n_blocks ? &output : &a.blocks[i].res_mlp;
  }
  if (!sends) head_.forward(a, *x, targets != nullptr, gradient_scale);  // else it is sent
}

void GptStage::backward(int slot, float loss_scale, const StoredTensor& grad_output) {
  backward_pass(st_.slots[slot], loss_scale, grad_output, nullptr);
}

void GptStage::backward_input(int slot, float loss_scale, const StoredTensor& grad_output,
                              int set) {
  backward_pass(st_.slots[slot], loss_scale, grad_output, &st_.deferred.at(set));
}

// Under 16-bit storage activation gradients are 16-bit tensors, so an fp16 overflow shows as
// infinity, as on a device.
void GptStage::backward_pass(const ActivationSlot& a, float loss_scale,
                             const StoredTensor& grad_output, const DeferredGrads* defer) {
  const bool accumulate = !grads_fresh_;  // weight matrices: the step's first write overwrites
  const size_t rows_c = static_cast<size_t>(local_rows(a.B * a.T)) * shape_.model.n_embd;
  // The balancing losses weigh as a mean over the micro-batch's tokens, like its loss.
  const double per_token = static_cast<double>(loss_scale) * a.B * a.T;
  context_.moe_scales = {static_cast<float>(moe_aux_coeff_ * per_token),
                         static_cast<float>(moe_z_coeff_ * per_token)};
  if (shape_.layout.has_head) {
    head_.backward(a, loss_scale, defer, accumulate);
  } else {
    if (grad_output.size() < rows_c)
      throw std::logic_error("GptStage::backward: a stage without the head needs grad_output");
    kernels::copy_stored(exec_, st_.dresidual, grad_output, rows_c);
  }
  for (int i = shape_.blocks() - 1; i >= 0; --i)
    blocks_[i].backward(a, defer ? &defer->blocks[i] : nullptr, accumulate);
  if (!defer) return finish_weight_grads(a, st_.dresidual);
  if (shape_.layout.has_embedding) context_.keep(defer->input, st_.dresidual, rows_c);
}

void GptStage::backward_weight(int slot, int set) {
  const ActivationSlot& a = st_.slots[slot];
  const DeferredGrads& d = st_.deferred.at(set);
  const bool accumulate = !grads_fresh_;
  if (shape_.layout.has_head) head_.backward_weight(a, d, accumulate);
  for (int i = shape_.blocks() - 1; i >= 0; --i)
    blocks_[i].backward_weight(a, d.blocks[i], accumulate);
  finish_weight_grads(a, d.input);
}

void GptStage::finish_weight_grads(const ActivationSlot& a, const StoredTensor& dinput) {
  if (shape_.layout.has_embedding) embedding_.backward_weight(dinput, a.tokens, a.B, a.T);
  grads_fresh_ = false;
  hooks_.grads_ready_from("");
  if (local_.holds("wpe")) hooks_.unit_done("wpe");
  if (local_.holds("wte")) hooks_.unit_done("wte");
}

}  // namespace trident
