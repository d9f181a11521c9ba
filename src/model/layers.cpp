// Forward and backward halves of the layer types, composed from the kernels and the tp group's
// f and g operators, each dispatched on the storage format (kernels/elements.hpp).
#include "model/layers.hpp"

#include <cstdio>
#include <stdexcept>
#include <string>

#include "core/error.hpp"
#include "kernels/cast.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/cudnn_attention.hpp"
#include "kernels/embedding.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/residual.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/swiglu.hpp"

namespace trident {

using namespace kernels;

namespace {

// Gradients of parameters are fp32 whatever the storage format.
Vec grad_vec(const StoredTensor& t, size_t n) {
  return vec_of<Fp32Elements>(t, n);
}
Mat grad_mat(const StoredTensor& t, size_t rows, size_t cols) {
  return mat_of<Fp32Elements>(t, rows, cols);
}

// The weight gradient dout^T x [out, in] to `stream` a block of rows at a time (each block's GEMM
// writes it whole), and the bias gradient (+)= as when the weight gradient is kept.
void stream_weight_grad(const LayerContext& ctx, const GradStream& stream,
                        const StoredTensor& dbias, const StoredTensor& dout, const StoredTensor& x,
                        int N, int out, int in) {
  ctx.dispatch([&](auto e) {
    using E = decltype(e);
    linear_backward_weight<E>(ctx.exec, Mat(), grad_vec(dbias, out), mat_of<E>(dout, N, out),
                              mat_of<E>(x, N, in), true, kBuildShape, ctx.ws->column_partials);
  });
  const int64_t block = stream.sink->rows_per_block(in);
  for (int64_t first = 0; first < out; first += block) {
    const int rows = static_cast<int>(std::min<int64_t>(block, out - first));
    ctx.dispatch([&](auto e) {
      using E = decltype(e);
      linear_weight_grad_rows<E>(ctx.exec, stream.sink->rows_buffer(), mat_of<E>(dout, N, out),
                                 mat_of<E>(x, N, in), static_cast<int>(first), rows);
    });
    stream.sink->take_rows(stream.param_offset, first, rows, in);
  }
}

}  // namespace

void Norm::forward(const StoredTensor& out, const View1& mean, const View1& rstd,
                   const StoredTensor& x, int rows) const {
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    if (rms_)
      rmsnorm_forward<E>(ctx_->exec, mat_of<E>(out, rows, C_), rstd, mat_of<E>(x, rows, C_),
                         vec_of<E>(weights.weight, C_), eps_);
    else
      layernorm_forward<E>(ctx_->exec, mat_of<E>(out, rows, C_), mean, rstd, mat_of<E>(x, rows, C_),
                           vec_of<E>(weights.weight, C_), vec_of<E>(weights.bias, C_));
  });
}

void Norm::backward_input(const StoredTensor& dx, const StoredTensor& dout, const StoredTensor& x,
                          const View1& mean, const View1& rstd, int rows) const {
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    if (rms_)
      rmsnorm_backward_input<E>(ctx_->exec, mat_of<E>(dx, rows, C_), mat_of<E>(dout, rows, C_),
                                mat_of<E>(x, rows, C_), vec_of<E>(weights.weight, C_), rstd);
    else
      layernorm_backward_input<E>(ctx_->exec, mat_of<E>(dx, rows, C_), mat_of<E>(dout, rows, C_),
                                  mat_of<E>(x, rows, C_), vec_of<E>(weights.weight, C_), mean,
                                  rstd);
  });
}

// Under sequence parallelism this rank's rows give a share of the parameters' gradients, summed
// over tp in the workspace and then added to the gradients; otherwise they add there directly.
Norm::GradTargets Norm::grad_targets() const {
  const bool sp = ctx_->tp->sequence_parallel();
  const View1& sum = ctx_->ws->norm_grad;
  if (sp) Kokkos::deep_copy(ctx_->exec, window(sum, 0, grad_floats()), 0.0f);
  return {sp ? window(sum, 0, C_) : grad_vec(grads.weight, C_), rms_ ? Vec()
                                                                : sp ? window(sum, C_, C_)
                                                                     : grad_vec(grads.bias, C_)};
}

