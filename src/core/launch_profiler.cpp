// LaunchProfiler: Kokkos Tools kernel and copy events plus ProfiledCall's library calls, each
// timed by a pair of CUDA events on Kokkos' stream (GPU builds) or by the wall clock (hosts).
#include "core/launch_profiler.hpp"

#include <fmt/format.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <utility>

#include "core/error.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace trident {
namespace {

struct Launch {
  int row = 0;  // into Recorder::rows
  double t0 = 0, t1 = 0;
#if defined(KOKKOS_ENABLE_CUDA)
  cudaEvent_t begin = nullptr, end = nullptr;
#endif
};

struct Recorder {
  bool owned = false;  // a LaunchProfiler exists
  bool listening = false;
  std::map<std::pair<std::string, LaunchKind>, int> index;
  std::vector<LaunchRow> rows;
  std::vector<Launch> launches;
  std::vector<uint64_t> open_copies;  // Kokkos' end-of-copy event carries no id
  Kokkos::Tools::Experimental::EventSet previous;
#if defined(KOKKOS_ENABLE_CUDA)
  std::vector<cudaEvent_t> events;  // reused from one profiled window to the next
  size_t next_event = 0;
#endif
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#if defined(KOKKOS_ENABLE_CUDA)
void check_cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess)
    throw std::runtime_error(fmt::format("{}: {}", call, cudaGetErrorString(rc)));
}

// An event recorded now on Kokkos' stream, where trident's kernels and GEMMs run.
cudaEvent_t record_event(Recorder& r) {
  if (r.next_event == r.events.size()) {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreate(&e), "cudaEventCreate");
    r.events.push_back(e);
  }
  cudaEvent_t e = r.events[r.next_event++];
  check_cuda(cudaEventRecord(e, Kokkos::Cuda().cuda_stream()), "cudaEventRecord");
  return e;
}
#endif

void begin_kernel(const char* name, const uint32_t, uint64_t* id) {
  if (recorder().listening) *id = LaunchProfiler::open(name, LaunchKind::kKernel, 0, 0);
}

void end_kernel(const uint64_t id) {
  if (recorder().listening) LaunchProfiler::close(id);
}

void begin_copy(Kokkos_Profiling_SpaceHandle dst, const char*, const void*,
                Kokkos_Profiling_SpaceHandle src, const char*, const void*, uint64_t bytes) {
  Recorder& r = recorder();
  if (!r.listening) return;
  r.open_copies.push_back(
      LaunchProfiler::open(fmt::format("deep_copy {} <- {}", dst.name, src.name), LaunchKind::kCopy,
                           0, static_cast<double>(bytes)));
}

void end_copy() {
  Recorder& r = recorder();
  if (!r.listening || r.open_copies.empty()) return;
  LaunchProfiler::close(r.open_copies.back());
  r.open_copies.pop_back();
}

}  // namespace

const char* name_of(LaunchKind kind) {
  switch (kind) {
    case LaunchKind::kLibrary:
      return "library";
    case LaunchKind::kCopy:
      return "copy";
    case LaunchKind::kKernel:
      break;
  }
  return "kernel";
}

std::string gemm_label(const char* kind, char trans_a, char trans_b, int m, int n, int k,
                       int batch) {
  std::string label = fmt::format("{} {}{} {}x{}x{}", kind, trans_a, trans_b, m, n, k);
  if (batch > 1) label += fmt::format(" x{}", batch);
  return label;
}

LaunchProfiler::LaunchProfiler() {
  namespace tools = Kokkos::Tools::Experimental;
  Recorder& r = recorder();
  if (r.owned)
    throw std::logic_error("one LaunchProfiler at a time: Kokkos has one callback per event");
  r.previous = tools::get_callbacks();
  if (r.previous.begin_parallel_for || r.previous.begin_deep_copy)
    throw InputError(
        "--profile-step cannot run under a Kokkos Tools library (KOKKOS_TOOLS_LIBS or "
        "KOKKOS_PROFILE_LIBRARY is set): both would take Kokkos' kernel events");
  r.owned = true;
}

