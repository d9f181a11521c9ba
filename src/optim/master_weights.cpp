// Master weights: initialisation and full-layout copies, fp32 or split around the compute copy.
#include "optim/master_weights.hpp"

#include <algorithm>

#include "kernels/cast.hpp"

namespace trident {

MasterWeights::MasterWeights(const LocalParamTable& local, std::vector<Segment> owned,
                             RoundedCopy compute, MemoryLedger& ledger)
    : local_(local), owned_(std::move(owned)) {
  for (const Segment& s : owned_) count_ += s.size();
  params_.compute = compute;
  if (split())
    params_.low = allocate_half(ledger, MemCategory::kMasterWeights, "master_low", count_);
  else
    params_.values = allocate(ledger, MemCategory::kMasterWeights, "master_weights", count_);
}

void MasterWeights::init(uint64_t seed) {
  View1 values("master_init", count_);
  auto host = Kokkos::create_mirror_view(values);  // zeros where no parameter lies (padding)
  for_owned([&](int64_t flat, int64_t compact, int64_t n) {
    for (const LocalParam& p : local_.params()) {
      const int64_t a = std::max(flat, p.offset), b = std::min(flat + n, p.offset + p.numel);
      for (int64_t f = a; f < b; ++f) {
        const int64_t g = local_.global_index(p, f - p.offset);
        host(compact + (f - flat)) = g < 0 ? 0.0f : initial_value(seed, *p.spec, g);
      }
    }
  });
  Kokkos::deep_copy(values, host);
  assign(values, Placement::kCompact);
}

void MasterWeights::read_full(const View1& full) const {
  const HalfView1 high = params_.compute.values, low = params_.low;
  const bool compact_copy = params_.compute.at == Placement::kCompact;
  for_owned([&](int64_t flat, int64_t compact, int64_t n) {
    if (!split()) {
      Kokkos::deep_copy(window(full, flat, n), window(params_.values, compact, n));
      return;
    }
    const int64_t copy_at = compact_copy ? compact : flat;
    Kokkos::parallel_for(
        "master_join", Kokkos::RangePolicy<Exec>(Exec(), 0, n), KOKKOS_LAMBDA(int64_t i) {
          full(flat + i) = join_bf16(high(copy_at + i), low(compact + i));
        });
  });
  Exec().fence();
}

void MasterWeights::assign(const View1& source, Placement source_at) {
  const HalfView1 high = params_.compute.values, low = params_.low;
  const Precision format = params_.compute.format;
  const bool compact_copy = params_.compute.at == Placement::kCompact;
  for_owned([&](int64_t flat, int64_t compact, int64_t n) {
    const int64_t copy_at = compact_copy ? compact : flat;
    const int64_t from = source_at == Placement::kCompact ? compact : flat;
    if (!split()) {
      Kokkos::deep_copy(window(params_.values, compact, n), window(source, from, n));
      kernels::store_compute_half(Exec(), high, static_cast<size_t>(copy_at),
                                  window(source, from, n), static_cast<size_t>(n), format);
      return;
    }
    Kokkos::parallel_for(
        "master_split", Kokkos::RangePolicy<Exec>(Exec(), 0, n), KOKKOS_LAMBDA(int64_t i) {
          const float value = source(from + i);
          const uint16_t upper = bf16_high(value);
          high(copy_at + i) = upper;
          low(compact + i) = bf16_low(value, upper);
        });
  });
  Exec().fence();
}

}  // namespace trident
