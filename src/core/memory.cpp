// Memory ledger implementation.
#include "core/memory.hpp"

namespace trident {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParams:
      return "params";
    case MemCategory::kGrads:
      return "grads";
    case MemCategory::kMasterWeights:
      return "master_weights";
    case MemCategory::kOptimizer:
      return "optimizer";
    case MemCategory::kActivations:
      return "activations";
    case MemCategory::kCommBuffers:
      return "comm_buffers";
    case MemCategory::kWorkspace:
      return "workspace";
    case MemCategory::kCount:
      break;
  }
  return "unknown";
}

void MemoryLedger::add(MemCategory c, size_t bytes) {
  const int i = static_cast<int>(c);
  current_[i] += bytes;
  if (current_[i] > peak_[i]) peak_[i] = current_[i];
  const size_t total = current_total();
  if (total > peak_total_) peak_total_ = total;
}

size_t MemoryLedger::current_total() const {
  size_t total = 0;
  for (size_t b : current_) total += b;
  return total;
}

View1 allocate(MemoryLedger& ledger, MemCategory c, const std::string& label, size_t n) {
  ledger.add(c, n * sizeof(float));
  return View1(label, n);
}

IntView1 allocate_int(MemoryLedger& ledger, MemCategory c, const std::string& label, size_t n) {
  ledger.add(c, n * sizeof(int32_t));
  return IntView1(label, n);
}

HalfView1 allocate_half(MemoryLedger& ledger, MemCategory c, const std::string& label, size_t n) {
  ledger.add(c, n * sizeof(uint16_t));
  return HalfView1(label, n);
}

HostView1 host_side(const View1& buffer, const std::string& label) {
#if defined(KOKKOS_ENABLE_CUDA)
  if (buffer.extent(0) == 0) return HostView1();
  return HostView1(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), buffer.extent(0));
#else
  (void)label;
  return HostView1(buffer);
#endif
}

}  // namespace trident