LaunchProfiler::~LaunchProfiler() {
  Recorder& r = recorder();
  if (r.listening) stop();
#if defined(KOKKOS_ENABLE_CUDA)
  for (cudaEvent_t e : r.events) cudaEventDestroy(e);
  r.events.clear();
#endif
  r.owned = false;
}

bool LaunchProfiler::listening() {
  return recorder().listening;
}

void LaunchProfiler::start() {
  namespace tools = Kokkos::Tools::Experimental;
  Recorder& r = recorder();
  Kokkos::fence();  // what came before is not this window's
  r.index.clear();
  r.rows.clear();
  r.launches.clear();
  r.open_copies.clear();
#if defined(KOKKOS_ENABLE_CUDA)
  r.next_event = 0;
#endif
  tools::set_begin_parallel_for_callback(&begin_kernel);
  tools::set_end_parallel_for_callback(&end_kernel);
  tools::set_begin_parallel_reduce_callback(&begin_kernel);
  tools::set_end_parallel_reduce_callback(&end_kernel);
  tools::set_begin_parallel_scan_callback(&begin_kernel);
  tools::set_end_parallel_scan_callback(&end_kernel);
  tools::set_begin_deep_copy_callback(&begin_copy);
  tools::set_end_deep_copy_callback(&end_copy);
  r.listening = true;
}

void LaunchProfiler::stop() {
  namespace tools = Kokkos::Tools::Experimental;
  Recorder& r = recorder();
  Kokkos::fence();
  r.listening = false;
  tools::set_begin_parallel_for_callback(r.previous.begin_parallel_for);
  tools::set_end_parallel_for_callback(r.previous.end_parallel_for);
  tools::set_begin_parallel_reduce_callback(r.previous.begin_parallel_reduce);
  tools::set_end_parallel_reduce_callback(r.previous.end_parallel_reduce);
  tools::set_begin_parallel_scan_callback(r.previous.begin_parallel_scan);
  tools::set_end_parallel_scan_callback(r.previous.end_parallel_scan);
  tools::set_begin_deep_copy_callback(r.previous.begin_deep_copy);
  tools::set_end_deep_copy_callback(r.previous.end_deep_copy);
  for (const Launch& l : r.launches) {
    LaunchRow& row = r.rows[l.row];
    ++row.calls;
#if defined(KOKKOS_ENABLE_CUDA)
    float ms = 0;
    if (l.begin && l.end)
      check_cuda(cudaEventElapsedTime(&ms, l.begin, l.end), "cudaEventElapsedTime");
    row.seconds += 1e-3 * ms;
#else
    row.seconds += l.t1 - l.t0;
#endif
  }
  rows_ = r.rows;
  std::stable_sort(rows_.begin(), rows_.end(),
                   [](const LaunchRow& a, const LaunchRow& b) { return a.seconds > b.seconds; });
  r.launches.clear();
}

int64_t LaunchProfiler::launches() const {
  int64_t n = 0;
  for (const LaunchRow& row : rows_)
    if (row.kind != LaunchKind::kCopy) n += row.calls;
  return n;
}

double LaunchProfiler::launch_seconds() const {
  double s = 0;
  for (const LaunchRow& row : rows_)
    if (row.kind != LaunchKind::kCopy) s += row.seconds;
  return s;
}

uint64_t LaunchProfiler::open(const std::string& label, LaunchKind kind, double flops,
                              double bytes) {
  Recorder& r = recorder();
  const auto [at, added] = r.index.try_emplace({label, kind}, static_cast<int>(r.rows.size()));
  if (added) r.rows.push_back({label, kind, 0, 0, 0, 0});
  LaunchRow& row = r.rows[at->second];
  row.flops += flops;
  row.bytes += bytes;
  Launch l;
  l.row = at->second;
#if defined(KOKKOS_ENABLE_CUDA)
  l.begin = record_event(r);
#else
  l.t0 = now_seconds();
#endif
  r.launches.push_back(l);
  return r.launches.size() - 1;
}

void LaunchProfiler::close(uint64_t id) {
  Recorder& r = recorder();
  if (id >= r.launches.size()) return;  // opened before this window
#if defined(KOKKOS_ENABLE_CUDA)
  r.launches[id].end = record_event(r);
#else
  r.launches[id].t1 = now_seconds();
#endif
}

}  // namespace trident