void Norm::finish_grads(const GradTargets& g) const {
  if (!ctx_->tp->sequence_parallel()) return;
  ctx_->tp->allreduce_sum(ctx_->ws->norm_grad, grad_floats());
  residual_forward(ctx_->exec, grad_vec(grads.weight, C_), grad_vec(grads.weight, C_), g.weight);
  if (!rms_)
    residual_forward(ctx_->exec, grad_vec(grads.bias, C_), grad_vec(grads.bias, C_), g.bias);
}

void Norm::backward_weight(const StoredTensor& dout, const StoredTensor& x, const View1& mean,
                           const View1& rstd, int rows) const {
  const GradTargets g = grad_targets();
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    if (rms_)
      rmsnorm_backward_params<E>(ctx_->exec, g.weight, mat_of<E>(dout, rows, C_),
                                 mat_of<E>(x, rows, C_), rstd, kBuildShape,
                                 ctx_->ws->column_partials);
    else
      layernorm_backward_params<E>(ctx_->exec, g.weight, g.bias, mat_of<E>(dout, rows, C_),
                                   mat_of<E>(x, rows, C_), mean, rstd, kBuildShape,
                                   ctx_->ws->column_partials);
  });
  finish_grads(g);
}

void Norm::backward(const StoredTensor& dx, const StoredTensor& dout, const StoredTensor& x,
                    const View1& mean, const View1& rstd, int rows) const {
  const GradTargets g = grad_targets();
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    if (rms_)
      rmsnorm_backward<E>(ctx_->exec, mat_of<E>(dx, rows, C_), g.weight, mat_of<E>(dout, rows, C_),
                          mat_of<E>(x, rows, C_), vec_of<E>(weights.weight, C_), rstd, kBuildShape,
                          ctx_->ws->column_partials);
    else
      layernorm_backward<E>(ctx_->exec, mat_of<E>(dx, rows, C_), g.weight, g.bias,
                            mat_of<E>(dout, rows, C_), mat_of<E>(x, rows, C_),
                            vec_of<E>(weights.weight, C_), mean, rstd, kBuildShape,
                            ctx_->ws->column_partials);
  });
  finish_grads(g);
}

void ColumnParallelLinear::forward(const StoredTensor& out, const StoredTensor& x_rows,
                                   int N) const {
  const StoredTensor x = ctx_->tp->gather_rows(x_rows, N, ctx_->ws->gathered);
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    linear_forward<E>(ctx_->exec, mat_of<E>(out, N, out_), mat_of<E>(x, N, in_),
                      mat_of<E>(weights.weight, out_, in_), vec_of<E>(weights.bias, out_));
  });
}

void ColumnParallelLinear::forward_gelu(const StoredTensor& act, const StoredTensor& out,
                                        const StoredTensor& x_rows, int N) const {
  const StoredTensor x = ctx_->tp->gather_rows(x_rows, N, ctx_->ws->gathered);
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    linear_forward_gelu<E>(ctx_->exec, mat_of<E>(act, N, out_), mat_of<E>(out, N, out_),
                           mat_of<E>(x, N, in_), mat_of<E>(weights.weight, out_, in_),
                           vec_of<E>(weights.bias, out_));
  });
}

StoredTensor ColumnParallelLinear::backward_input(const StoredTensor& dout, int N) const {
  const LayerWorkspace& ws = *ctx_->ws;
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    linear_backward_input<E>(ctx_->exec, mat_of<E>(ws.dinput, N, in_), mat_of<E>(dout, N, out_),
                             mat_of<E>(weights.weight, out_, in_), false);
  });
  return ctx_->tp->sum_rows(ws.dinput, N, ws.scattered);
}

