// View aliases, the execution space and the dimension legend shared by every layer.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

// Dimension legend used in shape comments throughout trident:
//   B batch (sequences in a micro-batch), T sequence length, C channels,
//   NH heads, HS head size (C / NH), L layers, V vocabulary, N = B*T rows.
//   A `_tp` suffix marks an extent that is local to a tensor-parallel rank.

namespace trident {

using Exec = Kokkos::DefaultExecutionSpace;
using MemSpace = Exec::memory_space;
using Device = Kokkos::Device<Exec, MemSpace>;

// Host memory for copies to and from the device: pinned on GPU builds (the copies run at full PCIe
// speed), plain host memory otherwise.
#if defined(KOKKOS_ENABLE_CUDA)
using PinnedSpace = Kokkos::CudaHostPinnedSpace;
#else
using PinnedSpace = Kokkos::HostSpace;
#endif

// Owning flat buffers. The model flattens [B,T,C] to [N,C] for GEMMs.
using View1 = Kokkos::View<float*, Kokkos::LayoutRight, Device>;
using IntView1 = Kokkos::View<int32_t*, Kokkos::LayoutRight, Device>;
// 16-bit storage (bf16 or fp16 bit patterns, see core/half.hpp).
using HalfView1 = Kokkos::View<uint16_t*, Kokkos::LayoutRight, Device>;

// Unmanaged windows over flat buffers: what kernels take. A kernel never owns memory, and a
// parameter or activation is a window (offset, shape) into one flat allocation.
using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
using Vec = Kokkos::View<float*, Kokkos::LayoutRight, Device, Unmanaged>;
using ConstVec = Kokkos::View<const float*, Kokkos::LayoutRight, Device, Unmanaged>;
using Mat = Kokkos::View<float**, Kokkos::LayoutRight, Device, Unmanaged>;
using ConstMat = Kokkos::View<const float**, Kokkos::LayoutRight, Device, Unmanaged>;
using IntVec = Kokkos::View<int32_t*, Kokkos::LayoutRight, Device, Unmanaged>;
using ConstIntVec = Kokkos::View<const int32_t*, Kokkos::LayoutRight, Device, Unmanaged>;
using IntMat = Kokkos::View<int32_t**, Kokkos::LayoutRight, Device, Unmanaged>;
using ConstIntMat = Kokkos::View<const int32_t**, Kokkos::LayoutRight, Device, Unmanaged>;
using HalfVec = Kokkos::View<uint16_t*, Kokkos::LayoutRight, Device, Unmanaged>;
using ConstHalfVec = Kokkos::View<const uint16_t*, Kokkos::LayoutRight, Device, Unmanaged>;
using HalfMat = Kokkos::View<uint16_t**, Kokkos::LayoutRight, Device, Unmanaged>;
using ConstHalfMat = Kokkos::View<const uint16_t**, Kokkos::LayoutRight, Device, Unmanaged>;

inline Vec window(const View1& flat, size_t offset, size_t n) {
  return Vec(flat.data() + offset, n);
}
inline HalfVec window(const HalfView1& flat, size_t offset, size_t n) {
  return HalfVec(flat.data() + offset, n);
}
inline Mat window(const View1& flat, size_t offset, size_t rows, size_t cols) {
  return Mat(flat.data() + offset, rows, cols);
}
inline HalfMat window(const HalfView1& flat, size_t offset, size_t rows, size_t cols) {
  return HalfMat(flat.data() + offset, rows, cols);
}

}  // namespace trident
