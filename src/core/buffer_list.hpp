// The list of buffers a component allocates: one function describes each buffer once (label,
// memory category, elements, format); given a ledger the list allocates as it is written, without
// one it only sums bytes, which is how the memory model predicts any layout without allocating.
#pragma once

#include <array>
#include <cstddef>

#include "core/memory.hpp"
#include "core/stored.hpp"

namespace trident {

class BufferList {
 public:
  // Describes only: nothing is allocated, every request returns an empty tensor.
  BufferList() = default;
  // Allocates every buffer requested (recorded in `ledger`).
  explicit BufferList(MemoryLedger& ledger) : ledger_(&ledger) {}

  StoredTensor stored(const char* label, MemCategory c, size_t n, Precision format) {
    record(c, n, bytes_of(format));
    return ledger_ ? allocate_stored(*ledger_, c, label, n, format) : StoredTensor{{}, {}, format};
  }
  View1 f32(const char* label, MemCategory c, size_t n) {
    record(c, n, sizeof(float));
    return ledger_ ? allocate(*ledger_, c, label, n) : View1();
  }
  HalfView1 f16(const char* label, MemCategory c, size_t n) {
    record(c, n, sizeof(uint16_t));
    return ledger_ ? allocate_half(*ledger_, c, label, n) : HalfView1();
  }
  IntView1 int32(const char* label, MemCategory c, size_t n) {
    record(c, n, sizeof(int32_t));
    return ledger_ ? allocate_int(*ledger_, c, label, n) : IntView1();
  }

  double bytes(MemCategory c) const { return bytes_[static_cast<int>(c)]; }
  const std::array<double, kMemCategories>& bytes() const { return bytes_; }

 private:
  // What is described is summed, not stored: the planner describes thousands of layouts.
  void record(MemCategory c, size_t n, int element_bytes) {
    bytes_[static_cast<int>(c)] += static_cast<double>(n) * element_bytes;
  }

  MemoryLedger* ledger_ = nullptr;
  std::array<double, kMemCategories> bytes_{};
};

}  // namespace trident
