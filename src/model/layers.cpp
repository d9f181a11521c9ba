// Forward and backward halves of the layer types, composed from the kernels and the tp group's
// f and g operators.
#include "model/layers.hpp"

#include "kernels/cast.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/residual.hpp"

namespace trident {

using namespace kernels;

void LayerContext::round(const View1& v, size_t n) const {
  round_in_place(exec, window(v, 0, n), n, storage);
}

void LayerNorm::forward(const View1& out, const View1& mean, const View1& rstd, const View1& x,
                        int rows) const {
  layernorm_forward(ctx_->exec, window(out, 0, rows, C_), mean, rstd, window(x, 0, rows, C_),
                    weights.weight, weights.bias);
  ctx_->round(out, static_cast<size_t>(rows) * C_);
}

void LayerNorm::backward_input(const View1& dx, const View1& dout, const View1& x,
                               const View1& mean, const View1& rstd, int rows) const {
  layernorm_backward_input(ctx_->exec, window(dx, 0, rows, C_), window(dout, 0, rows, C_),
                           window(x, 0, rows, C_), weights.weight, mean, rstd);
}

void LayerNorm::backward_weight(const View1& dout, const View1& x, const View1& mean,
                                const View1& rstd, int rows) const {
  const Exec& exec = ctx_->exec;
  if (!ctx_->tp->sequence_parallel()) {
    layernorm_backward_params(exec, grads.weight, grads.bias, window(dout, 0, rows, C_),
                              window(x, 0, rows, C_), mean, rstd);
    return;
  }
  const View1& sum = ctx_->ws->norm_grad;  // this rank's rows' share, then the tp sum
  Kokkos::deep_copy(exec, sum, 0.0f);
  const Vec dw = window(sum, 0, C_), db = window(sum, C_, C_);
  layernorm_backward_params(exec, dw, db, window(dout, 0, rows, C_), window(x, 0, rows, C_), mean,
                            rstd);
  ctx_->tp->allreduce_sum(sum, 2 * static_cast<size_t>(C_));
  residual_forward(exec, grads.weight, grads.weight, dw);
  residual_forward(exec, grads.bias, grads.bias, db);
}

void ColumnParallelLinear::forward(const View1& out, const View1& x_rows, int N) const {
  const View1 x = ctx_->tp->gather_rows(x_rows, N, ctx_->ws->gathered);
  linear_forward(ctx_->exec, window(out, 0, N, out_), window(x, 0, N, in_), weights.weight,
                 weights.bias);
  ctx_->round(out, static_cast<size_t>(N) * out_);
}

View1 ColumnParallelLinear::backward_input(const View1& dout, int N) const {
  const LayerWorkspace& ws = *ctx_->ws;
  linear_backward_input(ctx_->exec, window(ws.dinput, 0, N, in_), window(dout, 0, N, out_),
                        weights.weight, false);
  const View1 dx = ctx_->tp->sum_rows(ws.dinput, N, ws.scattered);
  ctx_->round(dx, static_cast<size_t>(ctx_->tp->local_rows(N)) * in_);
  return dx;
}

void ColumnParallelLinear::backward_weight(const View1& dout, const View1& x_rows, int N,
                                           bool accumulate) const {
  const View1 x = ctx_->tp->gather_rows(x_rows, N, ctx_->ws->gathered);
  linear_backward_weight(ctx_->exec, grads.weight, grads.bias, window(dout, 0, N, out_),
                         window(x, 0, N, in_), accumulate);
}

View1 RowParallelLinear::forward(const View1& x, int N) const {
  const View1& partial = ctx_->ws->partial;
  const bool adds_bias = ctx_->tp->rank() == 0;  // replicated bias: added once per tp group
  linear_forward(ctx_->exec, window(partial, 0, N, out_), window(x, 0, N, in_), weights.weight,
                 adds_bias ? ConstVec(weights.bias) : ConstVec());
  const View1 y = ctx_->tp->sum_rows(partial, N, ctx_->ws->scattered);
  ctx_->round(y, static_cast<size_t>(ctx_->tp->local_rows(N)) * out_);
  return y;
}

View1 RowParallelLinear::gather_output_grad(const View1& dout_rows, int N) const {
  return ctx_->tp->gather_rows(dout_rows, N, ctx_->ws->partial);
}

void RowParallelLinear::backward_input(const View1& dx, const View1& dout, int N) const {
  linear_backward_input(ctx_->exec, window(dx, 0, N, in_), window(dout, 0, N, out_), weights.weight,
                        false);
  ctx_->round(dx, static_cast<size_t>(N) * in_);
}

void RowParallelLinear::backward_weight(const View1& dout, const View1& x, int N,
                                        bool accumulate) const {
  linear_backward_weight(ctx_->exec, grads.weight, grads.bias, window(dout, 0, N, out_),
                         window(x, 0, N, in_), accumulate);
}

void Attention::forward(const View1& out, const View1& lse, const View1& qkv, int B, int T) const {
  const int N = B * T, C_tp = heads_ * head_size_;
  attention_forward(ctx_->exec, window(out, 0, N, C_tp), lse, ctx_->ws->attention,
                    window(qkv, 0, N, 3 * C_tp), shape(B, T));
  ctx_->round(out, static_cast<size_t>(N) * C_tp);
}

void Attention::backward(const View1& dqkv, const View1& dout, const View1& qkv, const View1& out,
                         const View1& lse, int B, int T) const {
  const int N = B * T, C_tp = heads_ * head_size_;
  attention_backward(ctx_->exec, window(dqkv, 0, N, 3 * C_tp), ctx_->ws->attention,
                     window(dout, 0, N, C_tp), window(qkv, 0, N, 3 * C_tp), window(out, 0, N, C_tp),
                     lse, shape(B, T));
  ctx_->round(dqkv, static_cast<size_t>(N) * 3 * C_tp);
}

void Gelu::forward(const View1& out, const View1& x, size_t n) const {
  gelu_forward(ctx_->exec, window(out, 0, n), window(x, 0, n));
  ctx_->round(out, n);
}

void Gelu::backward(const View1& d, const View1& x, size_t n) const {
  gelu_backward(ctx_->exec, window(d, 0, n), window(x, 0, n), window(d, 0, n));
  ctx_->round(d, n);
}

void Residual::forward(const View1& out, const View1& a, const View1& b, size_t n) const {
  residual_forward(ctx_->exec, window(out, 0, n), window(a, 0, n), window(b, 0, n));
  ctx_->round(out, n);
}

void VocabParallelEmbedding::forward(const View1& out, const IntView1& tokens, int B, int T) const {
  TensorParallel& tp = *ctx_->tp;
  const int N = B * T;
  // Every token's partial embedding (this rank's vocabulary slice), summed over tp.
  const View1 embedded = tp.sequence_parallel() ? ctx_->ws->partial : out;
  embedding_forward(ctx_->exec, window(embedded, 0, N, C_), tokens, weights.wte,
                    tp.rank() == 0 ? ConstMat(weights.wpe) : ConstMat(), T, vocab_start_);
  tp.sum_rows(embedded, N, out);
  ctx_->round(out, static_cast<size_t>(tp.local_rows(N)) * C_);
}

void VocabParallelEmbedding::backward_weight(const View1& dout_rows, const IntView1& tokens, int B,
                                             int T) const {
  const int N = B * T;
  const View1 dout = ctx_->tp->gather_rows(dout_rows, N, ctx_->ws->partial);
  embedding_backward(ctx_->exec, grads.wte, grads.wpe, window(dout, 0, N, C_), tokens, T,
                     vocab_start_);
}

double VocabParallelCrossEntropy::forward(const View1& losses, const View1& lse,
                                          const View1& logits, const IntView1& targets,
                                          int N) const {
  const Exec& exec = ctx_->exec;
  const LayerWorkspace& ws = *ctx_->ws;
  const ConstMat rows = window(logits, 0, N, V_);
  cross_entropy_row_max(exec, ws.row_max, rows, vocab_valid_);
  ctx_->tp->allreduce_max(ws.row_max, N);
  const Vec sums = window(ws.row_sums, 0, N), target_logit = window(ws.row_sums, N, N);
  cross_entropy_row_sums(exec, sums, target_logit, rows, ws.row_max, targets, vocab_start_,
                         vocab_valid_);
  ctx_->tp->allreduce_sum(ws.row_sums, 2 * static_cast<size_t>(N));
  cross_entropy_losses(exec, losses, lse, ws.row_max, sums, target_logit, targets);
  return cross_entropy_loss_sum(exec, window(losses, 0, N), N);
}

void VocabParallelCrossEntropy::backward(const View1& logits, const View1& lse,
                                         const IntView1& targets, int N, float scale) const {
  const Mat dlogits = window(logits, 0, N, V_);  // the gradient replaces the logits
  cross_entropy_backward(ctx_->exec, dlogits, dlogits, lse, targets, vocab_start_, vocab_valid_,
                         scale);
  ctx_->round(logits, static_cast<size_t>(N) * V_);
}

}  // namespace trident