void ColumnParallelLinear::backward_weight(const StoredTensor& dout, const StoredTensor& x_rows,
                                           int N, bool accumulate) const {
  const StoredTensor x = ctx_->tp->gather_rows(x_rows, N, ctx_->ws->gathered);
  if (weight_grad_stream)
    return stream_weight_grad(*ctx_, weight_grad_stream, grads.bias, dout, x, N, out_, in_);
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    linear_backward_weight<E>(ctx_->exec, grad_mat(grads.weight, out_, in_),
                              grad_vec(grads.bias, out_), mat_of<E>(dout, N, out_),
                              mat_of<E>(x, N, in_), accumulate, kBuildShape,
                              ctx_->ws->column_partials);
  });
}

// The partial products are rounded to the storage format before their tp sum, which the
// collective makes in fp32 and rounds: 16-bit activations cross tp in 16 bits, as Megatron's bf16
// collectives do.
StoredTensor RowParallelLinear::forward(const StoredTensor& x, int N) const {
  const StoredTensor& partial = ctx_->ws->partial;
  const bool adds_bias = ctx_->tp->rank() == 0;  // replicated bias: added once per tp group
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    linear_forward<E>(ctx_->exec, mat_of<E>(partial, N, out_), mat_of<E>(x, N, in_),
                      mat_of<E>(weights.weight, out_, in_),
                      adds_bias ? vec_of<E>(weights.bias, out_) : VecOf<E>());
  });
  return ctx_->tp->sum_rows(partial, N, ctx_->ws->scattered);
}

void RowParallelLinear::forward_residual(const StoredTensor& out, const StoredTensor& x,
                                         const StoredTensor& residual, int N) const {
  const TensorParallel& tp = *ctx_->tp;
  if (kernels::fused_residual_add() && tp.size() == 1 && out.format != Precision::kFp32) {
    ctx_->dispatch([&](auto e) {
      using E = decltype(e);
      if constexpr (!kFp32Elements<E>)
        linear_forward_residual<E>(ctx_->exec, mat_of<E>(out, N, out_), mat_of<E>(x, N, in_),
                                   mat_of<E>(weights.weight, out_, in_),
                                   vec_of<E>(weights.bias, out_), mat_of<E>(residual, N, out_));
    });
    return;
  }
  const StoredTensor y = forward(x, N);
  const size_t n = static_cast<size_t>(tp.local_rows(N)) * out_;
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    residual_forward<E>(ctx_->exec, vec_of<E>(out, n), vec_of<E>(residual, n), vec_of<E>(y, n));
  });
}

StoredTensor RowParallelLinear::gather_output_grad(const StoredTensor& dout_rows, int N) const {
  return ctx_->tp->gather_rows(dout_rows, N, ctx_->ws->partial);
}

void RowParallelLinear::backward_input(const StoredTensor& dx, const StoredTensor& dout,
                                       int N) const {
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    linear_backward_input<E>(ctx_->exec, mat_of<E>(dx, N, in_), mat_of<E>(dout, N, out_),
                             mat_of<E>(weights.weight, out_, in_), false);
  });
}

void RowParallelLinear::backward_input_gelu(const StoredTensor& dfc, const StoredTensor& dx,
                                            const StoredTensor& dout, const StoredTensor& fc,
                                            int N) const {
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    linear_backward_input_gelu<E>(ctx_->exec, mat_of<E>(dfc, N, in_), mat_of<E>(dx, N, in_),
                                  mat_of<E>(dout, N, out_), mat_of<E>(weights.weight, out_, in_),
                                  mat_of<E>(fc, N, in_));
  });
}

void RowParallelLinear::backward_weight(const StoredTensor& dout, const StoredTensor& x, int N,
                                        bool accumulate) const {
  if (weight_grad_stream)
    return stream_weight_grad(*ctx_, weight_grad_stream, grads.bias, dout, x, N, out_, in_);
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    linear_backward_weight<E>(ctx_->exec, grad_mat(grads.weight, out_, in_),
                              grad_vec(grads.bias, out_), mat_of<E>(dout, N, out_),
                              mat_of<E>(x, N, in_), accumulate, kBuildShape,
                              ctx_->ws->column_partials);
  });
}

