// The MoE layer's forward and backward: routing kernels, the exchange of rows with the other
// expert-parallel ranks, then one GEMM pair per (sending rank, local expert) block of rows.
#include "model/moe_layer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cast.hpp"
#include "kernels/gelu.hpp"
#include "kernels/linear.hpp"
#include "kernels/moe_permute.hpp"
#include "kernels/residual.hpp"
#include "kernels/swiglu.hpp"
#include "model/tensor_parallel.hpp"

namespace trident {

using namespace kernels;

MoeShape MoeShape::of(const ModelConfig& m, int ep, int ep_rank, int tp, int tp_rank) {
  MoeShape s;
  s.C = m.n_embd;
  s.E = m.moe.n_experts;
  s.k = m.moe.top_k;
  s.Fe = m.expert_hidden();
  s.capacity_factor = m.moe.capacity_factor;
  s.router = m.moe.router;
  s.drop_policy = m.moe.drop_policy;
  s.Fs = m.moe.n_shared_experts * s.Fe;
  s.gelu = !m.llama();
  s.ep = ep;
  s.ep_rank = ep_rank;
  s.tp = tp;
  s.tp_rank = tp_rank;
  return s;
}

int MoeShape::capacity(int T) const {
  if (capacity_factor <= 0) return 0;
  return static_cast<int>(std::ceil(static_cast<double>(T) * k / E * capacity_factor));
}

size_t MoeShape::arrived_rows(size_t n) const {
  const size_t dropless = static_cast<size_t>(ep) * n * static_cast<size_t>(std::min(k, E_local()));
  if (capacity_factor <= 0) return dropless;
  // Each group keeps at most C slots an expert (decided before the exchange), and the ep ranks
  // hold at most ep groups: a tp rank's share of a group is part of its group's C.
  const size_t kept = static_cast<size_t>(ep) * static_cast<size_t>(E_local()) *
                      static_cast<size_t>(capacity(static_cast<int>(n) * tp));
  return std::min(dropless, kept);
}

MoeLayer::MoeLayer(const LayerContext* ctx, const MoeShape& shape) : ctx_(ctx), shape_(shape) {
  if (shape.E < 1 || shape.k < 1 || shape.k > shape.E)
    throw std::logic_error("MoeLayer: top_k must be between 1 and the number of experts");
  if (shape.ep < 1 || shape.E % shape.ep != 0 ||
      (shape.ep > 1 && (!ctx->ep || ctx->ep->size() != shape.ep)))
    throw std::logic_error("MoeLayer: ep must divide the experts, and ep > 1 needs its group");
  // Ranks that split the tokens are the tensor-parallel ones under sequence parallelism.
  if (shape.tp > 1 && (!ctx->tp || !ctx->tp->sequence_parallel() || ctx->tp->size() != shape.tp ||
                       ctx->tp->rank() != shape.tp_rank))
    throw std::logic_error("MoeLayer: tp > 1 needs the tensor-parallel group, sequence parallel");
}

ConstIntMat MoeLayer::rows_here(const MoeActivations& a, int N) const {
  const int n = shape_.local_tokens(N);
  return ConstIntMat(shape_.tp > 1 ? a.local_row.data() : a.row.data(), n, shape_.k);
}

ConstMat MoeLayer::weights_here(const MoeActivations& a, int N) const {
  const int n = shape_.local_tokens(N);
  return ConstMat(a.weight.data() + static_cast<size_t>(shape_.tp_rank) * n * shape_.k, n,
                  shape_.k);
}

ConstMat MoeLayer::input32(const StoredTensor& x, int N, const MoeScratch& s) const {
  const size_t n = static_cast<size_t>(N) * shape_.C;
  if (x.format == Precision::kFp32) return ConstMat(x.f32.data(), N, shape_.C);
  load_half(ctx_->exec, window(s.x32, 0, n), x.f16, 0, n, x.format);
  return ConstMat(s.x32.data(), N, shape_.C);
}

ConstMat MoeLayer::router32(const MoeScratch& s) const {
  const StoredTensor& w = weights.router;
  const size_t n = static_cast<size_t>(shape_.E) * shape_.C;
  if (w.format == Precision::kFp32) return ConstMat(w.f32.data(), shape_.E, shape_.C);
  load_half(ctx_->exec, window(s.router32, 0, n), w.f16, 0, n, w.format);
  return ConstMat(s.router32.data(), shape_.E, shape_.C);
}

// Where this rank's experts' rows lie in the arrived buffers: one block per (sending rank, local
// expert), in that order (one per expert with ep = 1), and how many rows go to and come from
// each rank of the expert-parallel group.
struct MoeLayer::Routed {
  struct Block {
    int expert = 0, first = 0, rows = 0;  // local expert, its first row, its rows
  };
  std::vector<Block> blocks;
  std::vector<int> send_rows, recv_rows;  // per rank of the group (ep > 1)
};

namespace {

std::vector<int> to_host(const IntView1& v) {
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<int>(host.data(), host.data() + host.extent(0));
}

// Rows [first, first + rows) of a [*, cols] tensor, and expert e's [rows, cols] matrix of a
// stacked [E, rows, cols] one.
StoredTensor rows_of(const StoredTensor& t, int first, int rows, int cols) {
  return t.window(static_cast<size_t>(first) * cols, static_cast<size_t>(rows) * cols);
}
StoredTensor expert_of(const StoredTensor& t, int e, int rows, int cols) {
  return rows_of(t, e * rows, rows, cols);
}

// A weight gradient of `rows` x `cols` that this rank's tokens give a share of: compute(target,
// accumulate) writes it into `grad` directly when one rank holds every token; with tp > 1 into
// `share`, which is summed over tp and then added to `grad` (or copied, without accumulate).
template <class F>
void tp_summed_grad(const LayerContext& ctx, int tp, const StoredTensor& grad, int rows, int cols,
                    const View1& share, bool accumulate, F&& compute) {
  if (tp == 1) {
    compute(mat_of<Fp32Elements>(grad, rows, cols), accumulate);
    return;
  }
  const size_t n = static_cast<size_t>(rows) * cols;
  compute(Mat(share.data(), rows, cols), false);
  ctx.tp->allreduce_sum(share, n);
  const Vec g(grad.f32.data(), n);
  if (accumulate)
    residual_forward(ctx.exec, g, g, window(share, 0, n));
  else
    Kokkos::deep_copy(ctx.exec, g, window(share, 0, n));
}

// The same for a bias of `width` (none: nothing): the column sums of dout.
template <class El>
void tp_summed_bias_grad(const LayerContext& ctx, int tp, const StoredTensor& grad, int width,
                         const View1& share, bool accumulate, const ConstMatOf<El>& dout) {
  if (grad.empty()) return;
  tp_summed_grad(ctx, tp, grad, 1, width, share, accumulate, [&](const Mat& db, bool add) {
    if (!add) Kokkos::deep_copy(ctx.exec, Vec(db.data(), width), 0.0f);
    linear_backward_weight<El>(ctx.exec, Mat(), Vec(db.data(), width), dout, ConstMatOf<El>());
  });
}

// Expert e's bias of `width` in a stacked [E, width] one (empty for Llama's experts).
StoredTensor bias_of(const StoredTensor& t, int e, int width) {
  return t.empty() ? StoredTensor{} : rows_of(t, e, 1, width);
}

// A matrix's elements as one vector (its rows are contiguous).
template <class El>
VecOf<El> flat(const MatOf<El>& m) {
  return VecOf<El>(m.data(), m.extent(0) * m.extent(1));
}

// act [rows, F] from an MLP's first projection fc [rows, width(F)]: SwiGLU of gate | up, or GELU;
// and back.
template <class El>
void activate(const Exec& exec, bool gelu, const MatOf<El>& act, const MatOf<El>& fc) {
  if (gelu)
    gelu_forward<El>(exec, flat<El>(act), flat<El>(fc));
  else
    swiglu_forward<El>(exec, act, fc);
}
template <class El>
void activate_backward(const Exec& exec, bool gelu, const MatOf<El>& dfc, const MatOf<El>& dact,
                       const MatOf<El>& fc) {
  if (gelu)
    gelu_backward<El>(exec, flat<El>(dfc), flat<El>(fc), flat<El>(dact));
  else
    swiglu_backward<El>(exec, dfc, dact, fc);
}

// A linear layer's weight gradient dw and, given a bias, its bias gradient from dout and inp:
// added to them, or written over them without `accumulate` (the bias kernels only add).
template <class El>
void weight_grads(const Exec& exec, const Mat& dw, const StoredTensor& dbias, int width,
                  const ConstMatOf<El>& dout, const ConstMatOf<El>& inp, bool accumulate) {
  if (!accumulate && !dbias.empty()) zero_stored(exec, dbias, static_cast<size_t>(width));
  linear_backward_weight<El>(exec, dw, vec_of<Fp32Elements>(dbias, width), dout, inp, accumulate);
}

// f(block) for every block holding rows.
template <class Routed, class F>
void each_block(const Routed& r, F&& f) {
  for (const auto& b : r.blocks)
    if (b.rows > 0) f(b);
}

// Weight gradients block by block: f(block, accumulate) with `accumulate` for an expert's first
// block and true for its later ones (several ranks send it rows), and clear(e) for an expert that
// got no row when the step's first write must still overwrite its gradient.
template <class Routed, class F, class Clear>
void each_block_grad(const Routed& r, int experts, bool accumulate, F&& f, Clear&& clear) {
  std::vector<char> written(static_cast<size_t>(experts), 0);
  each_block(r, [&](const auto& b) {
    f(b, accumulate || written[b.expert]);
    written[b.expert] = 1;
  });
  if (accumulate) return;
  for (int e = 0; e < experts; ++e)
    if (!written[e]) clear(e);
}

}  // namespace

MoeLayer::Routed MoeLayer::routed(const MoeActivations& a, bool exchange) const {
  const int El = shape_.E_local(), ep = shape_.ep;
  const std::vector<int> offsets = to_host(a.offsets);
  Routed r;
  if (ep == 1) {
    for (int e = 0; e < El; ++e) r.blocks.push_back({e, offsets[e], offsets[e + 1] - offsets[e]});
    return r;
  }
  std::vector<int> arriving;
  if (exchange) {
    std::vector<int> sending(static_cast<size_t>(shape_.E));
    for (int e = 0; e < shape_.E; ++e) sending[e] = offsets[e + 1] - offsets[e];
    arriving = ctx_->ep->exchange_counts(sending);
    const auto kept = Kokkos::create_mirror_view(a.arrivals);
    for (size_t i = 0; i < arriving.size(); ++i) kept(i) = arriving[i];
    Kokkos::deep_copy(a.arrivals, kept);
  } else {
    arriving = to_host(a.arrivals);
  }
  r.send_rows.assign(ep, 0);
  r.recv_rows.assign(ep, 0);
  int first = 0;
  for (int q = 0; q < ep; ++q) {
    r.send_rows[q] = offsets[(q + 1) * El] - offsets[q * El];
    for (int e = 0; e < El; ++e) {
      const int rows = arriving[static_cast<size_t>(q) * El + e];
      r.blocks.push_back({e, first, rows});
      r.recv_rows[q] += rows;
      first += rows;
    }
  }
  // The buffers hold MoeShape::arrived_rows, which no routing exceeds; a count past it is a bug.
  if (static_cast<size_t>(first) * shape_.C > a.arrived.size())
    throw std::logic_error("MoeLayer: more rows arrived than the buffers reserve");
  return r;
}

void MoeLayer::forward(const StoredTensor& out, const StoredTensor& x, int N,
                       const MoeActivations& a, const MoeScratch& s) const {
  forward_first(x, N, a, s);
  forward_second(out, {}, N, a, s);
}

void MoeLayer::backward(const StoredTensor& dx, const StoredTensor& dout, const StoredTensor& x,
                        int N, const MoeActivations& a, const MoeScratch& s,
                        RouterLossScales scales, bool accumulate) const {
  backward_second(dout, N, a, s, accumulate);
  backward_first(dx, x, N, a, s, scales, accumulate);
}

void MoeLayer::forward_first(const StoredTensor& x, int N, const MoeActivations& a,
                             const MoeScratch& s) const {
  const Exec& exec = ctx_->exec;
  const int C = shape_.C, E = shape_.E, k = shape_.k, Fe = shape_.Fe;
  const int n = shape_.local_tokens(N), tp = shape_.tp;
  const Mat logits(a.logits.data(), N, E), scores(a.scores.data(), N, E);
  const IntMat choice(a.choice.data(), N, k), row(a.row.data(), N, k);
  // The group's logits: this rank's tokens', and with tp > 1 every rank's gathered, so that
  // routing, capacity and the balancing losses decide over the group whatever the split.
  if (tp == 1) {
    linear_forward<Fp32Elements>(exec, logits, input32(x, n, s), router32(s), ConstVec());
  } else {
    linear_forward<Fp32Elements>(exec, Mat(s.dlogits.data(), n, E), input32(x, n, s), router32(s),
                                 ConstVec());
    ctx_->tp->gather_f32(s.dlogits, a.logits, static_cast<size_t>(n) * E);
  }
  router_scores(exec, scores, logits, shape_.router);
  router_top_k(exec, choice, Mat(a.weight.data(), N, k), scores, selection_bias);
  const RoutingShape routing{N, E, k, shape_.capacity(N)};
  const DispatchScratch plan{IntVec(s.listed.data(), N * k), IntVec(s.listed_offsets.data(), E + 1),
                             IntVec(s.kept.data(), N * k)};
  router_dispatch_plan(exec, row, IntVec(a.counts.data(), E),
                       IntVec((tp > 1 ? s.group_offsets : a.offsets).data(), E + 1), plan, choice,
                       scores, routing, shape_.drop_policy);
  if (tp > 1)
    router_local_plan(exec, IntMat(a.local_row.data(), n, k), IntVec(a.offsets.data(), E + 1), row,
                      choice, shape_.tp_rank * n);
  ctx_->dispatch([&](auto el) {
    using El = decltype(el);
    moe_dispatch_rows<El>(exec, mat_of<El>(a.dispatched, n * k, C), mat_of<El>(x, n, C),
                          rows_here(a, N));
  });
  if (shape_.Fs > 0) {  // the shared experts' first projection, on every token
    const int Fs = shape_.Fs, Ws = shape_.width(Fs);
    ctx_->dispatch([&](auto el) {
      using El = decltype(el);
      const auto fc = mat_of<El>(a.shared_fc, n, Ws);
      linear_forward<El>(exec, fc, mat_of<El>(x, n, C), mat_of<El>(weights.shared_fc, Ws, C),
                         vec_of<El>(weights.shared_fc_bias, Fs));
      activate<El>(exec, shape_.gelu, mat_of<El>(a.shared_act, n, Fs), fc);
    });
  }
  const Routed r = routed(a, true);
  if (shape_.ep > 1) ctx_->ep->exchange_rows(a.dispatched, r.send_rows, a.arrived, r.recv_rows, C);
  const StoredTensor& arrived = shape_.ep > 1 ? a.arrived : a.dispatched;
  each_block(r, [&](const Routed::Block& b) {
    ctx_->dispatch([&](auto el) {
      using El = decltype(el);
      const int W = shape_.width(Fe);
      const auto fc = mat_of<El>(rows_of(a.fc, b.first, b.rows, W), b.rows, W);
      linear_forward<El>(exec, fc, mat_of<El>(rows_of(arrived, b.first, b.rows, C), b.rows, C),
                         mat_of<El>(expert_of(weights.fc, b.expert, W, C), W, C),
                         vec_of<El>(bias_of(weights.fc_bias, b.expert, Fe), Fe));
      activate<El>(exec, shape_.gelu, mat_of<El>(rows_of(a.act, b.first, b.rows, Fe), b.rows, Fe),
                   fc);
    });
  });
}

void MoeLayer::forward_second(const StoredTensor& out, const StoredTensor& residual, int N,
                              const MoeActivations& a, const MoeScratch& s) const {
  expert_outputs(a, s);
  const int C = shape_.C, k = shape_.k, Fs = shape_.Fs, n = shape_.local_tokens(N);
  ctx_->dispatch([&](auto el) {
    using El = decltype(el);
    if (Fs > 0)
      linear_forward<El>(ctx_->exec, mat_of<El>(s.shared_out, n, C),
                         mat_of<El>(a.shared_act, n, Fs), mat_of<El>(weights.shared_proj, C, Fs),
                         vec_of<El>(weights.shared_proj_bias, C));
    moe_combine<El>(ctx_->exec, mat_of<El>(out, n, C), mat_of<El>(a.expert_out, n * k, C),
                    rows_here(a, N), weights_here(a, N), mat_of<El>(residual, n, C),
                    mat_of<El>(s.shared_out, n, C));
  });
}

void MoeLayer::expert_outputs(const MoeActivations& a, const MoeScratch& s) const {
  const Exec& exec = ctx_->exec;
  const int C = shape_.C, Fe = shape_.Fe;
  const Routed r = routed(a, false);
  const StoredTensor& outputs = shape_.ep > 1 ? s.exchanged : a.expert_out;
  each_block(r, [&](const Routed::Block& b) {
    ctx_->dispatch([&](auto el) {
      using El = decltype(el);
      linear_forward<El>(exec, mat_of<El>(rows_of(outputs, b.first, b.rows, C), b.rows, C),
                         mat_of<El>(rows_of(a.act, b.first, b.rows, Fe), b.rows, Fe),
                         mat_of<El>(expert_of(weights.proj, b.expert, C, Fe), C, Fe),
                         vec_of<El>(bias_of(weights.proj_bias, b.expert, C), C));
    });
  });
  if (shape_.ep > 1) ctx_->ep->exchange_rows(outputs, r.recv_rows, a.expert_out, r.send_rows, C);
}

void MoeLayer::backward_second(const StoredTensor& dout, int N, const MoeActivations& a,
                               const MoeScratch& s, bool accumulate) const {
  const Exec& exec = ctx_->exec;
  const int C = shape_.C, k = shape_.k, Fe = shape_.Fe, n = shape_.local_tokens(N);
  ctx_->dispatch([&](auto el) {
    using El = decltype(el);
    moe_combine_backward<El>(exec, mat_of<El>(s.dexpert_out, n * k, C), Mat(s.dweight.data(), n, k),
                             mat_of<El>(dout, n, C), mat_of<El>(a.expert_out, n * k, C),
                             rows_here(a, N), weights_here(a, N));
  });
  if (shape_.Fs > 0) {  // the shared experts' second projection
    const int Fs = shape_.Fs;
    ctx_->dispatch([&](auto el) {
      using El = decltype(el);
      linear_backward_input<El>(exec, mat_of<El>(s.dshared_act, n, Fs), mat_of<El>(dout, n, C),
                                mat_of<El>(weights.shared_proj, C, Fs), false);
      const auto dy = mat_of<El>(dout, n, C);
      tp_summed_grad(*ctx_, shape_.tp, grads.shared_proj, C, Fs, s.grad_share, accumulate,
                     [&](const Mat& dw, bool add) {
                       linear_backward_weight<El>(exec, dw, Vec(), dy,
                                                  mat_of<El>(a.shared_act, n, Fs), add);
                     });
      tp_summed_bias_grad<El>(*ctx_, shape_.tp, grads.shared_proj_bias, C, s.grad_share, accumulate,
                              dy);
    });
  }
  const Routed r = routed(a, false);
  const StoredTensor& doutputs = shape_.ep > 1 ? s.exchanged : s.dexpert_out;
  if (shape_.ep > 1) ctx_->ep->exchange_rows(s.dexpert_out, r.send_rows, doutputs, r.recv_rows, C);
  each_block_grad(
      r, shape_.E_local(), accumulate,
      [&](const Routed::Block& b, bool add) {
        ctx_->dispatch([&](auto el) {
          using El = decltype(el);
          const auto dy = mat_of<El>(rows_of(doutputs, b.first, b.rows, C), b.rows, C);
          linear_backward_input<El>(
              exec, mat_of<El>(rows_of(s.dact, b.first, b.rows, Fe), b.rows, Fe), dy,
              mat_of<El>(expert_of(weights.proj, b.expert, C, Fe), C, Fe), false);
          weight_grads<El>(exec,
                           mat_of<Fp32Elements>(expert_of(grads.proj, b.expert, C, Fe), C, Fe),
                           bias_of(grads.proj_bias, b.expert, C), C, dy,
                           mat_of<El>(rows_of(a.act, b.first, b.rows, Fe), b.rows, Fe), add);
        });
      },
      [&](int e) {
        const StoredTensor dw = expert_of(grads.proj, e, C, Fe);
        zero_stored(exec, dw, dw.size());
        if (!grads.proj_bias.empty()) zero_stored(exec, bias_of(grads.proj_bias, e, C), C);
      });
}

void MoeLayer::backward_first(const StoredTensor& dx, const StoredTensor& x, int N,
                              const MoeActivations& a, const MoeScratch& s, RouterLossScales scales,
                              bool accumulate) const {
  const Exec& exec = ctx_->exec;
  const int C = shape_.C, E = shape_.E, k = shape_.k, Fe = shape_.Fe, W = shape_.width(Fe);
  const int n = shape_.local_tokens(N), first = shape_.tp_rank * n;
  const Routed r = routed(a, false);
  const StoredTensor& arrived = shape_.ep > 1 ? a.arrived : a.dispatched;
  const StoredTensor& dinputs = shape_.ep > 1 ? s.exchanged : s.ddispatched;
  each_block_grad(
      r, shape_.E_local(), accumulate,
      [&](const Routed::Block& b, bool add) {
        ctx_->dispatch([&](auto el) {
          using El = decltype(el);
          const auto dfc = mat_of<El>(rows_of(s.dfc, b.first, b.rows, W), b.rows, W);
          activate_backward<El>(exec, shape_.gelu, dfc,
                                mat_of<El>(rows_of(s.dact, b.first, b.rows, Fe), b.rows, Fe),
                                mat_of<El>(rows_of(a.fc, b.first, b.rows, W), b.rows, W));
          linear_backward_input<El>(
              exec, mat_of<El>(rows_of(dinputs, b.first, b.rows, C), b.rows, C), dfc,
              mat_of<El>(expert_of(weights.fc, b.expert, W, C), W, C), false);
          weight_grads<El>(exec, mat_of<Fp32Elements>(expert_of(grads.fc, b.expert, W, C), W, C),
                           bias_of(grads.fc_bias, b.expert, Fe), Fe, dfc,
                           mat_of<El>(rows_of(arrived, b.first, b.rows, C), b.rows, C), add);
        });
      },
      [&](int e) {
        const StoredTensor dw = expert_of(grads.fc, e, W, C);
        zero_stored(exec, dw, dw.size());
        if (!grads.fc_bias.empty()) zero_stored(exec, bias_of(grads.fc_bias, e, Fe), Fe);
      });
  if (shape_.ep > 1) ctx_->ep->exchange_rows(dinputs, r.recv_rows, s.ddispatched, r.send_rows, C);
  // The router's backward over this rank's tokens (rows [first, first + n) of the group's).
  const auto group_rows = [&](const View1& v, int width) {
    return ConstMat(v.data() + static_cast<size_t>(first) * width, n, width);
  };
  const Mat dlogits(s.dlogits.data(), n, E);
  const ConstMat x32 = input32(x, n, s), w32 = router32(s);
  router_backward(exec, dlogits, ConstMat(s.dweight.data(), n, k), group_rows(a.scores, E),
                  group_rows(a.logits, E),
                  ConstIntMat(a.choice.data() + static_cast<size_t>(first) * k, n, k),
                  weights_here(a, N), ConstIntVec(a.counts.data(), E), shape_.router, scales, N);
  const Mat dx_router(s.dx_router.data(), n, C);
  linear_backward_input<Fp32Elements>(exec, dx_router, dlogits, w32, false);
  ctx_->dispatch([&](auto el) {
    using El = decltype(el);
    moe_dispatch_rows_backward<El>(exec, mat_of<El>(dx, n, C), mat_of<El>(s.ddispatched, n * k, C),
                                   rows_here(a, N), dx_router);
    if (shape_.Fs > 0) {  // the shared experts' first projection adds its input gradient
      const int Fs = shape_.Fs, Ws = shape_.width(Fs);
      const auto dfc = mat_of<El>(s.dshared_fc, n, Ws);
      activate_backward<El>(exec, shape_.gelu, dfc, mat_of<El>(s.dshared_act, n, Fs),
                            mat_of<El>(a.shared_fc, n, Ws));
      linear_backward_input<El>(exec, mat_of<El>(dx, n, C), dfc,
                                mat_of<El>(weights.shared_fc, Ws, C), true);
      tp_summed_grad(*ctx_, shape_.tp, grads.shared_fc, Ws, C, s.grad_share, accumulate,
                     [&](const Mat& dw, bool add) {
                       linear_backward_weight<El>(exec, dw, Vec(), dfc, mat_of<El>(x, n, C), add);
                     });
      tp_summed_bias_grad<El>(*ctx_, shape_.tp, grads.shared_fc_bias, Fs, s.grad_share, accumulate,
                              dfc);
    }
  });
  tp_summed_grad(*ctx_, shape_.tp, grads.router, E, C, s.grad_share, accumulate,
                 [&](const Mat& dw, bool add) {
                   linear_backward_weight<Fp32Elements>(exec, dw, Vec(), dlogits, x32, add);
                 });
}

void MoeLayer::losses(const Vec& out, int N, const MoeActivations& a, const MoeScratch& s) const {
  const int E = shape_.E;
  router_losses(ctx_->exec, out, Vec(s.expert_mass.data(), E), ConstMat(a.scores.data(), N, E),
                ConstMat(a.logits.data(), N, E), ConstIntVec(a.counts.data(), E), shape_.router,
                shape_.k);
}

}  // namespace trident
