// AdamW over a rank's parameters, or over its ZeRO shard of them: moments in one compact fp32
// buffer covering the owned segments of the flat parameter buffer, resident or streamed from
// files through a bounded buffer (NVMe offload); decay only where the table says.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/file_store.hpp"
#include "core/half.hpp"
#include "core/memory.hpp"
#include "kernels/adamw.hpp"
#include "model/params.hpp"
#include "model/partition.hpp"

#include <vector>

namespace trident {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// Where the moments live. `path_prefix` + ".m" / ".v" name the files when streamed.
struct MomentStorage {
  bool nvme = false;
  std::string path_prefix;
  int64_t buffer_elements = 1 << 22;  // per moment, resident while streaming
  // ZeRO-3 parameter offload: the compact parameter shard lives in this file and is streamed
  // through the same blocks as the moments (needs nvme moments).
  FileStore* params = nullptr;
};

// Where a buffer's elements sit: at their positions of the rank's flat buffer, or compact (the
// owned segments one after another, as the moments are: a ZeRO shard, fp32 master weights).
enum class Placement { kFlat, kCompact };

// The 16-bit compute copy of the parameters (flat, or compact like a ZeRO-3 shard).
struct RoundedCopy {
  HalfView1 values;
  Placement at = Placement::kFlat;
  Precision format = Precision::kBf16;
};

// 16-bit training's parameters as AdamW updates them: fp32 master weights (compact) beside the
// compute copy, each new value rounded into it in the same pass (fp16); or, for bf16, master
// weights split losslessly between the compute copy and their low halves (compact;
// core/half.hpp), 4 bytes a parameter in all.
struct MasterParams {
  RoundedCopy compute;
  View1 values;   // fp16: the fp32 master weights
  HalfView1 low;  // bf16: the low halves
};

// Where one piece of a tensor's owned elements lies: at `flat` of the flat buffers, at `compact`
// among the owned elements, at `buffered` of the moment buffers (compact, or its place in the
// streaming block); its moments and gradient windowed.
struct PieceAt {
  int64_t flat, compact, buffered;
  size_t count;
  Vec m, v, grad;
};

class AdamW {
 public:
  // Updates the `owned` segments of the flat buffers (every unit whole when empty). The GPU shape
  // updates every owned element in one launch when the moments are resident (else a launch per
  // piece of each tensor, as the CPU shape does): the same bits either way.
  AdamW(const LocalParamTable& table, MemoryLedger& ledger, AdamWSettings s,
        std::vector<Segment> owned = {}, const MomentStorage& storage = {},
        kernels::Shape shape = kernels::kBuildShape);

  // One step on fp32 `params` from `grads`, the gradient first multiplied by `grad_scale`
  // (clipping). Only this optimizer's owned elements are touched.
  void step(const View1& params, Placement params_at, const View1& grads, Placement grads_at,
            double lr, float grad_scale);
  // The same on whole flat buffers.
  void step(const View1& params, const View1& grads, double lr, float grad_scale) {
    step(params, Placement::kFlat, grads, Placement::kFlat, lr, grad_scale);
  }
  // The same on 16-bit training's master weights and their compute copy.
  void step(const MasterParams& params, const View1& grads, Placement grads_at, double lr,
            float grad_scale);

  // Copies the owned moments into / out of full-layout buffers (flat-buffer positions).
  void read_moments(const View1& m, const View1& v) const;
  void write_moments(const View1& m, const View1& v);
  // Calls f(first, m, v) on all the owned moments, in place: on the resident buffers at once
  // (first 0), or, when streamed, on each block of the files read into the streaming buffers and
  // written back after (local SGD averages them over dp this way, with no copy in flat layout);
  // `first` is the block's index among the owned moments.
  void transform_moments(const std::function<void(int64_t first, const Vec& m, const Vec& v)>& f);
  bool streamed() const { return m_file_ != nullptr; }
  // Reads the gradient's scale at `scale` in device memory (kernels::clip_scale's output) instead
  // of step()'s argument: the GPU shape's one launch reads it there, the per-piece launches read
  // it on the host after a fence. Null: step()'s argument again. False, and nothing changed,
  // where the host cannot read device memory and there is no single launch.
  bool read_grad_scale_from(const float* scale);
  int steps_taken() const { return step_; }
  void set_steps_taken(int s) { step_ = s; }

 private:
  // Counts the step, then calls update(h, at) for every piece of one tensor among the owned
  // elements: its hyperparameters, and where the piece lies (PieceAt). Streamed moments go block
  // by block through the streaming buffers (with `stream_params`, the offloaded parameters too).
  template <class F>
  void for_each_piece(const View1& grads, Placement grads_at, double lr, bool stream_params,
                      F&& update);
  // Streamed moments: for each block of the files, reads moments [lo, lo + n) (and, with
  // `params`, the streamed parameters) into the streaming buffers, calls f(lo, n), and writes
  // them back.
  template <class F>
  void for_streamed_blocks(bool params, F&& f);
  // Calls f(flat_begin, count, moment_begin) for the owned pieces of moment range [lo, hi).
  template <class F>
  void for_pieces(int64_t lo, int64_t hi, F&& f) const {
    int64_t moment = 0;
    for (const Segment& seg : owned_) {
      const int64_t a = std::max(lo, moment), b = std::min(hi, moment + seg.size());
      if (a < b) f(seg.begin + (a - moment), b - a, a);
      moment += seg.size();
    }
  }

  // The hyperparameters of this step (the step counted by for_each_piece), without decay.
  kernels::AdamWHyper hyper(double lr) const;
  // The single launch's pieces: every owned element, in compact order (kernels::AdamWPiece).
  Kokkos::View<kernels::AdamWPiece*, Device> single_launch_pieces() const;

  const LocalParamTable& table_;
  AdamWSettings settings_;
  std::vector<Segment> owned_;
  int64_t count_ = 0;  // owned elements (moments per kind)
  Exec exec_;
  View1 moment_m_, moment_v_;  // all moments, or the streaming buffers
  View1 param_stream_;         // streaming buffer for offloaded parameters
  // Where the streaming buffers meet their files (host_side).
  HostView1 m_host_, v_host_, param_host_;
  FileStore* param_file_ = nullptr;
  std::unique_ptr<FileStore> m_file_, v_file_;
  int step_ = 0;
  kernels::AdamWPieces pieces_;  // GPU shape, resident moments: the single launch's; else empty
  const float* grad_scale_at_ = nullptr;  // read_grad_scale_from
  // step()'s grad_scale for launches that take it by value: where read_grad_scale_from says.
  float scale_now(float grad_scale) const;
};

}  // namespace trident