// Whether cuDNN's fused attention runs a call (GPU builds): attention.kernel allows it and cuDNN
// takes the shape in this precision. Under auto, a refusal is said once per process and the
// tiled attention runs; under cudnn it stops the run.
bool Attention::runs_on_cudnn(int B, int T, Precision format, const void* qkv,
                              const void* out) const {
#if defined(KOKKOS_ENABLE_CUDA)
  if (h_.kernel == AttentionKernel::kTiled) return false;
  const std::string refusal =
      cudnn_attention_refusal(ctx_->exec, graph_shape(B, T), format, qkv, out);
  if (refusal.empty()) return true;
  if (h_.kernel == AttentionKernel::kCudnn)
    fatal("attention", __FILE__, __LINE__, "attention.kernel = 'cudnn': " + refusal,
          "set attention.kernel = 'auto' to run the tiled attention where cuDNN cannot");
  static bool said = false;
  if (!said)
    std::fprintf(stderr, "trident: attention.kernel = 'auto' runs the tiled attention: %s\n",
                 refusal.c_str());
  said = true;
  return false;
#else
  (void)B, (void)T, (void)format, (void)qkv, (void)out;
  return false;
#endif
}

AttentionGraphShape Attention::graph_shape(int B, int T) const {
  const int64_t width = h_.width(), C_tp = int64_t(h_.heads) * h_.head_size;
  return {B, T, h_.heads, h_.kv_heads, h_.head_size, width, C_tp, C_tp, width};
}

void Attention::forward(const StoredTensor& out, const View1& lse, const StoredTensor& qkv, int B,
                        int T) const {
  const int N = B * T, C_tp = h_.heads * h_.head_size;
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    const MatOf<E> packed = mat_of<E>(qkv, N, h_.width());
    if (h_.rope)
      rope_rotate<E>(ctx_->exec, packed, T, h_.heads + h_.kv_heads, h_.head_size, ctx_->ws->rope,
                     1.0f, ctx_->split(T));
    if (ctx_->cp)  // the rest of the sequence's keys and values are on the other cp ranks
      return ctx_->cp->forward(ctx_->exec, out, lse, ctx_->ws->attention, qkv, shape(B, T),
                               ctx_->ws->cp_kv, h_.tiles);
    const MatOf<E> o = mat_of<E>(out, N, C_tp);
#if defined(KOKKOS_ENABLE_CUDA)
    if (runs_on_cudnn(B, T, E::format, packed.data(), o.data()))
      return cudnn_attention_forward(ctx_->exec, graph_shape(B, T), E::format, o.data(), lse.data(),
                                     packed.data());
#endif
    attention_forward<E>(ctx_->exec, o, lse, ctx_->ws->attention, packed, shape(B, T), h_.tiles);
  });
}

void Attention::backward(const StoredTensor& dqkv, const StoredTensor& dout,
                         const StoredTensor& qkv, const StoredTensor& out, const View1& lse, int B,
                         int T) const {
  const int N = B * T, C_tp = h_.heads * h_.head_size;
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    const MatOf<E> dpacked = mat_of<E>(dqkv, N, h_.width()), g = mat_of<E>(dout, N, C_tp);
    const MatOf<E> packed = mat_of<E>(qkv, N, h_.width()), o = mat_of<E>(out, N, C_tp);
    bool done = false;
    if (ctx_->cp) {
      ctx_->cp->backward(ctx_->exec, dqkv, ctx_->ws->attention, dout, qkv, out, lse, shape(B, T),
                         ctx_->ws->cp_kv, ctx_->ws->cp_sums, h_.tiles);
      done = true;
    }
#if defined(KOKKOS_ENABLE_CUDA)
    if (!done && runs_on_cudnn(B, T, E::format, packed.data(), o.data())) {
      cudnn_attention_backward(ctx_->exec, graph_shape(B, T), E::format, dpacked.data(), g.data(),
                               packed.data(), o.data(), lse.data());
      done = true;
    }
#endif
    if (!done)
      attention_backward<E>(ctx_->exec, dpacked, ctx_->ws->attention, g, packed, o, lse,
                            shape(B, T), h_.tiles);
    if (h_.rope)  // the rotation's transpose: rotate back by the same angles
      rope_rotate<E>(ctx_->exec, dpacked, T, h_.heads + h_.kv_heads, h_.head_size, ctx_->ws->rope,
                     -1.0f, ctx_->split(T));
  });
}

