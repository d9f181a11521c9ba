// The GPT stage's passes as programs over its layers: a block's forward, backward and deferred
// weight-gradient pass, the head's, and the stage's forward and backward over them. ZeRO's unit
// gathers (need) and recomputation stay visible here, between the layers.
#include <stdexcept>

#include "core/error.hpp"
#include "kernels/cast.hpp"
#include "model/gpt.hpp"

namespace trident {

namespace {

// The fp32 view of a kept tensor: itself when kept in fp32, else the shared working buffer.
View1 working_view(const StoredTensor& kept, const View1& shared) {
  return kept.format == Precision::kFp32 && !kept.empty() ? kept.f32 : shared;
}

}  // namespace

void GptStage::block_forward(int i, const BlockActivations& b, const View1& x, int B, int T,
                             bool complete, const std::string& next) {
  const TransformerBlock& block = blocks_[i];
  const int N = B * T, rows = local_rows(N);
  const size_t rows_c = static_cast<size_t>(rows) * shape_.model.n_embd;
  need(unit_param(i, 0), unit_param(i, 1));
  block.ln1.forward(b.ln1, b.ln1_mean, b.ln1_rstd, x, rows);
  block.qkv.forward(b.qkv, b.ln1, N);
  block.attention.forward(b.atty, b.att, b.qkv, B, T);
  need(unit_param(i, 1), unit_param(i, 2));
  block.residual.forward(b.res_attn, x, block.proj.forward(b.atty, N), rows_c);
  need(unit_param(i, 2), complete ? unit_param(i, 3) : next);
  block.ln2.forward(b.ln2, b.ln2_mean, b.ln2_rstd, b.res_attn, rows);
  block.fc.forward(b.fch, b.ln2, N);
  block.gelu.forward(b.fch_gelu, b.fch, static_cast<size_t>(N) * shape_.F_tp());
  if (!complete) return;
  need(unit_param(i, 3), next);
  block.residual.forward(b.res_mlp, b.res_attn, block.fcproj.forward(b.fch_gelu, N), rows_c);
}

// Each unit's gradients are final (unit_done) before the next but one is written: ZeRO-2/3
// reduce them from two alternating buffers. st_.dresidual holds d/d(block output) on entry and
// d/d(block input) on return; with `kept`, the output gradients the weights need go there instead
// of into weight gradients.
void GptStage::block_backward(const ActivationSlot& a, int i, const DeferredGrads::Block* kept,
                              bool accumulate) {
  const TransformerBlock& block = blocks_[i];
  const int N = a.B * a.T, rows = local_rows(N);
  const BlockExtents e = shape_.extents(a.B, a.T);
  const View1& dres = st_.dresidual;
  const View1 x = block_input(a, i);
  const BlockActivations b = activations_for_backward(a, i, x, unit_param(i, 3));
  need(unit_param(i, 3), unit_param(i, 2));
  // MLP: dres holds d/d(block output) = d/d(res_attn) through the residual path.
  const View1 dout = block.fcproj.gather_output_grad(dres, N);
  block.fcproj.backward_input(st_.dfch, dout, N);
  if (kept) keep(kept->out, dres, e.rows_c);
  if (!kept) block.fcproj.backward_weight(dout, b.fch_gelu, N, accumulate);
  if (!kept) unit_done(unit_param(i, 3));
  need(unit_param(i, 2), unit_param(i, 1));
  block.gelu.backward(st_.dfch, b.fch, e.fc);
  const View1 dln2 = block.fc.backward_input(st_.dfch, N);
  if (kept) keep(kept->dfch, st_.dfch, e.fc);
  if (!kept) block.fc.backward_weight(st_.dfch, b.ln2, N, accumulate);
  block.ln2.backward_input(dres, dln2, b.res_attn, b.ln2_mean, b.ln2_rstd, rows);
  if (kept) keep(kept->dln2, dln2, e.rows_c);
  if (!kept) block.ln2.backward_weight(dln2, b.res_attn, b.ln2_mean, b.ln2_rstd, rows);
  if (!kept) unit_done(unit_param(i, 2));
  ctx_.round(dres, e.rows_c);
  // Attention: dres now holds d/d(res_attn) = d/d(block input) through the residual path.
  const View1 dmid = block.proj.gather_output_grad(dres, N);
  need(unit_param(i, 1), unit_param(i, 0));
  block.proj.backward_input(st_.datty, dmid, N);
  if (kept) keep(kept->mid, dres, e.rows_c);
  if (!kept) block.proj.backward_weight(dmid, b.atty, N, accumulate);
  if (!kept) unit_done(unit_param(i, 1));
  block.attention.backward(st_.dqkv, st_.datty, b.qkv, b.att, a.B, a.T);
  need(unit_param(i, 0), first_backward_unit(i - 1));
  const View1 dln1 = block.qkv.backward_input(st_.dqkv, N);
  if (kept) keep(kept->dqkv, st_.dqkv, e.qkv);
  if (!kept) block.qkv.backward_weight(st_.dqkv, b.ln1, N, accumulate);
  block.ln1.backward_input(dres, dln1, x, b.ln1_mean, b.ln1_rstd, rows);
  if (kept) keep(kept->dln1, dln1, e.rows_c);
  if (!kept) block.ln1.backward_weight(dln1, x, b.ln1_mean, b.ln1_rstd, rows);
  if (!kept) grads_ready_from(local_.at(block_param(i)).offset);
  if (!kept) unit_done(unit_param(i, 0));
  ctx_.round(dres, e.rows_c);
}

// The weight gradients block_backward left in `kept`, in its order, from the same operands (so
// the same bits; sequence parallelism gathers the same rows again). Only recomputation reads
// parameters here.
void GptStage::block_backward_weight(const ActivationSlot& a, int i,
                                     const DeferredGrads::Block& kept, bool accumulate) {
  const TransformerBlock& block = blocks_[i];
  const int N = a.B * a.T, rows = local_rows(N);
  const BlockExtents e = shape_.extents(a.B, a.T);
  const View1& dres = st_.dresidual;
  const View1& dln = st_.layers.dinput;
  const View1 x = block_input(a, i);
  // After a recomputation the next parameters read are the previous block's, if recomputed.
  const std::string next =
      i > 0 && shape_.buffers.recompute.full_block(i - 1) ? block_param(i - 1) : "";
  const BlockActivations b = activations_for_backward(a, i, x, next, false);
  block.fcproj.backward_weight(
      block.fcproj.gather_output_grad(kept_values(kept.out, dres, e.rows_c), N), b.fch_gelu, N,
      accumulate);
  unit_done(unit_param(i, 3));
  block.fc.backward_weight(kept_values(kept.dfch, st_.dfch, e.fc), b.ln2, N, accumulate);
  block.ln2.backward_weight(kept_values(kept.dln2, dln, e.rows_c), b.res_attn, b.ln2_mean,
                            b.ln2_rstd, rows);
  unit_done(unit_param(i, 2));
  block.proj.backward_weight(
      block.proj.gather_output_grad(kept_values(kept.mid, dres, e.rows_c), N), b.atty, N,
      accumulate);
  unit_done(unit_param(i, 1));
  block.qkv.backward_weight(kept_values(kept.dqkv, st_.dqkv, e.qkv), b.ln1, N, accumulate);
  block.ln1.backward_weight(kept_values(kept.dln1, dln, e.rows_c), x, b.ln1_mean, b.ln1_rstd, rows);
  grads_ready_from(local_.at(block_param(i)).offset);
  unit_done(unit_param(i, 0));
}

double GptStage::head_forward(ActivationSlot& a, const View1& x, bool with_targets) {
  const int N = a.B * a.T, rows = local_rows(N);
  need("ln_f.weight", "");
  need("wte", "");
  const View1 lnf = working_view(a.lnf, st_.work_lnf);
  const View1 logits = working_view(a.logits, st_.work_logits);
  lnf_.forward(lnf, a.lnf_mean, a.lnf_rstd, x, rows);
  head_.forward(logits, lnf, N);
  keep(a.lnf, lnf, static_cast<size_t>(rows) * shape_.model.n_embd);
  keep(a.logits, logits, static_cast<size_t>(N) * shape_.V_tp());
  return with_targets ? loss_.forward(a.losses, a.lse, logits, a.targets, N) : 0.0;
}

// Leaves d/d(last block output) in st_.dresidual.
void GptStage::head_backward(const ActivationSlot& a, float loss_scale, const DeferredGrads* defer,
                             bool accumulate) {
  const int N = a.B * a.T, rows = local_rows(N);
  const size_t rows_c = static_cast<size_t>(rows) * shape_.model.n_embd;
  const size_t logits_n = static_cast<size_t>(N) * shape_.V_tp();
  need("ln_f.weight", "");
  need("wte", first_backward_unit(shape_.blocks() - 1));
  const View1 logits = kept_values(a.logits, st_.work_logits, logits_n);
  const View1 lnf = kept_values(a.lnf, st_.work_lnf, rows_c);
  loss_.backward(logits, a.lse, a.targets, N, loss_scale);  // the gradient replaces the logits
  const View1 dlnf = head_.backward_input(logits, N);
  if (!defer) head_.backward_weight(logits, lnf, N, accumulate);
  if (defer) keep(a.logits, logits, logits_n);  // the weight pass reads the logits' gradient there
  Kokkos::deep_copy(exec_, window(st_.dresidual, 0, rows_c), 0.0f);
  const View1 x_last = block_input(a, shape_.blocks());
  lnf_.backward_input(st_.dresidual, dlnf, x_last, a.lnf_mean, a.lnf_rstd, rows);
  if (defer) {
    keep(defer->dlnf, dlnf, rows_c);
  } else {
    lnf_.backward_weight(dlnf, x_last, a.lnf_mean, a.lnf_rstd, rows);
    grads_ready_from(local_.at("ln_f.weight").offset);
    unit_done("ln_f.weight");
  }
  ctx_.round(st_.dresidual, rows_c);
}

void GptStage::head_backward_weight(const ActivationSlot& a, const DeferredGrads& d,
                                    bool accumulate) {
  const int N = a.B * a.T, rows = local_rows(N);
  const size_t rows_c = static_cast<size_t>(rows) * shape_.model.n_embd;
  const View1 dlogits =
      kept_values(a.logits, st_.work_logits, static_cast<size_t>(N) * shape_.V_tp());
  head_.backward_weight(dlogits, kept_values(a.lnf, st_.work_lnf, rows_c), N, accumulate);
  const View1 x_last = block_input(a, shape_.blocks());
  lnf_.backward_weight(kept_values(d.dlnf, st_.layers.dinput, rows_c), x_last, a.lnf_mean,
                       a.lnf_rstd, rows);
  grads_ready_from(local_.at("ln_f.weight").offset);
  unit_done("ln_f.weight");
}

double GptStage::forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                         const StoredTensor& output) {
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
  if (tokens || targets) copy_tokens(a, tokens, targets, N);
  const View1 input = working_view(a.input, st_.work_x);
  if (shape_.layout.has_embedding) {
    need("wte", "");
    need("wpe", block_param(0));
    embedding_.forward(input, a.tokens, B, T);
    keep(a.input, input, rows_c);
  } else {
    kernels::restore(exec_, input, a.input, rows_c);
  }
  View1 x = input;
  for (int i = 0; i < n_blocks; ++i) {
    const StoredTensor& sent = sends && i + 1 == n_blocks ? output : StoredTensor();
    const BlockActivations b = working(a, i, sent);
    const std::string next = i + 1 < n_blocks ? block_param(i + 1) : (sends ? "" : "ln_f.weight");
    block_forward(i, b, x, B, T, true, next);
    keep_block(a, i, b, sent);
    x = b.res_mlp;
    if (x.data() == st_.shared.res_mlp.data()) {  // the next block overwrites the shared output
      Kokkos::deep_copy(exec_, window(st_.work_x, 0, rows_c), window(x, 0, rows_c));
      x = st_.work_x;
    }
  }
  if (sends) return 0.0;  // the output is in `output`, to be sent
  return head_forward(a, x, targets != nullptr);
}

