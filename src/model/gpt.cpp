// GPT-2 stage forward and backward, composed from the kernels, with Megatron tensor parallelism:
// column-parallel qkv / fc, row-parallel projections (their sum all-reduced over tp: the "g"
// operator), input gradients of column-parallel layers all-reduced in backward (the "f"
// operator), vocabulary-parallel embedding and cross-entropy.
#include "model/gpt.hpp"

#include <algorithm>
#include <string>

#include "kernels/attention.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/residual.hpp"

namespace trident {

using namespace kernels;

StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const View1& flat) {
  return stage_tensors(local, layout, [&](const LocalParam& p) { return flat.data() + p.offset; });
}

StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const TensorLocator& where) {
  auto vec = [&](const std::string& name) {
    const LocalParam& p = local.at(name);
    return Vec(where(p), p.numel);
  };
  auto mat = [&](const std::string& name) {
    const LocalParam& p = local.at(name);
    return Mat(where(p), p.shape[0], p.shape[1]);
  };
  StageTensors t;
  if (local.holds("wte")) t.wte = mat("wte");
  if (layout.has_embedding) t.wpe = mat("wpe");
  for (int l = layout.first_layer; l < layout.last_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    t.blocks.push_back({vec(h + "ln_1.weight"), vec(h + "ln_1.bias"), mat(h + "attn.qkv.weight"),
                        vec(h + "attn.qkv.bias"), mat(h + "attn.proj.weight"),
                        vec(h + "attn.proj.bias"), vec(h + "ln_2.weight"), vec(h + "ln_2.bias"),
                        mat(h + "mlp.fc.weight"), vec(h + "mlp.fc.bias"),
                        mat(h + "mlp.proj.weight"), vec(h + "mlp.proj.bias")});
  }
  if (layout.has_head) {
    t.lnf_w = vec("ln_f.weight");
    t.lnf_b = vec("ln_f.bias");
  }
  return t;
}

