// AdamW implementation: the per-tensor update over a range, resident or streamed in blocks.
#include "optim/adamw.hpp"

#include <algorithm>

#include "kernels/adamw.hpp"

namespace trident {

AdamW::AdamW(const LocalParamTable& table, MemoryLedger& ledger, AdamWSettings s, int64_t begin,
             int64_t end, const MomentStorage& storage)
    : table_(table), s_(s), begin_(begin), end_(end < 0 ? table.total_numel() : end) {
  const int64_t n = end_ - begin_;
  if (storage.nvme) {
    m_file_ = std::make_unique<NvmeStore>(storage.path_prefix + ".m", n);
    v_file_ = std::make_unique<NvmeStore>(storage.path_prefix + ".v", n);
  }
  // Streamed moments keep only a bounded buffer resident (and accounted).
  const int64_t resident = storage.nvme ? std::min(n, storage.buffer_elements) : n;
  m_ = allocate(ledger, MemCategory::kOptimizer, "adam_m", resident);
  v_ = allocate(ledger, MemCategory::kOptimizer, "adam_v", resident);
}

void AdamW::update(const View1& params, const View1& grads, double lr, float grad_scale, int64_t lo,
                   int64_t hi, const View1& m, const View1& v, int64_t base) {
  for (const LocalParam& p : table_.params()) {
    const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel);
    if (a >= b) continue;
    const float decay = p.spec->weight_decay ? static_cast<float>(s_.weight_decay) : 0.0f;
    const kernels::AdamWHyper h{static_cast<float>(lr),
                                static_cast<float>(s_.beta1),
                                static_cast<float>(s_.beta2),
                                static_cast<float>(s_.eps),
                                decay,
                                step_};
    const size_t count = static_cast<size_t>(b - a), moment = static_cast<size_t>(a - base);
    kernels::adamw_update(exec_, window(params, a, count), window(m, moment, count),
                          window(v, moment, count), window(grads, a, count), h, grad_scale);
  }
}

void AdamW::step(const View1& params, const View1& grads, double lr, float grad_scale) {
  ++step_;
  if (!streamed()) {
    update(params, grads, lr, grad_scale, begin_, end_, m_, v_, begin_);
    exec_.fence();
    return;
  }
  const int64_t block = static_cast<int64_t>(m_.extent(0));
  auto m_host = Kokkos::create_mirror_view(m_);
  auto v_host = Kokkos::create_mirror_view(v_);
  for (int64_t lo = begin_; lo < end_; lo += block) {
    const int64_t count = std::min(block, end_ - lo);
    m_file_->read(lo - begin_, count, m_host.data());
    v_file_->read(lo - begin_, count, v_host.data());
    Kokkos::deep_copy(m_, m_host);
    Kokkos::deep_copy(v_, v_host);
    update(params, grads, lr, grad_scale, lo, lo + count, m_, v_, lo);
    exec_.fence();
    Kokkos::deep_copy(m_host, m_);
    Kokkos::deep_copy(v_host, v_);
    m_file_->write(lo - begin_, count, m_host.data());
    v_file_->write(lo - begin_, count, v_host.data());
  }
}

void AdamW::read_moments(const View1& m, const View1& v) const {
  const auto range = std::make_pair(int64_t{0}, end_ - begin_);
  if (!streamed()) {
    Kokkos::deep_copy(Kokkos::subview(m, range), m_);
    Kokkos::deep_copy(Kokkos::subview(v, range), v_);
    return;
  }
  auto m_host = Kokkos::create_mirror_view(m);
  auto v_host = Kokkos::create_mirror_view(v);
  m_file_->read(0, end_ - begin_, m_host.data());
  v_file_->read(0, end_ - begin_, v_host.data());
  Kokkos::deep_copy(m, m_host);
  Kokkos::deep_copy(v, v_host);
}

void AdamW::write_moments(const View1& m, const View1& v) {
  const auto range = std::make_pair(int64_t{0}, end_ - begin_);
  if (!streamed()) {
    Kokkos::deep_copy(m_, Kokkos::subview(m, range));
    Kokkos::deep_copy(v_, Kokkos::subview(v, range));
    return;
  }
  auto m_host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m);
  auto v_host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  m_file_->write(0, end_ - begin_, m_host.data());
  v_file_->write(0, end_ - begin_, v_host.data());
}

}  // namespace trident
