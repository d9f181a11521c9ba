// Device-callable math functions across Kokkos versions (Experimental:: before 3.7).
#pragma once

#include <Kokkos_Core.hpp>

namespace trident::kmath {
#if KOKKOS_VERSION >= 30700
using Kokkos::exp;
using Kokkos::log;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::exp;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif
}  // namespace trident::kmath
