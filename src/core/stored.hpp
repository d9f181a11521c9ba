// A tensor in its storage format (fp32, or bf16 / fp16 bit patterns): one type for every
// precision, so code that keeps, sends or restores a tensor is the same line in each.
#pragma once

#include <cstddef>
#include <string>

#include "core/memory.hpp"
#include "core/precision.hpp"
#include "core/types.hpp"

namespace trident {

struct StoredTensor {
  View1 f32;      // the elements when format is fp32
  HalfView1 f16;  // the bit patterns when format is bf16 / fp16
  Precision format = Precision::kFp32;

  size_t size() const { return format == Precision::kFp32 ? f32.extent(0) : f16.extent(0); }
  bool empty() const { return size() == 0; }
};

// A zero-initialised tensor of n elements in `format`, recorded in the ledger.
inline StoredTensor allocate_stored(MemoryLedger& ledger, MemCategory c, const std::string& label,
                                    size_t n, Precision format) {
  StoredTensor t;
  t.format = format;
  if (format == Precision::kFp32)
    t.f32 = allocate(ledger, c, label, n);
  else
    t.f16 = allocate_half(ledger, c, label, n);
  return t;
}

}  // namespace trident