GptStage::GptStage(const ModelConfig& m, const StageLayout& layout, Communicator* tp,
                   MemoryLedger& ledger, int max_batch, int max_seq, int slots,
                   const StageBuffers& buffers)
    : m_(m),
      layout_(layout),
      table_(m),
      local_(table_, m, layout, buffers.unit_alignment),
      tp_(tp) {
  const int tps = layout.tp_size;
  C_tp_ = m.n_embd / tps;
  NH_tp_ = m.n_head / tps;
  F_tp_ = 4 * m.n_embd / tps;
  V_tp_ = padded_vocab(m.vocab_size, tps) / tps;
  vocab_start_ = layout.tp_rank * V_tp_;
  vocab_valid_ = std::clamp(m.vocab_size - vocab_start_, 0, V_tp_);
  const size_t N = static_cast<size_t>(max_batch) * max_seq;
  const size_t C = m.n_embd, T = max_seq;
  if (buffers.full_params) {
    params_ = allocate(ledger, MemCategory::kParams, "params", local_.total_numel());
    p_ = stage_tensors(local_, layout, params_);
  }
  if (buffers.full_grads) {
    grads_ = allocate(ledger, MemCategory::kGrads, "grads", local_.total_numel());
    g_ = stage_tensors(local_, layout, grads_);
  }
  auto act = [&](const char* label, size_t n) {
    return allocate(ledger, MemCategory::kActivations, label, n);
  };
  recompute_ = buffers.recompute;
  // Everything of a block except its output, which a recomputed block still keeps per slot.
  auto block_internals = [&](BlockActivations& b, bool with_att) {
    b.ln1 = act("ln1", N * C);
    b.ln1_mean = act("ln1_mean", N);
    b.ln1_rstd = act("ln1_rstd", N);
    b.qkv = act("qkv", N * 3 * C_tp_);
    if (with_att) b.att = act("att", N * NH_tp_ * T);
    b.atty = act("atty", N * C_tp_);
    b.res_attn = act("res_attn", N * C);
    b.ln2 = act("ln2", N * C);
    b.ln2_mean = act("ln2_mean", N);
    b.ln2_rstd = act("ln2_rstd", N);
    b.fch = act("fch", N * F_tp_);
    b.fch_gelu = act("fch_gelu", N * F_tp_);
  };
  const int n_blocks = layout.last_layer - layout.first_layer;
  for (int s = 0; s < slots; ++s) {
    ActivationSlot a;
    a.tokens = allocate_int(ledger, MemCategory::kActivations, "tokens", N);
    a.targets = allocate_int(ledger, MemCategory::kActivations, "targets", N);
    a.input = act("input", N * C);
    for (int i = 0; i < n_blocks; ++i) {
      BlockActivations b;
      if (!recompute_.full_block(i)) block_internals(b, !recompute_.selective());
      b.res_mlp = act("res_mlp", N * C);
      a.blocks.push_back(b);
    }
    if (layout.has_head) {
      a.lnf = act("lnf", N * C);
      a.lnf_mean = act("lnf_mean", N);
      a.lnf_rstd = act("lnf_rstd", N);
      a.logits = act("logits", N * V_tp_);
      a.losses = act("losses", N);
      a.lse = act("lse", N);
    }
    slots_.push_back(a);
  }
  if (n_blocks > 0 && recompute_.full_block(0))
    block_internals(recomputed_, true);
  else if (n_blocks > 0 && recompute_.selective())
    recomputed_.att = act("att", N * NH_tp_ * T);
  // create_mirror, not create_mirror_view: on host spaces the latter would alias slot 0's
  // tokens, and staging a later micro-batch would overwrite them before slot 0's backward.
  tokens_host_ = Kokkos::create_mirror(slots_[0].tokens);
  targets_host_ = Kokkos::create_mirror(slots_[0].targets);
  auto work = [&](const char* label, size_t n) {
    return allocate(ledger, MemCategory::kWorkspace, label, n);
  };
  scratch_c_ = work("scratch_c", N * C);
  row_max_ = work("row_max", N);
  row_sum_ = work("row_sum", 2 * N);  // sums, then target logits: one all-reduce for both
  dresidual_ = work("dresidual", N * C);
  dln_ = work("dln", N * C);
  datty_ = work("datty", N * C_tp_);
  dqkv_ = work("dqkv", N * 3 * C_tp_);
  dfch_ = work("dfch", N * F_tp_);
  datt_scratch_ = work("datt_scratch", static_cast<size_t>(max_batch) * NH_tp_ * T);
}

void GptStage::init_params(uint64_t seed) {
  if (params_.extent(0) == 0) return;  // sharded parameters are initialised by their owner
  auto host = Kokkos::create_mirror_view(params_);
  for (const LocalParam& p : local_.params())
    for (int64_t i = 0; i < p.numel; ++i) {
      const int64_t g = local_.global_index(p, i);
      host(p.offset + i) = g < 0 ? 0.0f : initial_value(seed, *p.spec, g);
    }
  Kokkos::deep_copy(params_, host);
}

void GptStage::zero_grads() {
  if (grads_.extent(0) > 0) Kokkos::deep_copy(exec_, grads_, 0.0f);
}

int GptStage::unit_index(const std::string& name) const {
  return local_.unit_of(local_.at(name));
}

void GptStage::unit_done(const std::string& first_param) {
  if (!unit_done_) return;
  exec_.fence();
  unit_done_(unit_index(first_param));
}

void GptStage::need(const std::string& name, const std::string& next) {
  if (unit_needed_) unit_needed_(unit_index(name), next.empty() ? -1 : unit_index(next));
}

void GptStage::tp_allreduce(const View1& buf, size_t n) {
  if (layout_.tp_size == 1) return;
  ScopedPhase phase(timer_, Phase::kTpComm);
  exec_.fence();
  tp_->allreduce_sum(buf.data(), n);
}

void GptStage::tp_allreduce_max(const View1& buf, size_t n) {
  if (layout_.tp_size == 1) return;
  ScopedPhase phase(timer_, Phase::kTpComm);
  exec_.fence();
  tp_->allreduce_max(buf.data(), n);
}

