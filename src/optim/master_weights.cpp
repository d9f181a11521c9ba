// fp32 master weights: initialisation, rounding into 16-bit parameters, full-layout copies.
#include "optim/master_weights.hpp"

#include "kernels/cast.hpp"

namespace trident {

MasterWeights::MasterWeights(const LocalParamTable& local, std::vector<Segment> owned,
                             MemoryLedger& ledger)
    : local_(local), owned_(std::move(owned)) {
  int64_t count = 0;
  for (const Segment& s : owned_) count += s.size();
  values_ = allocate(ledger, MemCategory::kMasterWeights, "master_weights", count);
}

void MasterWeights::init(uint64_t seed) {
  auto host = Kokkos::create_mirror_view(values_);  // zeros where no parameter lies (padding)
  int64_t compact = 0;
  for (const Segment& s : owned_) {
    for (const LocalParam& p : local_.params()) {
      const int64_t a = std::max(s.begin, p.offset), b = std::min(s.end, p.offset + p.numel);
      for (int64_t f = a; f < b; ++f) {
        const int64_t g = local_.global_index(p, f - p.offset);
        host(compact + (f - s.begin)) = g < 0 ? 0.0f : initial_value(seed, *p.spec, g);
      }
    }
    compact += s.size();
  }
  Kokkos::deep_copy(values_, host);
}

void MasterWeights::round_into(const HalfView1& params16, Precision p) const {
  int64_t compact = 0;
  for (const Segment& s : owned_) {
    kernels::store_half(Exec(), params16, static_cast<size_t>(s.begin),
                        window(values_, compact, s.size()), s.size(), p);
    compact += s.size();
  }
  Exec().fence();
}

void MasterWeights::read_full(const View1& full) const {
  int64_t compact = 0;
  for (const Segment& s : owned_) {
    Kokkos::deep_copy(Kokkos::subview(full, std::make_pair(s.begin, s.end)),
                      Kokkos::subview(values_, std::make_pair(compact, compact + s.size())));
    compact += s.size();
  }
}

void MasterWeights::write_full(const View1& full) {
  int64_t compact = 0;
  for (const Segment& s : owned_) {
    Kokkos::deep_copy(Kokkos::subview(values_, std::make_pair(compact, compact + s.size())),
                      Kokkos::subview(full, std::make_pair(s.begin, s.end)));
    compact += s.size();
  }
}

}  // namespace trident
