// The MoE layer's forward and backward: routing kernels, then one GEMM pair per expert over its
// contiguous rows of the expert-ordered buffer.
#include "model/moe_layer.hpp"

#include <cmath>
#include <stdexcept>

#include "kernels/cast.hpp"
#include "kernels/linear.hpp"
#include "kernels/moe_permute.hpp"
#include "kernels/swiglu.hpp"

namespace trident {

using namespace kernels;

MoeShape MoeShape::of(const ModelConfig& m) {
  MoeShape s;
  s.C = m.n_embd;
  s.E = m.moe.n_experts;
  s.k = m.moe.top_k;
  s.Fe = m.expert_hidden();
  s.capacity_factor = m.moe.capacity_factor;
  s.router = m.moe.router;
  s.drop_policy = m.moe.drop_policy;
  return s;
}

int MoeShape::capacity(int T) const {
  if (capacity_factor <= 0) return 0;
  return static_cast<int>(std::ceil(static_cast<double>(T) * k / E * capacity_factor));
}

MoeLayer::MoeLayer(const LayerContext* ctx, const MoeShape& shape) : ctx_(ctx), shape_(shape) {
  if (shape.E < 1 || shape.k < 1 || shape.k > shape.E)
    throw std::logic_error("MoeLayer: top_k must be between 1 and the number of experts");
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

namespace {

// Expert e's rows [offsets[e], offsets[e + 1]) of the expert-ordered buffers, on the host.
std::vector<int> host_offsets(const IntView1& offsets) {
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), offsets);
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

}  // namespace

void MoeLayer::forward(const StoredTensor& out, const StoredTensor& x, int N,
                       const MoeActivations& a, const MoeScratch& s) const {
  forward_first(x, N, a, s);
  forward_second(out, {}, N, a);
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
  const Mat logits(a.logits.data(), N, E), scores(a.scores.data(), N, E);
  const IntMat choice(a.choice.data(), N, k), row(a.row.data(), N, k);
  linear_forward<Fp32Elements>(exec, logits, input32(x, N, s), router32(s), ConstVec());
  router_scores(exec, scores, logits, shape_.router);
  router_top_k(exec, choice, Mat(a.weight.data(), N, k), scores, ConstVec());
  const RoutingShape routing{N, E, k, shape_.capacity(N)};
  const DispatchScratch plan{IntVec(s.listed.data(), N * k), IntVec(s.listed_offsets.data(), E + 1),
                             IntVec(s.kept.data(), N * k)};
  router_dispatch_plan(exec, row, IntVec(a.counts.data(), E), IntVec(a.offsets.data(), E + 1), plan,
                       choice, scores, routing, shape_.drop_policy);
  ctx_->dispatch([&](auto el) {
    using El = decltype(el);
    moe_dispatch_rows<El>(exec, mat_of<El>(a.dispatched, N * k, C), mat_of<El>(x, N, C), row);
  });
  const std::vector<int> offsets = host_offsets(a.offsets);
  for (int e = 0; e < E; ++e) {
    const int first = offsets[e], rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    ctx_->dispatch([&](auto el) {
      using El = decltype(el);
      const auto fc = mat_of<El>(rows_of(a.fc, first, rows, 2 * Fe), rows, 2 * Fe);
      linear_forward<El>(exec, fc, mat_of<El>(rows_of(a.dispatched, first, rows, C), rows, C),
                         mat_of<El>(expert_of(weights.fc, e, 2 * Fe, C), 2 * Fe, C),
                         ConstVecOf<El>());
      swiglu_forward<El>(exec, mat_of<El>(rows_of(a.act, first, rows, Fe), rows, Fe), fc);
    });
  }
}

void MoeLayer::forward_second(const StoredTensor& out, const StoredTensor& residual, int N,
                              const MoeActivations& a) const {
  expert_outputs(a);
  const int C = shape_.C, k = shape_.k;
  ctx_->dispatch([&](auto el) {
    using El = decltype(el);
    moe_combine<El>(ctx_->exec, mat_of<El>(out, N, C), mat_of<El>(a.expert_out, N * k, C),
                    ConstIntMat(a.row.data(), N, k), ConstMat(a.weight.data(), N, k),
                    mat_of<El>(residual, N, C));
  });
}

void MoeLayer::expert_outputs(const MoeActivations& a) const {
  const Exec& exec = ctx_->exec;
  const int C = shape_.C, E = shape_.E, Fe = shape_.Fe;
  const std::vector<int> offsets = host_offsets(a.offsets);
  for (int e = 0; e < E; ++e) {
    const int first = offsets[e], rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    ctx_->dispatch([&](auto el) {
      using El = decltype(el);
      linear_forward<El>(exec, mat_of<El>(rows_of(a.expert_out, first, rows, C), rows, C),
                         mat_of<El>(rows_of(a.act, first, rows, Fe), rows, Fe),
                         mat_of<El>(expert_of(weights.proj, e, C, Fe), C, Fe), ConstVecOf<El>());
    });
  }
}

void MoeLayer::backward_second(const StoredTensor& dout, int N, const MoeActivations& a,
                               const MoeScratch& s, bool accumulate) const {
  const Exec& exec = ctx_->exec;
  const int C = shape_.C, E = shape_.E, k = shape_.k, Fe = shape_.Fe;
  ctx_->dispatch([&](auto el) {
    using El = decltype(el);
    moe_combine_backward<El>(exec, mat_of<El>(s.dexpert_out, N * k, C), Mat(s.dweight.data(), N, k),
                             mat_of<El>(dout, N, C), mat_of<El>(a.expert_out, N * k, C),
                             ConstIntMat(a.row.data(), N, k), ConstMat(a.weight.data(), N, k));
  });
  const std::vector<int> offsets = host_offsets(a.offsets);
  for (int e = 0; e < E; ++e) {
    const int first = offsets[e], rows = offsets[e + 1] - offsets[e];
    const StoredTensor dproj_w = expert_of(grads.proj, e, C, Fe);
    if (rows == 0) {  // no token: no gradient, but the step's first write still clears it
      if (!accumulate) zero_stored(exec, dproj_w, dproj_w.size());
      continue;
    }
    ctx_->dispatch([&](auto el) {
      using El = decltype(el);
      const auto dy = mat_of<El>(rows_of(s.dexpert_out, first, rows, C), rows, C);
      linear_backward_input<El>(exec, mat_of<El>(rows_of(s.dact, first, rows, Fe), rows, Fe), dy,
                                mat_of<El>(expert_of(weights.proj, e, C, Fe), C, Fe), false);
      linear_backward_weight<El>(exec, mat_of<Fp32Elements>(dproj_w, C, Fe), Vec(), dy,
                                 mat_of<El>(rows_of(a.act, first, rows, Fe), rows, Fe), accumulate);
    });
  }
}

void MoeLayer::backward_first(const StoredTensor& dx, const StoredTensor& x, int N,
                              const MoeActivations& a, const MoeScratch& s, RouterLossScales scales,
                              bool accumulate) const {
  const Exec& exec = ctx_->exec;
  const int C = shape_.C, E = shape_.E, k = shape_.k, Fe = shape_.Fe;
  const std::vector<int> offsets = host_offsets(a.offsets);
  for (int e = 0; e < E; ++e) {
    const int first = offsets[e], rows = offsets[e + 1] - offsets[e];
    const StoredTensor dfc_w = expert_of(grads.fc, e, 2 * Fe, C);
    if (rows == 0) {
      if (!accumulate) zero_stored(exec, dfc_w, dfc_w.size());
      continue;
    }
    ctx_->dispatch([&](auto el) {
      using El = decltype(el);
      const auto dfc = mat_of<El>(rows_of(s.dfc, first, rows, 2 * Fe), rows, 2 * Fe);
      swiglu_backward<El>(exec, dfc, mat_of<El>(rows_of(s.dact, first, rows, Fe), rows, Fe),
                          mat_of<El>(rows_of(a.fc, first, rows, 2 * Fe), rows, 2 * Fe));
      linear_backward_input<El>(exec, mat_of<El>(rows_of(s.ddispatched, first, rows, C), rows, C),
                                dfc, mat_of<El>(expert_of(weights.fc, e, 2 * Fe, C), 2 * Fe, C),
                                false);
      linear_backward_weight<El>(exec, mat_of<Fp32Elements>(dfc_w, 2 * Fe, C), Vec(), dfc,
                                 mat_of<El>(rows_of(a.dispatched, first, rows, C), rows, C),
                                 accumulate);
    });
  }
  const Mat dlogits(s.dlogits.data(), N, E);
  const ConstMat x32 = input32(x, N, s), w32 = router32(s);
  router_backward(exec, dlogits, ConstMat(s.dweight.data(), N, k), ConstMat(a.scores.data(), N, E),
                  ConstMat(a.logits.data(), N, E), ConstIntMat(a.choice.data(), N, k),
                  ConstMat(a.weight.data(), N, k), ConstIntVec(a.counts.data(), E), shape_.router,
                  scales);
  const Mat dx_router(s.dx_router.data(), N, C);
  linear_backward_input<Fp32Elements>(exec, dx_router, dlogits, w32, false);
  ctx_->dispatch([&](auto el) {
    using El = decltype(el);
    moe_dispatch_rows_backward<El>(exec, mat_of<El>(dx, N, C), mat_of<El>(s.ddispatched, N * k, C),
                                   ConstIntMat(a.row.data(), N, k), dx_router);
  });
  linear_backward_weight<Fp32Elements>(exec, mat_of<Fp32Elements>(grads.router, E, C), Vec(),
                                       dlogits, x32, accumulate);
}

void MoeLayer::losses(const Vec& out, int N, const MoeActivations& a, const MoeScratch& s) const {
  const int E = shape_.E;
  router_losses(ctx_->exec, out, Vec(s.expert_mass.data(), E), ConstMat(a.scores.data(), N, E),
                ConstMat(a.logits.data(), N, E), ConstIntVec(a.counts.data(), E), shape_.router,
                shape_.k);
}

}  // namespace trident