Vec GptStage::input_buffer(int slot) const {
  const ActivationSlot& a = slots_[slot];
  return window(a.input, 0, a.input.extent(0));
}

Vec GptStage::output(int slot) const {
  const ActivationSlot& a = slots_[slot];
  const size_t n = static_cast<size_t>(a.B) * a.T * m_.n_embd;
  return window(a.blocks.empty() ? a.input : a.blocks.back().res_mlp, 0, n);
}

Vec GptStage::input_grad() const {
  return window(dresidual_, 0, dresidual_.extent(0));
}

ConstMat GptStage::logits(int slot) const {
  const ActivationSlot& a = slots_[slot];
  return window(a.logits, 0, static_cast<size_t>(a.B) * a.T, V_tp_);
}

double GptStage::cross_entropy(ActivationSlot& a, int N) {
  const ConstMat logits = window(a.logits, 0, N, V_tp_);
  cross_entropy_row_max(exec_, row_max_, logits, vocab_valid_);
  tp_allreduce_max(row_max_, N);
  const Vec sums = window(row_sum_, 0, N), target_logit = window(row_sum_, N, N);
  cross_entropy_row_sums(exec_, sums, target_logit, logits, row_max_, a.targets, vocab_start_,
                         vocab_valid_);
  tp_allreduce(row_sum_, 2 * static_cast<size_t>(N));
  cross_entropy_losses(exec_, a.losses, a.lse, row_max_, sums, target_logit, a.targets);
  double total = 0.0;
  const View1 losses = a.losses;
  Kokkos::parallel_reduce(
      "loss_sum", Kokkos::RangePolicy<Exec>(exec_, 0, N),
      KOKKOS_LAMBDA(int n, double& acc) { acc += losses(n); }, total);
  return total;
}

void GptStage::block_forward(const BlockTensors& w, const BlockActivations& b, const View1& x,
                             int B, int T, bool complete) {
  const int N = B * T, C = m_.n_embd;
  const AttentionShape shape{B, T, NH_tp_, m_.head_size()};
  const bool adds_bias = layout_.tp_rank == 0;  // row-parallel biases: added once per tp group
  layernorm_forward(exec_, window(b.ln1, 0, N, C), b.ln1_mean, b.ln1_rstd, window(x, 0, N, C),
                    w.ln1_w, w.ln1_b);
  linear_forward(exec_, window(b.qkv, 0, N, 3 * C_tp_), window(b.ln1, 0, N, C), w.qkv_w, w.qkv_b);
  attention_forward(exec_, window(b.atty, 0, N, C_tp_), window(b.att, 0, N * NH_tp_, T),
                    window(b.qkv, 0, N, 3 * C_tp_), shape);
  linear_forward(exec_, window(scratch_c_, 0, N, C), window(b.atty, 0, N, C_tp_), w.proj_w,
                 adds_bias ? ConstVec(w.proj_b) : ConstVec());
  tp_allreduce(scratch_c_, static_cast<size_t>(N) * C);
  residual_forward(exec_, window(b.res_attn, 0, N * C), window(x, 0, N * C),
                   window(scratch_c_, 0, N * C));
  layernorm_forward(exec_, window(b.ln2, 0, N, C), b.ln2_mean, b.ln2_rstd,
                    window(b.res_attn, 0, N, C), w.ln2_w, w.ln2_b);
  linear_forward(exec_, window(b.fch, 0, N, F_tp_), window(b.ln2, 0, N, C), w.fc_w, w.fc_b);
  gelu_forward(exec_, window(b.fch_gelu, 0, N * F_tp_), window(b.fch, 0, N * F_tp_));
  if (!complete) return;
  linear_forward(exec_, window(scratch_c_, 0, N, C), window(b.fch_gelu, 0, N, F_tp_), w.fcproj_w,
                 adds_bias ? ConstVec(w.fcproj_b) : ConstVec());
  tp_allreduce(scratch_c_, static_cast<size_t>(N) * C);
  residual_forward(exec_, window(b.res_mlp, 0, N * C), window(b.res_attn, 0, N * C),
                   window(scratch_c_, 0, N * C));
}

