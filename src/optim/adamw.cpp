// AdamW implementation: the per-tensor update over owned segments, resident or streamed.
#include "optim/adamw.hpp"

#include <algorithm>

#include "kernels/adamw.hpp"

namespace trident {

AdamW::AdamW(const LocalParamTable& table, MemoryLedger& ledger, AdamWSettings s,
             std::vector<Segment> owned, const MomentStorage& storage, kernels::Shape shape)
    : table_(table), settings_(s), owned_(std::move(owned)) {
  if (owned_.empty()) owned_ = zero_shard(table, 1, 0);
  for (const Segment& seg : owned_) count_ += seg.size();
  if (storage.nvme) {
    m_file_ = std::make_unique<FileStore>(storage.path_prefix + ".m", count_);
    v_file_ = std::make_unique<FileStore>(storage.path_prefix + ".v", count_);
  }
  // Streamed moments keep only a bounded buffer resident (and accounted).
  const int64_t resident = storage.nvme ? std::min(count_, storage.buffer_elements) : count_;
  moment_m_ = allocate(ledger, MemCategory::kOptimizer, "adam_m", resident);
  moment_v_ = allocate(ledger, MemCategory::kOptimizer, "adam_v", resident);
  if (storage.params) {
    param_file_ = storage.params;
    param_stream_ = allocate(ledger, MemCategory::kParams, "param_stream", resident);
  }
  if (storage.nvme) {
    m_host_ = host_side(moment_m_, "adam_m_host");
    v_host_ = host_side(moment_v_, "adam_v_host");
    param_host_ = host_side(param_stream_, "param_stream_host");
  }
  // A few bytes a tensor, outside the ledger like SquareSums' slots.
  if (shape == kernels::Shape::kGpu && !storage.nvme && count_ > 0)
    pieces_ = single_launch_pieces();
}

Kokkos::View<kernels::AdamWPiece*, Device> AdamW::single_launch_pieces() const {
  using kernels::AdamWPiece;
  std::vector<AdamWPiece> pieces;
  const auto add = [&](int64_t compact, int64_t flat, int kind) {
    if (!pieces.empty() && pieces.back().kind == kind && kind == AdamWPiece::kPadding) return;
    pieces.push_back({compact, flat, kind});
  };
  for_pieces(0, count_, [&](int64_t flat, int64_t n, int64_t compact) {
    int64_t at = flat;  // the segment's elements before `at` have their piece
    for (const LocalParam& p : table_.params()) {
      const int64_t a = std::max(flat, p.offset), b = std::min(flat + n, p.offset + p.numel);
      if (a >= b) continue;
      if (a > at) add(compact + (at - flat), at, AdamWPiece::kPadding);
      add(compact + (a - flat), a,
          p.spec->weight_decay ? AdamWPiece::kDecays : AdamWPiece::kNoDecay);
      at = b;
    }
    if (at < flat + n) add(compact + (at - flat), at, AdamWPiece::kPadding);
  });
  Kokkos::View<AdamWPiece*, Device> device("adamw_pieces", pieces.size());
  auto host = Kokkos::create_mirror_view(device);
  for (size_t i = 0; i < pieces.size(); ++i) host(i) = pieces[i];
  Kokkos::deep_copy(device, host);
  return device;
}

kernels::AdamWHyper AdamW::hyper(double lr) const {
  return {static_cast<float>(lr),
          static_cast<float>(settings_.beta1),
          static_cast<float>(settings_.beta2),
          static_cast<float>(settings_.eps),
          static_cast<float>(settings_.weight_decay),
          step_};
}

template <class F>
void AdamW::for_streamed_blocks(bool params, F&& f) {
  const int64_t block = static_cast<int64_t>(moment_m_.extent(0));
  for (int64_t lo = 0; lo < count_; lo += block) {
    const int64_t n = std::min(block, count_ - lo);
    const size_t count = static_cast<size_t>(n);
    const auto host = [count](const HostView1& buffer) {
      return Kokkos::subview(buffer, std::make_pair(size_t{0}, count));
    };
    // (file, its buffer, where the buffer meets the file) for each streamed quantity.
    const auto each = [&](auto&& g) {
      g(*m_file_, moment_m_, m_host_);
      g(*v_file_, moment_v_, v_host_);
      if (params) g(*param_file_, param_stream_, param_host_);
    };
    each([&](FileStore& file, const View1& buffer, const HostView1& staging) {
      file.read(lo, n, staging.data());
      Kokkos::deep_copy(window(buffer, 0, count), host(staging));
    });
    f(lo, n);
    exec_.fence();
    each([&](FileStore& file, const View1& buffer, const HostView1& staging) {
      Kokkos::deep_copy(host(staging), window(buffer, 0, count));
      file.write(lo, n, staging.data());
    });
  }
}

template <class F>
void AdamW::for_each_piece(const View1& grads, Placement grads_at, double lr, bool stream_params,
                           F&& update) {
  ++step_;
  const bool compact_grads = grads_at == Placement::kCompact;
  // Owned elements [lo, hi), whose moments sit at [lo - buffer_begin, ...) of the buffers.
  const auto pieces = [&](int64_t lo, int64_t hi, int64_t buffer_begin) {
    for_pieces(lo, hi, [&](int64_t flat, int64_t n, int64_t compact) {
      for (const LocalParam& p : table_.params()) {
        const int64_t a = std::max(flat, p.offset), b = std::min(flat + n, p.offset + p.numel);
        if (a >= b) continue;
        const float decay =
            p.spec->weight_decay ? static_cast<float>(settings_.weight_decay) : 0.0f;
        const kernels::AdamWHyper h{static_cast<float>(lr),
                                    static_cast<float>(settings_.beta1),
                                    static_cast<float>(settings_.beta2),
                                    static_cast<float>(settings_.eps),
                                    decay,
                                    step_};
        const int64_t piece = compact + (a - flat), buffered = piece - buffer_begin;
        const size_t count = static_cast<size_t>(b - a);
        update(h, PieceAt{a, piece, buffered, count, window(moment_m_, buffered, count),
                          window(moment_v_, buffered, count),
                          window(grads, compact_grads ? piece : a, count)});
      }
    });
  };
  if (!streamed()) {
    pieces(0, count_, 0);
    exec_.fence();
    return;
  }
  for_streamed_blocks(stream_params, [&](int64_t lo, int64_t n) { pieces(lo, lo + n, lo); });
}

bool AdamW::read_grad_scale_from(const float* scale) {
  constexpr bool host_reads = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  if (scale && pieces_.extent(0) == 0 && !host_reads) return false;
  grad_scale_at_ = scale;
  return true;
}

float AdamW::scale_now(float grad_scale) const {
  if (!grad_scale_at_) return grad_scale;
  exec_.fence();  // clip_scale has written it
  return *grad_scale_at_;
}

void AdamW::step(const View1& params, Placement params_at, const View1& grads, Placement grads_at,
                 double lr, float grad_scale) {
  const bool compact_params = params_at == Placement::kCompact;
  if (pieces_.extent(0) > 0) {  // one launch (GPU shape, resident moments)
    ++step_;
    const bool compact_grads = grads_at == Placement::kCompact;
    const View1 m = moment_m_, v = moment_v_;
    kernels::adamw_update_pieces(
        exec_, "adamw_update", pieces_, count_, hyper(lr), grad_scale,
        KOKKOS_LAMBDA(int64_t j, int64_t flat, const kernels::AdamWElement& update) {
          float mj = m(j), vj = v(j);
          float& p = params(compact_params ? j : flat);
          p = update(p, mj, vj, grads(compact_grads ? j : flat));
          m(j) = mj;
          v(j) = vj;
        },
        grad_scale_at_);
    exec_.fence();
    return;
  }
  grad_scale = scale_now(grad_scale);
  const bool stream_params = streamed() && param_file_ != nullptr && compact_params;
  for_each_piece(grads, grads_at, lr, stream_params,
                 [&](const kernels::AdamWHyper& h, const PieceAt& at) {
                   const Vec param = stream_params    ? window(param_stream_, at.buffered, at.count)
                                     : compact_params ? window(params, at.compact, at.count)
                                                      : window(params, at.flat, at.count);
                   kernels::adamw_update(exec_, param, at.m, at.v, at.grad, h, grad_scale);
                 });
}

void AdamW::step(const MasterParams& params, const View1& grads, Placement grads_at, double lr,
                 float grad_scale) {
  const RoundedCopy& compute = params.compute;
  const bool compact_copy = compute.at == Placement::kCompact;
  if (pieces_.extent(0) > 0) {  // one launch (GPU shape, resident moments)
    ++step_;
    const bool compact_grads = grads_at == Placement::kCompact;
    const View1 m = moment_m_, v = moment_v_, values = params.values;
    const HalfView1 copy = compute.values, low = params.low;
    const bool bf16 = compute.format == Precision::kBf16;
    kernels::adamw_update_pieces(
        exec_, bf16 ? "adamw_update_split" : "adamw_update_rounded", pieces_, count_, hyper(lr),
        grad_scale,
        KOKKOS_LAMBDA(int64_t j, int64_t flat, const kernels::AdamWElement& update) {
          float mj = m(j), vj = v(j);
          uint16_t& half = copy(compact_copy ? j : flat);
          const float g = grads(compact_grads ? j : flat);
          if (bf16) {
            const float p = update(join_bf16(half, low(j)), mj, vj, g);
            const uint16_t upper = bf16_high(p);
            half = upper;
            low(j) = bf16_low(p, upper);
          } else {
            const float p = update(values(j), mj, vj, g);
            values(j) = p;
            half = to_fp16(p);
          }
          m(j) = mj;
          v(j) = vj;
        },
        grad_scale_at_);
    exec_.fence();
    return;
  }
  grad_scale = scale_now(grad_scale);
  for_each_piece(grads, grads_at, lr, false, [&](const kernels::AdamWHyper& h, const PieceAt& at) {
    const HalfVec copy = window(compute.values, compact_copy ? at.compact : at.flat, at.count);
    if (compute.format == Precision::kBf16)
      kernels::adamw_update_split(exec_, copy, window(params.low, at.compact, at.count), at.m, at.v,
                                  at.grad, h, grad_scale);
    else
      kernels::adamw_update(exec_, window(params.values, at.compact, at.count), at.m, at.v, at.grad,
                            h, grad_scale, copy);
  });
}

void AdamW::transform_moments(
    const std::function<void(int64_t first, const Vec& m, const Vec& v)>& f) {
  if (!streamed()) {
    f(0, window(moment_m_, 0, count_), window(moment_v_, 0, count_));
    exec_.fence();
    return;
  }
  for_streamed_blocks(false, [&](int64_t first, int64_t n) {
    f(first, window(moment_m_, 0, n), window(moment_v_, 0, n));
  });
}

void AdamW::read_moments(const View1& m, const View1& v) const {
  auto m_out = Kokkos::create_mirror_view(m);
  auto v_out = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(m_out, m);
  Kokkos::deep_copy(v_out, v);
  std::vector<float> mb(static_cast<size_t>(count_)), vb(static_cast<size_t>(count_));
  if (streamed()) {
    m_file_->read(0, count_, mb.data());
    v_file_->read(0, count_, vb.data());
  } else {
    auto mh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), moment_m_);
    auto vh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), moment_v_);
    std::copy(mh.data(), mh.data() + count_, mb.begin());
    std::copy(vh.data(), vh.data() + count_, vb.begin());
  }
  for_pieces(0, count_, [&](int64_t flat, int64_t n, int64_t moment) {
    std::copy(mb.begin() + moment, mb.begin() + moment + n, m_out.data() + flat);
    std::copy(vb.begin() + moment, vb.begin() + moment + n, v_out.data() + flat);
  });
  Kokkos::deep_copy(m, m_out);
  Kokkos::deep_copy(v, v_out);
}

void AdamW::write_moments(const View1& m, const View1& v) {
  auto m_in = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m);
  auto v_in = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<float> mb(static_cast<size_t>(count_)), vb(static_cast<size_t>(count_));
  for_pieces(0, count_, [&](int64_t flat, int64_t n, int64_t moment) {
    std::copy(m_in.data() + flat, m_in.data() + flat + n, mb.begin() + moment);
    std::copy(v_in.data() + flat, v_in.data() + flat + n, vb.begin() + moment);
  });
  if (streamed()) {
    m_file_->write(0, count_, mb.data());
    v_file_->write(0, count_, vb.data());
    return;
  }
  auto mh = Kokkos::create_mirror_view(moment_m_);
  auto vh = Kokkos::create_mirror_view(moment_v_);
  std::copy(mb.begin(), mb.end(), mh.data());
  std::copy(vb.begin(), vb.end(), vh.data());
  Kokkos::deep_copy(moment_m_, mh);
  Kokkos::deep_copy(moment_v_, vh);
}

}  // namespace trident