// Each rank puts its key/value head's gradients in that head's columns of a tensor of every key/
// value head, zero elsewhere; the tp sum leaves every replica's sum in each head's columns.
void Attention::sum_kv_replicas(const StoredTensor& dqkv, int N) const {
  if (h_.replicas == 1) return;
  const StoredTensor& sum = ctx_->ws->kv_sum;
  const int HS = h_.head_size, KV = h_.global_kv_heads, width = 2 * KV * HS;
  const size_t n = static_cast<size_t>(N) * width;
  kernels::zero_stored(ctx_->exec, sum, n);
  const int k_col = h_.heads * HS, v_col = k_col + HS;  // this rank's one key and value head
  const int k_sum = h_.kv_head * HS, v_sum = (KV + h_.kv_head) * HS;
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    copy_columns<E>(ctx_->exec, mat_of<E>(sum, N, width), k_sum, mat_of<E>(dqkv, N, h_.width()),
                    k_col, HS);
    copy_columns<E>(ctx_->exec, mat_of<E>(sum, N, width), v_sum, mat_of<E>(dqkv, N, h_.width()),
                    v_col, HS);
  });
  ctx_->tp->allreduce_sum(sum, n);
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    copy_columns<E>(ctx_->exec, mat_of<E>(dqkv, N, h_.width()), k_col, mat_of<E>(sum, N, width),
                    k_sum, HS);
    copy_columns<E>(ctx_->exec, mat_of<E>(dqkv, N, h_.width()), v_col, mat_of<E>(sum, N, width),
                    v_sum, HS);
  });
}

void MlpActivation::forward(const StoredTensor& out, const StoredTensor& fc, int N) const {
  if (!swiglu_) throw std::logic_error("MlpActivation: GELU runs inside the projections");
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    swiglu_forward<E>(ctx_->exec, mat_of<E>(out, N, F_), mat_of<E>(fc, N, 2 * F_));
  });
}

void MlpActivation::backward(const StoredTensor& dfc, const StoredTensor& dout,
                             const StoredTensor& fc, int N) const {
  if (!swiglu_) throw std::logic_error("MlpActivation: GELU runs inside the projections");
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    swiglu_backward<E>(ctx_->exec, mat_of<E>(dfc, N, 2 * F_), mat_of<E>(dout, N, F_),
                       mat_of<E>(fc, N, 2 * F_));
  });
}

void VocabParallelEmbedding::forward(const StoredTensor& out, const IntView1& tokens, int B,
                                     int T) const {
  TensorParallel& tp = *ctx_->tp;
  const int N = B * T;
  // Every token's partial embedding (this rank's vocabulary slice), summed over tp.
  const StoredTensor embedded = tp.sequence_parallel() ? ctx_->ws->partial : out;
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    const auto table = [&](const StoredTensor& t) { return mat_of<E>(t, t.size() / C_, C_); };
    embedding_forward<E>(ctx_->exec, mat_of<E>(embedded, N, C_), tokens, table(weights.wte),
                         tp.rank() == 0 ? table(weights.wpe) : MatOf<E>(), T, vocab_start_,
                         kernels::kBuildShape, ctx_->split(T));
  });
  tp.sum_rows(embedded, N, out);
}