void GptStage::copy_tokens(ActivationSlot& a, const int32_t* tokens, const int32_t* targets,
                           int N) {
  for (int n = 0; n < N; ++n) {
    tokens_host_(n) = tokens ? tokens[n] : 0;
    targets_host_(n) = targets ? targets[n] : -1;
  }
  Kokkos::deep_copy(exec_, Kokkos::subview(a.tokens, std::make_pair(0, N)),
                    Kokkos::subview(tokens_host_, std::make_pair(0, N)));
  Kokkos::deep_copy(exec_, Kokkos::subview(a.targets, std::make_pair(0, N)),
                    Kokkos::subview(targets_host_, std::make_pair(0, N)));
}

void GptStage::backward(int slot, float loss_scale, const ConstVec& grad_output) {
  backward_pass(st_.slots[slot], loss_scale, grad_output, nullptr);
}

void GptStage::backward_input(int slot, float loss_scale, const ConstVec& grad_output, int set) {
  backward_pass(st_.slots[slot], loss_scale, grad_output, &st_.deferred.at(set));
}

// Every layer's input gradient, and its weight gradients either at once (defer null) or later
// from the output gradients kept in `defer` (backward_weight). Under 16-bit storage activation
// gradients are rounded like activations, so an fp16 overflow shows as infinity, as on a device.
void GptStage::backward_pass(const ActivationSlot& a, float loss_scale, const ConstVec& grad_output,
                             const DeferredGrads* defer) {
  const bool accumulate = !grads_fresh_;  // weight matrices: the step's first write overwrites
  const int N = a.B * a.T;
  const size_t rows_c = static_cast<size_t>(local_rows(N)) * shape_.model.n_embd;
  if (shape_.layout.has_head) {
    head_backward(a, loss_scale, defer, accumulate);
  } else {  // rounding keeps a received gradient exact in the deferred copy
    Kokkos::deep_copy(exec_, window(st_.dresidual, 0, rows_c), grad_output);
    ctx_.round(st_.dresidual, rows_c);
  }
  for (int i = shape_.blocks() - 1; i >= 0; --i)
    block_backward(a, i, defer ? &defer->blocks[i] : nullptr, accumulate);
  if (defer) {
    if (shape_.layout.has_embedding) keep(defer->input, st_.dresidual, rows_c);
    return;
  }
  if (shape_.layout.has_embedding) embedding_.backward_weight(st_.dresidual, a.tokens, a.B, a.T);
  grads_fresh_ = false;
  grads_ready_from(0);
  if (shape_.layout.has_embedding) unit_done("wpe");
  if (local_.holds("wte")) unit_done("wte");
}

