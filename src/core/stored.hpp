// A tensor in its storage format (fp32, or bf16 / fp16 bit patterns): one type for every
// precision, so code that keeps, sends or restores a tensor is the same line in each.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/half.hpp"
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
  // Elements [offset, offset + n) as a tensor of their own (a window onto these).
  StoredTensor window(size_t offset, size_t n) const {
    StoredTensor w;
    w.format = format;
    if (format == Precision::kFp32)
      w.f32 = View1(f32.data() + offset, n);
    else
      w.f16 = HalfView1(f16.data() + offset, n);
    return w;
  }
};

// An fp32 tensor over n floats at `data` (a window; nothing is allocated).
inline StoredTensor stored_f32(float* data, size_t n) {
  return {View1(data, n), {}, Precision::kFp32};
}
// A 16-bit tensor over n bit patterns at `data` in `format`.
inline StoredTensor stored_f16(uint16_t* data, size_t n, Precision format) {
  return {{}, HalfView1(data, n), format};
}

// t's elements [offset, offset + n) as fp32 values on the host (tests, sampling, dumps).
inline std::vector<float> host_values(const StoredTensor& t, size_t offset, size_t n) {
  std::vector<float> out(n);
  if (t.format == Precision::kFp32) {
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), t.window(offset, n).f32);
    for (size_t i = 0; i < n; ++i) out[i] = host(i);
  } else {
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), t.window(offset, n).f16);
    for (size_t i = 0; i < n; ++i) out[i] = from_half(host(i), t.format);
  }
  return out;
}

// t's elements [offset, offset + values.size()) = values, rounded to t's format (tests, imports):
// through a host copy, so t may live in device memory.
inline void set_host_values(const StoredTensor& t, size_t offset,
                            const std::vector<float>& values) {
  const StoredTensor w = t.window(offset, values.size());
  if (t.format == Precision::kFp32) {
    auto host = Kokkos::create_mirror_view(Kokkos::HostSpace(), w.f32);
    for (size_t i = 0; i < values.size(); ++i) host(i) = values[i];
    Kokkos::deep_copy(w.f32, host);
  } else {
    auto host = Kokkos::create_mirror_view(Kokkos::HostSpace(), w.f16);
    for (size_t i = 0; i < values.size(); ++i) host(i) = to_half(values[i], t.format);
    Kokkos::deep_copy(w.f16, host);
  }
}

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
