// How kernels read and write a tensor in its storage format: fp32 elements as they are, bf16 and
// fp16 bit patterns widened to fp32 on load and rounded on store. One kernel body then serves every
// precision, its arithmetic in fp32 registers, and a 16-bit kernel's result is exactly the fp32
// kernel's on the widened inputs, rounded.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <type_traits>

#include "core/half.hpp"
#include "core/stored.hpp"
#include "core/types.hpp"

namespace trident::kernels {

struct Fp32Elements {
  using Stored = float;
  static constexpr Precision format = Precision::kFp32;
  KOKKOS_INLINE_FUNCTION static float load(float v) { return v; }
  KOKKOS_INLINE_FUNCTION static float store(float v) { return v; }
};

struct Bf16Elements {
  using Stored = uint16_t;
  static constexpr Precision format = Precision::kBf16;
  KOKKOS_INLINE_FUNCTION static float load(uint16_t v) { return from_bf16(v); }
  KOKKOS_INLINE_FUNCTION static uint16_t store(float v) { return to_bf16(v); }
};

struct Fp16Elements {
  using Stored = uint16_t;
  static constexpr Precision format = Precision::kFp16;
  KOKKOS_INLINE_FUNCTION static float load(uint16_t v) { return from_fp16(v); }
  KOKKOS_INLINE_FUNCTION static uint16_t store(float v) { return to_fp16(v); }
};

// Windows over tensors stored as E: for Fp32Elements these are Vec, ConstVec, Mat and ConstMat.
template <class E>
using VecOf = Kokkos::View<typename E::Stored*, Kokkos::LayoutRight, Device, Unmanaged>;
template <class E>
using ConstVecOf = Kokkos::View<const typename E::Stored*, Kokkos::LayoutRight, Device, Unmanaged>;
template <class E>
using MatOf = Kokkos::View<typename E::Stored**, Kokkos::LayoutRight, Device, Unmanaged>;
template <class E>
using ConstMatOf = Kokkos::View<const typename E::Stored**, Kokkos::LayoutRight, Device, Unmanaged>;

// A stored tensor's elements as E (null when it is empty): what the typed windows below wrap.
template <class E>
typename E::Stored* elements_of(const StoredTensor& t) {
  if (t.empty()) return nullptr;
  if (t.format != E::format)
    throw std::logic_error(std::string("a ") + name_of(t.format) + " tensor read as " +
                           name_of(E::format));
  if constexpr (std::is_same_v<E, Fp32Elements>)
    return t.f32.data();
  else
    return t.f16.data();
}
// t's first n elements (none when t is empty), or its first rows x cols, as a window of E.
template <class E>
VecOf<E> vec_of(const StoredTensor& t, size_t n) {
  return VecOf<E>(elements_of<E>(t), t.empty() ? 0 : n);
}
template <class E>
MatOf<E> mat_of(const StoredTensor& t, size_t rows, size_t cols) {
  return MatOf<E>(elements_of<E>(t), t.empty() ? 0 : rows, cols);
}

// Packs: P elements of E side by side, aligned to P elements, moved by one load or store (16
// bytes, one vector instruction on a GPU, for a full pack: kPackElements<E>).
template <class E>
constexpr int kPackElements = static_cast<int>(16 / sizeof(typename E::Stored));

template <class E, int P, class S>
KOKKOS_INLINE_FUNCTION void load_pack(const S* p, float* f) {
  struct alignas(sizeof(S) * P) Chunk {
    S v[P];
  };
  const Chunk chunk = *reinterpret_cast<const Chunk*>(p);
  for (int j = 0; j < P; ++j) f[j] = E::load(chunk.v[j]);
}

template <class E, int P, class S>
KOKKOS_INLINE_FUNCTION void store_pack(S* p, const float* f) {
  struct alignas(sizeof(S) * P) Chunk {
    S v[P];
  };
  Chunk chunk;
  for (int j = 0; j < P; ++j) chunk.v[j] = E::store(f[j]);
  *reinterpret_cast<Chunk*>(p) = chunk;
}

// Whether rows of `cols` elements of E starting at each of `rows` split into full packs.
template <class E>
bool rows_split_into_packs(int cols, std::initializer_list<const void*> rows) {
  if (cols % kPackElements<E> != 0) return false;
  for (const void* p : rows)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// f(E{}) with the element type that stores `format`.
template <class F>
decltype(auto) with_elements(Precision format, F&& f) {
  switch (format) {
    case Precision::kBf16:
      return f(Bf16Elements{});
    case Precision::kFp16:
      return f(Fp16Elements{});
    case Precision::kFp32:
      break;
  }
  return f(Fp32Elements{});
}

}  // namespace trident::kernels
