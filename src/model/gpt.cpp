// GPT-2 forward and backward on one rank, composed from the kernels.
#include "model/gpt.hpp"

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

ModelTensors model_tensors(const ParamTable& table, const ModelConfig& m, const View1& flat) {
  auto vec = [&](const std::string& name) {
    const ParamSpec& s = table.at(name);
    return window(flat, s.offset, s.numel());
  };
  auto mat = [&](const std::string& name) {
    const ParamSpec& s = table.at(name);
    return window(flat, s.offset, s.shape[0], s.shape[1]);
  };
  ModelTensors t;
  t.wte = mat("wte");
  t.wpe = mat("wpe");
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    t.blocks.push_back({vec(h + "ln_1.weight"), vec(h + "ln_1.bias"), mat(h + "attn.qkv.weight"),
                        vec(h + "attn.qkv.bias"), mat(h + "attn.proj.weight"),
                        vec(h + "attn.proj.bias"), vec(h + "ln_2.weight"), vec(h + "ln_2.bias"),
                        mat(h + "mlp.fc.weight"), vec(h + "mlp.fc.bias"),
                        mat(h + "mlp.proj.weight"), vec(h + "mlp.proj.bias")});
  }
  t.lnf_w = vec("ln_f.weight");
  t.lnf_b = vec("ln_f.bias");
  return t;
}

Gpt::Gpt(const ModelConfig& m, MemoryLedger& ledger, int max_batch, int max_seq)
    : m_(m), table_(m), max_B_(max_batch), max_T_(max_seq) {
  const size_t N = static_cast<size_t>(max_batch) * max_seq;
  const size_t C = m.n_embd, V = m.vocab_size, NH = m.n_head, T = max_seq;
  params_ = allocate(ledger, MemCategory::kParams, "params", table_.total_numel());
  grads_ = allocate(ledger, MemCategory::kGrads, "grads", table_.total_numel());
  p_ = model_tensors(table_, m, params_);
  g_ = model_tensors(table_, m, grads_);
  tokens_ = allocate_int(ledger, MemCategory::kActivations, "tokens", N);
  targets_ = allocate_int(ledger, MemCategory::kActivations, "targets", N);
  tokens_host_ = Kokkos::create_mirror_view(tokens_);
  targets_host_ = Kokkos::create_mirror_view(targets_);
  auto act = [&](const char* label, size_t n) {
    return allocate(ledger, MemCategory::kActivations, label, n);
  };
  encoded_ = act("encoded", N * C);
  for (int l = 0; l < m.n_layer; ++l) {
    BlockActivations a;
    a.ln1 = act("ln1", N * C);
    a.ln1_mean = act("ln1_mean", N);
    a.ln1_rstd = act("ln1_rstd", N);
    a.qkv = act("qkv", N * 3 * C);
    a.att = act("att", N * NH * T);
    a.atty = act("atty", N * C);
    a.res_attn = act("res_attn", N * C);
    a.ln2 = act("ln2", N * C);
    a.ln2_mean = act("ln2_mean", N);
    a.ln2_rstd = act("ln2_rstd", N);
    a.fch = act("fch", N * 4 * C);
    a.fch_gelu = act("fch_gelu", N * 4 * C);
    a.res_mlp = act("res_mlp", N * C);
    acts_.push_back(a);
  }
  lnf_ = act("lnf", N * C);
  lnf_mean_ = act("lnf_mean", N);
  lnf_rstd_ = act("lnf_rstd", N);
  logits_ = act("logits", N * V);
  losses_ = act("losses", N);
  lse_ = act("lse", N);
  auto work = [&](const char* label, size_t n) {
    return allocate(ledger, MemCategory::kWorkspace, label, n);
  };
  scratch_c_ = work("scratch_c", N * C);
  dresidual_ = work("dresidual", N * C);
  dln_ = work("dln", N * C);
  datty_ = work("datty", N * C);
  dqkv_ = work("dqkv", N * 3 * C);
  dfch_ = work("dfch", N * 4 * C);
  datt_scratch_ = work("datt_scratch", static_cast<size_t>(max_batch) * NH * T);
}

void Gpt::init_params(uint64_t seed) {
  auto host = Kokkos::create_mirror_view(params_);
  for (const ParamSpec& s : table_.specs())
    for (int64_t i = 0; i < s.numel(); ++i) host(s.offset + i) = initial_value(seed, s, i);
  Kokkos::deep_copy(params_, host);
}

void Gpt::zero_grads() {
  Kokkos::deep_copy(exec_, grads_, 0.0f);
}

ConstMat Gpt::logits() const {
  return window(logits_, 0, static_cast<size_t>(B_) * T_, m_.vocab_size);
}

double Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  B_ = B;
  T_ = T;
  const int N = B * T, C = m_.n_embd, V = m_.vocab_size;
  for (int n = 0; n < N; ++n) {
    tokens_host_(n) = tokens[n];
    targets_host_(n) = targets ? targets[n] : -1;
  }
  Kokkos::deep_copy(exec_, tokens_, tokens_host_);
  Kokkos::deep_copy(exec_, targets_, targets_host_);
  const AttentionShape shape{B, T, m_.n_head, m_.head_size()};

  embedding_forward(exec_, window(encoded_, 0, N, C), tokens_, p_.wte, p_.wpe, T);
  View1 x = encoded_;
  for (int l = 0; l < m_.n_layer; ++l) {
    const BlockTensors& w = p_.blocks[l];
    BlockActivations& a = acts_[l];
    layernorm_forward(exec_, window(a.ln1, 0, N, C), a.ln1_mean, a.ln1_rstd, window(x, 0, N, C),
                      w.ln1_w, w.ln1_b);
    linear_forward(exec_, window(a.qkv, 0, N, 3 * C), window(a.ln1, 0, N, C), w.qkv_w, w.qkv_b);
    attention_forward(exec_, window(a.atty, 0, N, C), window(a.att, 0, N * m_.n_head, T),
                      window(a.qkv, 0, N, 3 * C), shape);
    linear_forward(exec_, window(scratch_c_, 0, N, C), window(a.atty, 0, N, C), w.proj_w, w.proj_b);
    residual_forward(exec_, window(a.res_attn, 0, N * C), window(x, 0, N * C),
                     window(scratch_c_, 0, N * C));
    layernorm_forward(exec_, window(a.ln2, 0, N, C), a.ln2_mean, a.ln2_rstd,
                      window(a.res_attn, 0, N, C), w.ln2_w, w.ln2_b);
    linear_forward(exec_, window(a.fch, 0, N, 4 * C), window(a.ln2, 0, N, C), w.fc_w, w.fc_b);
    gelu_forward(exec_, window(a.fch_gelu, 0, N * 4 * C), window(a.fch, 0, N * 4 * C));
    linear_forward(exec_, window(scratch_c_, 0, N, C), window(a.fch_gelu, 0, N, 4 * C), w.fcproj_w,
                   w.fcproj_b);
    residual_forward(exec_, window(a.res_mlp, 0, N * C), window(a.res_attn, 0, N * C),
                     window(scratch_c_, 0, N * C));
    x = a.res_mlp;
  }
  layernorm_forward(exec_, window(lnf_, 0, N, C), lnf_mean_, lnf_rstd_, window(x, 0, N, C),
                    p_.lnf_w, p_.lnf_b);
  linear_forward(exec_, window(logits_, 0, N, V), window(lnf_, 0, N, C), p_.wte, ConstVec());
  if (!targets) return 0.0;
  cross_entropy_forward(exec_, losses_, lse_, window(logits_, 0, N, V), targets_, V);
  double total = 0.0;
  const View1 losses = losses_;
  Kokkos::parallel_reduce(
      "loss_sum", Kokkos::RangePolicy<Exec>(exec_, 0, N),
      KOKKOS_LAMBDA(int n, double& acc) { acc += losses(n); }, total);
  return total;
}

void Gpt::backward(float loss_scale) {
  const int B = B_, T = T_, N = B * T, C = m_.n_embd, V = m_.vocab_size;
  const AttentionShape shape{B, T, m_.n_head, m_.head_size()};
  const Mat dlogits = window(logits_, 0, N, V);  // the gradient replaces the logits in place
  cross_entropy_backward(exec_, dlogits, dlogits, lse_, targets_, V, loss_scale);
  const Mat dln = window(dln_, 0, N, C);
  const Mat dres = window(dresidual_, 0, N, C);
  linear_backward(exec_, dln, g_.wte, Vec(), dlogits, window(lnf_, 0, N, C), p_.wte, false);
  Kokkos::deep_copy(exec_, dresidual_, 0.0f);
  const View1 x_last = m_.n_layer > 0 ? acts_.back().res_mlp : encoded_;
  layernorm_backward(exec_, dres, g_.lnf_w, g_.lnf_b, dln, window(x_last, 0, N, C), p_.lnf_w,
                     lnf_mean_, lnf_rstd_);
  for (int l = m_.n_layer - 1; l >= 0; --l) {
    const BlockTensors& w = p_.blocks[l];
    const BlockTensors& g = g_.blocks[l];
    const BlockActivations& a = acts_[l];
    const View1 x = l == 0 ? encoded_ : acts_[l - 1].res_mlp;
    const Mat dfch = window(dfch_, 0, N, 4 * C);
    // MLP: dres holds d/d(block output) = d/d(res_attn) through the residual path.
    linear_backward(exec_, dfch, g.fcproj_w, g.fcproj_b, dres, window(a.fch_gelu, 0, N, 4 * C),
                    w.fcproj_w, false);
    gelu_backward(exec_, window(dfch_, 0, N * 4 * C), window(a.fch, 0, N * 4 * C),
                  window(dfch_, 0, N * 4 * C));
    linear_backward(exec_, dln, g.fc_w, g.fc_b, dfch, window(a.ln2, 0, N, C), w.fc_w, false);
    layernorm_backward(exec_, dres, g.ln2_w, g.ln2_b, dln, window(a.res_attn, 0, N, C), w.ln2_w,
                       a.ln2_mean, a.ln2_rstd);
    // Attention: dres now holds d/d(res_attn) = d/d(block input) through the residual path.
    const Mat datty = window(datty_, 0, N, C);
    linear_backward(exec_, datty, g.proj_w, g.proj_b, dres, window(a.atty, 0, N, C), w.proj_w,
                    false);
    const Mat dqkv = window(dqkv_, 0, N, 3 * C);
    attention_backward(exec_, dqkv, window(datt_scratch_, 0, B * m_.n_head, T), datty,
                       window(a.qkv, 0, N, 3 * C), window(a.att, 0, N * m_.n_head, T), shape);
    linear_backward(exec_, dln, g.qkv_w, g.qkv_b, dqkv, window(a.ln1, 0, N, C), w.qkv_w, false);
    layernorm_backward(exec_, dres, g.ln1_w, g.ln1_b, dln, window(x, 0, N, C), w.ln1_w, a.ln1_mean,
                       a.ln1_rstd);
  }
  embedding_backward(exec_, g_.wte, g_.wpe, dres, tokens_, T);
  exec_.fence();
}

}  // namespace trident