void GptStage::backward_weight(int slot, int set) {
  const ActivationSlot& a = st_.slots[slot];
  const DeferredGrads& d = st_.deferred.at(set);
  const bool accumulate = !grads_fresh_;
  const size_t rows_c = static_cast<size_t>(local_rows(a.B * a.T)) * shape_.model.n_embd;
  if (shape_.layout.has_head) head_backward_weight(a, d, accumulate);
  for (int i = shape_.blocks() - 1; i >= 0; --i)
    block_backward_weight(a, i, d.blocks[i], accumulate);
  if (shape_.layout.has_embedding)
    embedding_.backward_weight(kept_values(d.input, st_.dresidual, rows_c), a.tokens, a.B, a.T);
  grads_fresh_ = false;
  grads_ready_from(0);
  if (shape_.layout.has_embedding) unit_done("wpe");
  if (local_.holds("wte")) unit_done("wte");
}

BlockActivations GptStage::working(const ActivationSlot& a, int i, const StoredTensor& sent) const {
  BlockKept k = a.blocks[i];
  if (!sent.empty()) k.res_mlp = sent;
  BlockActivations b = st_.shared;
  for_each_kept(k, b, BlockExtents{}, [](const StoredTensor& kept, View1& work, size_t) {
    work = working_view(kept, work);
  });
  if (k.ln1_mean.extent(0) > 0) {  // the statistics are kept in fp32 where they are written
    b.ln1_mean = k.ln1_mean, b.ln1_rstd = k.ln1_rstd;
    b.ln2_mean = k.ln2_mean, b.ln2_rstd = k.ln2_rstd;
  }
  return b;
}