BlockActivations GptStage::activations_for_backward(const ActivationSlot& a, int i,
                                                    const View1& x) {
  const BlockActivations& kept = a.blocks[i];
  const int N = a.B * a.T;
  if (recompute_.full_block(i)) {
    ScopedPhase phase(timer_, Phase::kRecompute);
    BlockActivations b = recomputed_;
    b.res_mlp = kept.res_mlp;
    block_forward(p_.blocks[i], b, x, a.B, a.T, false);
    return b;
  }
  if (recompute_.selective()) {
    ScopedPhase phase(timer_, Phase::kRecompute);
    BlockActivations b = kept;
    b.att = recomputed_.att;
    // The attention output is kept; its recomputed copy lands in datty_, which the projection's
    // backward overwrites next.
    attention_forward(exec_, window(datty_, 0, N, C_tp_), window(b.att, 0, N * NH_tp_, a.T),
                      window(b.qkv, 0, N, 3 * C_tp_), {a.B, a.T, NH_tp_, m_.head_size()});
    return b;
  }
  return kept;
}

double GptStage::forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T) {
  ActivationSlot& a = slots_[slot];
  a.B = B;
  a.T = T;
  const int N = B * T, C = m_.n_embd;
  if (tokens || targets) {
    for (int n = 0; n < N; ++n) {
      tokens_host_(n) = tokens ? tokens[n] : 0;
      targets_host_(n) = targets ? targets[n] : -1;
    }
    Kokkos::deep_copy(exec_, Kokkos::subview(a.tokens, std::make_pair(0, N)),
                      Kokkos::subview(tokens_host_, std::make_pair(0, N)));
    Kokkos::deep_copy(exec_, Kokkos::subview(a.targets, std::make_pair(0, N)),
                      Kokkos::subview(targets_host_, std::make_pair(0, N)));
  }
  const bool adds_bias = layout_.tp_rank == 0;  // row-parallel biases: added once per tp group
  if (layout_.has_embedding) {
    need("wte", "");
    need("wpe", block_param(0));
    embedding_forward(exec_, window(a.input, 0, N, C), a.tokens, p_.wte,
                      adds_bias ? ConstMat(p_.wpe) : ConstMat(), T, vocab_start_);
    tp_allreduce(a.input, static_cast<size_t>(N) * C);
  }
  View1 x = a.input;
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    need(block_param(static_cast<int>(i)), i + 1 < a.blocks.size()
                                               ? block_param(static_cast<int>(i) + 1)
                                               : (layout_.has_head ? "ln_f.weight" : ""));
    // Blocks whose activations are not kept compute them in the shared recompute buffers.
    BlockActivations b = a.blocks[i];
    if (recompute_.full_block(static_cast<int>(i))) {
      b = recomputed_;
      b.res_mlp = a.blocks[i].res_mlp;
    } else if (recompute_.selective()) {
      b.att = recomputed_.att;
    }
    block_forward(p_.blocks[i], b, x, B, T, true);
    x = a.blocks[i].res_mlp;
  }
  if (!layout_.has_head) {
    exec_.fence();
    return 0.0;
  }
  need("ln_f.weight", "");
  need("wte", "");
  layernorm_forward(exec_, window(a.lnf, 0, N, C), a.lnf_mean, a.lnf_rstd, window(x, 0, N, C),
                    p_.lnf_w, p_.lnf_b);
  linear_forward(exec_, window(a.logits, 0, N, V_tp_), window(a.lnf, 0, N, C), p_.wte, ConstVec());
  return targets ? cross_entropy(a, N) : 0.0;
}

