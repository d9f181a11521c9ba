// Memory accounting: bytes allocated by category, current and high-water mark, per rank.
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "core/types.hpp"

namespace trident {

enum class MemCategory : int {
  kParams,
  kGrads,
  kMasterWeights,
  kOptimizer,
  kActivations,
  kCommBuffers,
  kWorkspace,
  kCount
};
constexpr int kMemCategories = static_cast<int>(MemCategory::kCount);
const char* mem_category_name(MemCategory c);

class MemoryLedger {
 public:
  void add(MemCategory c, size_t bytes);
  size_t peak(MemCategory c) const { return peak_[static_cast<int>(c)]; }
  size_t current_total() const;
  size_t peak_total() const { return peak_total_; }

 private:
  std::array<size_t, kMemCategories> current_{};
  std::array<size_t, kMemCategories> peak_{};
  size_t peak_total_ = 0;
};

// Allocates a zero-initialised flat float buffer and records it in the ledger.
View1 allocate(MemoryLedger& ledger, MemCategory c, const std::string& label, size_t n);
IntView1 allocate_int(MemoryLedger& ledger, MemCategory c, const std::string& label, size_t n);
HalfView1 allocate_half(MemoryLedger& ledger, MemCategory c, const std::string& label, size_t n);

// Where a buffer meets a file (offload): on GPU builds pinned host memory of the same size, made
// once by the caller's constructor so that no step allocates (and the copies run at full PCIe
// speed); on host builds the buffer itself, so nothing is copied.
using HostView1 = Kokkos::View<float*, Kokkos::LayoutRight, PinnedSpace>;
HostView1 host_side(const View1& buffer, const std::string& label);

}  // namespace trident