void GptStage::keep_block(const ActivationSlot& a, int i, const BlockActivations& b,
                          const StoredTensor& sent) {
  BlockKept k = a.blocks[i];
  if (!sent.empty()) k.res_mlp = sent;
  const BlockExtents e = shape_.extents(a.B, a.T);
  for_each_kept(k, b, e, [&](const StoredTensor& kept, const View1& work, size_t n) {
    if (!kept.empty()) keep(kept, work, n);
  });
}

View1 GptStage::block_input(const ActivationSlot& a, int i) {
  const size_t rows_c = static_cast<size_t>(local_rows(a.B * a.T)) * shape_.model.n_embd;
  return kept_values(i == 0 ? a.input : a.blocks[i - 1].res_mlp, st_.work_x, rows_c);
}

BlockActivations GptStage::activations_for_backward(const ActivationSlot& a, int i, const View1& x,
                                                    const std::string& next, bool attention) {
  BlockActivations b = working(a, i);
  if (shape_.buffers.recompute.full_block(i)) {
    ScopedPhase phase(timer_, Phase::kRecompute);
    block_forward(i, b, x, a.B, a.T, false, next);
    return b;
  }
  const BlockKept& k = a.blocks[i];
  const BlockExtents e = shape_.extents(a.B, a.T);
  // Backward reads neither the block's output nor, without `attention`, the probabilities.
  for_each_kept(k, b, e, [&](const StoredTensor& kept, const View1& work, size_t n) {
    const bool read = &kept != &k.res_mlp && (attention || &kept != &k.att);
    if (read && !kept.empty()) kernels::restore(exec_, work, kept, n);
  });
  if (attention && shape_.buffers.recompute.selective()) {
    ScopedPhase phase(timer_, Phase::kRecompute);
    // The attention output is kept; its recomputed copy lands in datty, which the projection's
    // backward overwrites next.
    blocks_[i].attention.forward(st_.datty, b.att, b.qkv, a.B, a.T);
  }
  return b;
}

void GptStage::keep(const StoredTensor& dst, const View1& src, size_t n) {
  kernels::keep(exec_, dst, src, n);
}

View1 GptStage::kept_values(const StoredTensor& src, const View1& work, size_t n) {
  const View1 values = working_view(src, work);
  kernels::restore(exec_, values, src, n);
  return values;
}

}  // namespace trident
