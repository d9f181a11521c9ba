// RAII labelled profiling region: every kernel opens one so Kokkos tools can attribute time.
#pragma once

#include <Kokkos_Core.hpp>

namespace trident {

class Region {
 public:
  explicit Region(const char* label) { Kokkos::Profiling::pushRegion(label); }
  ~Region() { Kokkos::Profiling::popRegion(); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
};

}  // namespace trident
