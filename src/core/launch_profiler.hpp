// Times every kernel launch, library call and copy of one training step by label (`trident train
// --profile-step K`): CUDA events on the device, the wall clock on hosts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

// What a timed launch is: a Kokkos kernel (parallel_for / reduce / scan, named by its label), a
// library call (a GEMM; one call may be several device kernels), or a Kokkos deep copy.
enum class LaunchKind { kKernel, kLibrary, kCopy };
const char* name_of(LaunchKind kind);

// One label's launches in the profiled window.
struct LaunchRow {
  std::string label;
  LaunchKind kind = LaunchKind::kKernel;
  int64_t calls = 0;
  double seconds = 0;  // summed over the calls
  double flops = 0;    // summed; 0 where the label does not say (kernels)
  double bytes = 0;    // copies: bytes moved
};

// Listens to Kokkos Tools' kernel and copy events, and to the library calls that open a
// ProfiledCall, between start() and stop(). One profiler at a time (Kokkos has one callback per
// event). It chains to a loaded Kokkos Tools library's callbacks, as StepAllocations does. While
// it listens, Kokkos fences the device around each kernel for the tool (Kokkos' default for
// tools): the kernels' own times are exact, the profiled step's wall time is not, so compare them
// with another step's.
class LaunchProfiler {
 public:
  LaunchProfiler();
  ~LaunchProfiler();
  LaunchProfiler(const LaunchProfiler&) = delete;
  LaunchProfiler& operator=(const LaunchProfiler&) = delete;

  void start();
  // Waits for the device and reads every launch's time.
  void stop();
  // Whether a profiler is listening now (library calls label themselves only then).
  static bool listening();

  // Every label seen, the longest first.
  const std::vector<LaunchRow>& rows() const { return rows_; }
  int64_t launches() const;  // kernels and library calls (copies not counted)
  double launch_seconds() const;

  // For ProfiledCall and the Kokkos callbacks.
  static uint64_t open(const std::string& label, LaunchKind kind, double flops, double bytes);
  static void close(uint64_t id);

 private:
  std::vector<LaunchRow> rows_;
};

// A GEMM's label: "gemm16 NT 16384x2304x768" (C rows x columns x the inner dimension, as the
// call multiplies them), with " x12" for a batch of 12. `kind` names the dispatch (gemm, gemm16,
// gemm16_out, gemm_batched, gemm16_batched).
std::string gemm_label(const char* kind, char trans_a, char trans_b, int m, int n, int k,
                       int batch = 1);

// A library call timed as one launch while a step is profiled: open it just around the call,
// with a label that names its shape (the roofline predicts the same labels). Costs one test of a
// flag when nothing listens.
class ProfiledCall {
 public:
  ProfiledCall() = default;
  ~ProfiledCall() {
    if (open_) LaunchProfiler::close(id_);
  }
  ProfiledCall(const ProfiledCall&) = delete;
  ProfiledCall& operator=(const ProfiledCall&) = delete;
  void open(const std::string& label, double flops, double bytes = 0) {
    id_ = LaunchProfiler::open(label, LaunchKind::kLibrary, flops, bytes);
    open_ = true;
  }
  // A GEMM (gemm_label) of 2 m n k batch FLOPs, when a profiler listens.
  void open_gemm(const char* kind, char trans_a, char trans_b, int m, int n, int k, int batch = 1) {
    if (LaunchProfiler::listening())
      open(gemm_label(kind, trans_a, trans_b, m, n, k, batch), 2.0 * m * n * k * batch);
  }

 private:
  uint64_t id_ = 0;
  bool open_ = false;
};

}  // namespace trident