void GptStage::backward(int slot, float loss_scale, const ConstVec& grad_output) {
  ActivationSlot& a = slots_[slot];
  const int B = a.B, T = a.T, N = B * T, C = m_.n_embd;
  const AttentionShape shape{B, T, NH_tp_, m_.head_size()};
  const Mat dln = window(dln_, 0, N, C);
  const Mat dres = window(dresidual_, 0, N, C);
  if (layout_.has_head) {
    need("ln_f.weight", "");
    need("wte", block_param(static_cast<int>(a.blocks.size()) - 1));
    const Mat dlogits = window(a.logits, 0, N, V_tp_);  // the gradient replaces the logits
    cross_entropy_backward(exec_, dlogits, dlogits, a.lse, a.targets, vocab_start_, vocab_valid_,
                           loss_scale);
    linear_backward(exec_, dln, g_.wte, Vec(), dlogits, window(a.lnf, 0, N, C), p_.wte, false);
    tp_allreduce(dln_, static_cast<size_t>(N) * C);
    Kokkos::deep_copy(exec_, dres, 0.0f);
    const View1 x_last = a.blocks.empty() ? a.input : a.blocks.back().res_mlp;
    layernorm_backward(exec_, dres, g_.lnf_w, g_.lnf_b, dln, window(x_last, 0, N, C), p_.lnf_w,
                       a.lnf_mean, a.lnf_rstd);
    grads_ready_from(local_.at("ln_f.weight").offset);
    unit_done("ln_f.weight");
  } else {
    Kokkos::deep_copy(exec_, window(dresidual_, 0, static_cast<size_t>(N) * C), grad_output);
  }
  for (int i = static_cast<int>(a.blocks.size()) - 1; i >= 0; --i) {
    need(block_param(i), block_param(i - 1));
    const BlockTensors& w = p_.blocks[i];
    const BlockTensors& g = g_.blocks[i];
    const View1 x = i == 0 ? a.input : a.blocks[i - 1].res_mlp;
    const BlockActivations b = activations_for_backward(a, i, x);
    const Mat dfch = window(dfch_, 0, N, F_tp_);
    // MLP: dres holds d/d(block output) = d/d(res_attn) through the residual path.
    linear_backward(exec_, dfch, g.fcproj_w, g.fcproj_b, dres, window(b.fch_gelu, 0, N, F_tp_),
                    w.fcproj_w, false);
    gelu_backward(exec_, window(dfch_, 0, N * F_tp_), window(b.fch, 0, N * F_tp_),
                  window(dfch_, 0, N * F_tp_));
    linear_backward(exec_, dln, g.fc_w, g.fc_b, dfch, window(b.ln2, 0, N, C), w.fc_w, false);
    tp_allreduce(dln_, static_cast<size_t>(N) * C);
    layernorm_backward(exec_, dres, g.ln2_w, g.ln2_b, dln, window(b.res_attn, 0, N, C), w.ln2_w,
                       b.ln2_mean, b.ln2_rstd);
    // Attention: dres now holds d/d(res_attn) = d/d(block input) through the residual path.
    const Mat datty = window(datty_, 0, N, C_tp_);
    linear_backward(exec_, datty, g.proj_w, g.proj_b, dres, window(b.atty, 0, N, C_tp_), w.proj_w,
                    false);
    const Mat dqkv = window(dqkv_, 0, N, 3 * C_tp_);
    attention_backward(exec_, dqkv, window(datt_scratch_, 0, B * NH_tp_, T), datty,
                       window(b.qkv, 0, N, 3 * C_tp_), window(b.att, 0, N * NH_tp_, T), shape);
    linear_backward(exec_, dln, g.qkv_w, g.qkv_b, dqkv, window(b.ln1, 0, N, C), w.qkv_w, false);
    tp_allreduce(dln_, static_cast<size_t>(N) * C);
    layernorm_backward(exec_, dres, g.ln1_w, g.ln1_b, dln, window(x, 0, N, C), w.ln1_w, b.ln1_mean,
                       b.ln1_rstd);
    const std::string first = "h." + std::to_string(layout_.first_layer + i) + ".ln_1.weight";
    grads_ready_from(local_.at(first).offset);
    unit_done(first);
  }
  if (layout_.has_embedding)
    embedding_backward(exec_, g_.wte, g_.wpe, dres, a.tokens, T, vocab_start_);
  exec_.fence();
  grads_ready_from(0);
  if (layout_.has_embedding) unit_done("wpe");
  if (local_.holds("wte")) unit_done("wte");
}

}  // namespace trident