void VocabParallelEmbedding::backward_weight(const StoredTensor& dout_rows, const IntView1& tokens,
                                             int B, int T) const {
  const int N = B * T;
  const StoredTensor dout = ctx_->tp->gather_rows(dout_rows, N, ctx_->ws->partial);
  const auto table = [&](const StoredTensor& t) { return grad_mat(t, t.size() / C_, C_); };
  if (!wte_grad_stream) {
    ctx_->dispatch([&](auto e) {
      using E = decltype(e);
      embedding_backward<E>(ctx_->exec, table(grads.wte), table(grads.wpe), mat_of<E>(dout, N, C_),
                            tokens, T, vocab_start_, kernels::kBuildShape, ctx_->split(T));
    });
    return;
  }
  // Streamed: the position table as kept, then the token table a block of rows at a time, each
  // block cleared and scatter-added from every token.
  GradSink& sink = *wte_grad_stream.sink;
  const int64_t rows = static_cast<int64_t>(weights.wte.size()) / C_;
  const int64_t block = sink.rows_per_block(C_);
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    if (!grads.wpe.empty())
      embedding_backward<E>(ctx_->exec, Mat(), table(grads.wpe), mat_of<E>(dout, N, C_), tokens, T,
                            vocab_start_, kernels::kBuildShape, ctx_->split(T));
    for (int64_t first = 0; first < rows; first += block) {
      const int64_t n = std::min(block, rows - first);
      const View1 part = window(sink.rows_buffer(), 0, static_cast<size_t>(n * C_));
      Kokkos::deep_copy(ctx_->exec, part, 0.0f);
      embedding_backward<E>(ctx_->exec, Mat(part.data(), n, C_), Mat(), mat_of<E>(dout, N, C_),
                            tokens, T, vocab_start_ + static_cast<int>(first));
      sink.take_rows(wte_grad_stream.param_offset, first, n, C_);
    }
  });
}

void VocabParallelCrossEntropy::forward(const View1& losses, const View1& lse,
                                        const StoredTensor& logits, const IntView1& targets,
                                        int N) const {
  const Exec& exec = ctx_->exec;
  const LayerWorkspace& ws = *ctx_->ws;
  const Vec sums = window(ws.row_sums, 0, N), target_logit = window(ws.row_sums, N, N);
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    cross_entropy_row_max<E>(exec, ws.row_max, mat_of<E>(logits, N, V_), vocab_valid_);
  });
  ctx_->tp->allreduce_max(ws.row_max, N);
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    cross_entropy_row_sums<E>(exec, sums, target_logit, mat_of<E>(logits, N, V_), ws.row_max,
                              targets, vocab_start_, vocab_valid_);
  });
  ctx_->tp->allreduce_sum(ws.row_sums, 2 * static_cast<size_t>(N));
  cross_entropy_losses(exec, losses, lse, ws.row_max, sums, target_logit, targets);
}

void VocabParallelCrossEntropy::forward_backward(const View1& losses, const View1& lse,
                                                 const StoredTensor& logits,
                                                 const IntView1& targets, int N,
                                                 float scale) const {
  if (ctx_->tp->size() != 1 || vocab_start_ != 0)
    throw std::logic_error("the fused classifier needs the whole vocabulary on one rank");
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    cross_entropy_fused<E>(ctx_->exec, mat_of<E>(logits, N, V_), window(losses, 0, N),
                           window(lse, 0, N), targets, vocab_valid_, scale);
  });
}

void VocabParallelCrossEntropy::backward(const StoredTensor& logits, const View1& lse,
                                         const IntView1& targets, int N, float scale) const {
  ctx_->dispatch([&](auto e) {
    using E = decltype(e);
    const MatOf<E> dlogits = mat_of<E>(logits, N, V_);  // the gradient replaces the logits
    cross_entropy_backward<E>(ctx_->exec, dlogits, dlogits, lse, targets, vocab_start_,
                              vocab_valid_, scale);
  });
}

}  // namespace trident
