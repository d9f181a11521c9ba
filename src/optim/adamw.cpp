// AdamW implementation: the per-tensor update over owned segments, resident or streamed.
#include "optim/adamw.hpp"

#include <algorithm>

#include "kernels/adamw.hpp"

namespace trident {

AdamW::AdamW(const LocalParamTable& table, MemoryLedger& ledger, AdamWSettings s,
             std::vector<Segment> owned, const MomentStorage& storage)
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
}

void AdamW::update(const View1& params, const View1& grads, double lr, float grad_scale, int64_t lo,
                   int64_t hi, const View1& m, const View1& v, int64_t base, int64_t grad_base,
                   int64_t param_base, const RoundedCopy* rounded, int64_t rounded_base) {
  for (const LocalParam& p : table_.params()) {
    const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel);
    if (a >= b) continue;
    const float decay = p.spec->weight_decay ? static_cast<float>(settings_.weight_decay) : 0.0f;
    const kernels::AdamWHyper h{static_cast<float>(lr),
                                static_cast<float>(settings_.beta1),
                                static_cast<float>(settings_.beta2),
                                static_cast<float>(settings_.eps),
                                decay,
                                step_};
    const size_t count = static_cast<size_t>(b - a), moment = static_cast<size_t>(a - base);
    const Vec param = window(params, a - param_base, count);
    const Vec m_part = window(m, moment, count), v_part = window(v, moment, count);
    const Vec grad = window(grads, a - grad_base, count);
    if (rounded)
      kernels::adamw_update(exec_, param, m_part, v_part, grad, h, grad_scale,
                            window(rounded->values, a - rounded_base, count), rounded->format);
    else
      kernels::adamw_update(exec_, param, m_part, v_part, grad, h, grad_scale);
  }
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

void AdamW::step(const View1& params, Placement params_at, const View1& grads, Placement grads_at,
                 double lr, float grad_scale, const RoundedCopy* rounded) {
  const bool compact_params = params_at == Placement::kCompact;
  const bool compact_grads = grads_at == Placement::kCompact;
  const bool compact_rounded = rounded && rounded->at == Placement::kCompact;
  ++step_;
  if (!streamed()) {
    for_pieces(0, count_, [&](int64_t flat, int64_t n, int64_t moment) {
      update(params, grads, lr, grad_scale, flat, flat + n, moment_m_, moment_v_, flat - moment,
             compact_grads ? flat - moment : 0, compact_params ? flat - moment : 0, rounded,
             compact_rounded ? flat - moment : 0);
    });
    exec_.fence();
    return;
  }
  const bool stream_params = param_file_ != nullptr && compact_params;
  for_streamed_blocks(stream_params, [&](int64_t lo, int64_t n) {
    // Buffer element j holds moment (and streamed parameter) lo + j.
    for_pieces(lo, lo + n, [&](int64_t flat, int64_t len, int64_t moment) {
      update(stream_params ? param_stream_ : params, grads, lr, grad_scale, flat, flat + len,
             moment_m_, moment_v_, flat - (moment - lo), compact_grads ? flat - moment : 0,
             stream_params    ? flat - (moment - lo)
             : compact_params ? flat - moment
                              : 0,
             rounded, compact_rounded ? flat - moment : 0);
    });
  });
}

void AdamW::transform_moments(const std::function<void(const Vec& m, const Vec& v)>& f) {
  if (!streamed()) {
    f(window(moment_m_, 0, count_), window(moment_v_, 0, count_));
    exec_.fence();
    return;
  }
  for_streamed_blocks(
      false, [&](int64_t, int64_t n) { f(window(moment_m_, 0, n), window(moment_v_, 0, n)); });
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
