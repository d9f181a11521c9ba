// AdamW on a flat fp32 shard (decoupled weight decay), and the squared-norm reduction.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/math.hpp"
#include "core/types.hpp"
#include "kernels/elements.hpp"
#include "kernels/region.hpp"
#include "kernels/shapes.hpp"

namespace trident::kernels {

struct AdamWHyper {
  float lr, beta1, beta2, eps, weight_decay;
  int step;  // 1-based, for bias correction
};

// One element's AdamW update: the new m, v and parameter from the old ones and the gradient.
struct AdamWElement {
  float b1, b2, eps, lr, inv_bc1, inv_sqrt_bc2, decay, grad_scale;
  // Where the gradient's scale is read on the device instead (clip_scale's output), or null.
  const float* grad_scale_at = nullptr;

  AdamWElement(AdamWHyper h, float scale, const float* scale_at = nullptr)
      : b1(h.beta1),
        b2(h.beta2),
        eps(h.eps),
        lr(h.lr),
        inv_bc1(1.0f / (1.0f - static_cast<float>(std::pow(h.beta1, h.step)))),
        inv_sqrt_bc2(1.0f / std::sqrt(1.0f - static_cast<float>(std::pow(h.beta2, h.step)))),
        decay(1.0f - h.lr * h.weight_decay),
        grad_scale(scale),
        grad_scale_at(scale_at) {}

  // This update with the scale read where it is kept on the device, once per work item.
  KOKKOS_INLINE_FUNCTION AdamWElement resolved() const {
    AdamWElement u = *this;
    if (grad_scale_at) u.grad_scale = *grad_scale_at;
    u.grad_scale_at = nullptr;
    return u;
  }

  // Returns the new parameter; m and v are updated in place.
  KOKKOS_INLINE_FUNCTION float operator()(float param, float& m, float& v, float grad) const {
    const float g = grad * grad_scale;
    const float mi = b1 * m + (1.0f - b1) * g;
    const float vi = b2 * v + (1.0f - b2) * g * g;
    m = mi;
    v = vi;
    return param * decay - lr * (mi * inv_bc1) / (kmath::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
};

// Updates param, m, v in place from grad. `grad_scale` multiplies the gradient first (used
// for clipping), so the clipped gradient is never materialised.
inline void adamw_update(const Exec& exec, const Vec& param, const Vec& m, const Vec& v,
                         const ConstVec& grad, AdamWHyper h, float grad_scale) {
  Region region("trident::adamw_update");
  const AdamWElement update(h, grad_scale);
  Kokkos::parallel_for(
      "adamw_update", Kokkos::RangePolicy<Exec>(exec, 0, param.extent(0)), KOKKOS_LAMBDA(size_t i) {
        float mi = m(i), vi = v(i);
        param(i) = update(param(i), mi, vi, grad(i));
        m(i) = mi;
        v(i) = vi;
      });
}

// The same on fp32 master weights, also writing each new value rounded to fp16 into `rounded`
// (the compute copy): one pass over memory instead of two. Each work item updates a block, then
// rounds it while it is still in cache: two inner loops that each vectorise on CPUs (one loop
// over all five arrays did not, at a third of the speed). GPUs take one element per thread.
constexpr size_t kAdamWBlock = 2048;

inline void adamw_update(const Exec& exec, const Vec& param, const Vec& m, const Vec& v,
                         const ConstVec& grad, AdamWHyper h, float grad_scale,
                         const HalfVec& rounded) {
  Region region("trident::adamw_update");
  const AdamWElement update(h, grad_scale);
  const size_t n = param.extent(0);
  if (kBuildShape == Shape::kGpu) {  // one element per thread: neighbours read neighbours
    Kokkos::parallel_for(
        "adamw_update_rounded", Kokkos::RangePolicy<Exec>(exec, 0, n), KOKKOS_LAMBDA(size_t i) {
          float mi = m(i), vi = v(i);
          const float p = update(param(i), mi, vi, grad(i));
          param(i) = p;
          m(i) = mi;
          v(i) = vi;
          rounded(i) = to_fp16(p);
        });
    return;
  }
  const size_t blocks = (n + kAdamWBlock - 1) / kAdamWBlock;
  Kokkos::parallel_for(
      "adamw_update_rounded", Kokkos::RangePolicy<Exec>(exec, 0, blocks), KOKKOS_LAMBDA(size_t b) {
        const size_t begin = b * kAdamWBlock;
        const size_t end = begin + kAdamWBlock < n ? begin + kAdamWBlock : n;
        for (size_t i = begin; i < end; ++i) {
          float mi = m(i), vi = v(i);
          param(i) = update(param(i), mi, vi, grad(i));
          m(i) = mi;
          v(i) = vi;
        }
        for (size_t i = begin; i < end; ++i) rounded(i) = to_fp16(param(i));
      });
}

// The same on bf16 master weights split in two halves (core/half.hpp): each value is joined from
// `high` (the compute copy) and `low`, updated, and split back into both. Blocked on CPUs as
// above, so that each inner loop vectorises.
inline void adamw_update_split(const Exec& exec, const HalfVec& high, const HalfVec& low,
                               const Vec& m, const Vec& v, const ConstVec& grad, AdamWHyper h,
                               float grad_scale) {
  Region region("trident::adamw_update");
  const AdamWElement update(h, grad_scale);
  const size_t n = high.extent(0);
  if (kBuildShape == Shape::kGpu) {
    Kokkos::parallel_for(
        "adamw_update_split", Kokkos::RangePolicy<Exec>(exec, 0, n), KOKKOS_LAMBDA(size_t i) {
          float mi = m(i), vi = v(i);
          const float p = update(join_bf16(high(i), low(i)), mi, vi, grad(i));
          m(i) = mi;
          v(i) = vi;
          const uint16_t upper = bf16_high(p);
          high(i) = upper;
          low(i) = bf16_low(p, upper);
        });
    return;
  }
  const size_t blocks = (n + kAdamWBlock - 1) / kAdamWBlock;
  Kokkos::parallel_for(
      "adamw_update_split", Kokkos::RangePolicy<Exec>(exec, 0, blocks), KOKKOS_LAMBDA(size_t b) {
        const size_t begin = b * kAdamWBlock;
        const size_t end = begin + kAdamWBlock < n ? begin + kAdamWBlock : n;
        float updated[kAdamWBlock];
        for (size_t i = begin; i < end; ++i) {
          float mi = m(i), vi = v(i);
          updated[i - begin] = update(join_bf16(high(i), low(i)), mi, vi, grad(i));
          m(i) = mi;
          v(i) = vi;
        }
        for (size_t i = begin; i < end; ++i) {
          const uint16_t upper = bf16_high(updated[i - begin]);
          high(i) = upper;
          low(i) = bf16_low(updated[i - begin], upper);
        }
      });
}

// One piece of a rank's owned elements for the single-launch update (GPUs): where it starts among
// the owned elements (`compact`, where its moments are) and in the flat buffers, and whether its
// tensor takes weight decay. Pieces are in compact order, back to back.
struct AdamWPiece {
  int64_t compact, flat;
  int kind;  // kDecays, kNoDecay, or kPadding: owned elements of no tensor, left as they are
  static constexpr int kDecays = 0, kNoDecay = 1, kPadding = 2;
};
using AdamWPieces = Kokkos::View<const AdamWPiece*, Device>;

// The piece holding owned element j: the last whose start is at or before j.
KOKKOS_INLINE_FUNCTION AdamWPiece piece_of(const AdamWPieces& pieces, int64_t j) {
  int lo = 0, hi = static_cast<int>(pieces.extent(0)) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (pieces(mid).compact <= j)
      lo = mid;
    else
      hi = mid - 1;
  }
  return pieces(lo);
}

// Every owned element of every tensor in one launch, one element per thread (GPUs: a launch per
// tensor was 148 launches a GPT-2 step, most of them biases and gains too small to fill the
// device). f(j, flat, update) updates owned element j, at `flat` of the flat buffers, with its
// tensor's update (with or without weight decay): the arithmetic of adamw_update, bit for bit.
// With `grad_scale_at`, the gradient's scale is read there (device memory) instead of grad_scale.
template <class F>
inline void adamw_update_pieces(const Exec& exec, const char* label, const AdamWPieces& pieces,
                                int64_t count, AdamWHyper h, float grad_scale, const F& f,
                                const float* grad_scale_at = nullptr) {
  Region region("trident::adamw_update");
  const AdamWElement decayed(h, grad_scale, grad_scale_at);
  h.weight_decay = 0.0f;
  const AdamWElement plain(h, grad_scale, grad_scale_at);
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<Exec>(exec, 0, count), KOKKOS_LAMBDA(int64_t j) {
        const AdamWPiece p = piece_of(pieces, j);
        if (p.kind != AdamWPiece::kPadding)
          f(j, p.flat + (j - p.compact),
            (p.kind == AdamWPiece::kDecays ? decayed : plain).resolved());
      });
}

// The global gradient norm and AdamW's gradient scale, computed where the squares are (no wait
// for the host): norm = grad_scale sqrt(squares), and the scale grad_scale times max_norm /
// (norm + 1e-6) where norm exceeds max_norm > 0, else grad_scale: Trainer's arithmetic on the
// host, in the same double operations, so the same bits.
inline void clip_scale(const Exec& exec, const Kokkos::View<double, MemSpace>& squares,
                       double grad_scale, double max_norm,
                       const Kokkos::View<double, MemSpace>& norm,
                       const Kokkos::View<float, MemSpace>& scale) {
  Kokkos::parallel_for(
      "clip_scale", Kokkos::RangePolicy<Exec>(exec, 0, 1), KOKKOS_LAMBDA(int) {
        const double n = grad_scale * kmath::sqrt(squares());
        norm() = n;
        scale() = static_cast<float>(grad_scale *
                                     (max_norm > 0 && n > max_norm ? max_norm / (n + 1e-6) : 1.0));
      });
}

// The squares of kSquareSegments contiguous segments of x, one work item each, reduced as an
// array whose slot s only segment s writes: joining per-thread copies adds zeros, so the result is
// the same bits whatever the number of threads (a scalar parallel_reduce joins partial sums whose
// ranges depend on it). Inside a segment, float lanes over blocks of kSquareBlock, summed in
// double.
constexpr int kSquareSegments = 64;
constexpr size_t kSquareBlock = 1024;

struct SegmentSquares {
  using value_type = double[];
  using size_type = int;
  unsigned value_count = kSquareSegments;
  ConstVec x;
  size_t segment_length;

  KOKKOS_INLINE_FUNCTION void operator()(int segment, value_type sums) const {
    const size_t n = x.extent(0);
    const size_t begin = segment * segment_length;
    const size_t end = begin + segment_length < n ? begin + segment_length : n;
    double total = 0.0;
    for (size_t block = begin; block < end; block += kSquareBlock) {
      const int length = static_cast<int>(end - block < kSquareBlock ? end - block : kSquareBlock);
      total += kmath::lane_sum(length, [&](int i) { return x(block + i) * x(block + i); });
    }
    sums[segment] += total;
  }
  KOKKOS_INLINE_FUNCTION void init(value_type sums) const {
    for (unsigned s = 0; s < value_count; ++s) sums[s] = 0.0;
  }
  KOKKOS_INLINE_FUNCTION void join(value_type into, const value_type from) const {
    for (unsigned s = 0; s < value_count; ++s) into[s] += from[s];
  }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type into, const volatile value_type from) const {
    for (unsigned s = 0; s < value_count; ++s) into[s] += from[s];
  }
};

// sum_i x_i^2 in double on host spaces (the CPU shape), for the global gradient norm:
// bit-identical at every thread count.
inline double host_sum_of_squares(const Exec& exec, const ConstVec& x) {
  Region region("trident::sum_of_squares");
  const size_t n = x.extent(0);
  if (n == 0) return 0.0;
  size_t length = (n + kSquareSegments - 1) / kSquareSegments;
  length = (length + kSquareBlock - 1) / kSquareBlock * kSquareBlock;
  const int segments = static_cast<int>((n + length - 1) / length);
  double sums[kSquareSegments];
  Kokkos::parallel_reduce("sum_of_squares", Kokkos::RangePolicy<Exec>(exec, 0, segments),
                          SegmentSquares{kSquareSegments, x, length}, sums);
  exec.fence();
  double total = 0.0;
  for (int s = 0; s < segments; ++s) total += sums[s];
  return total;
}

// A GPU shape's piece of work for the norm: kSquareChunk elements (or a vector's last, fewer) that
// one team squares and sums in double.
struct SquareChunk {
  const float* x;
  int n;
  bool operator==(const SquareChunk& o) const { return x == o.x && n == o.n; }
};
constexpr int kSquareChunk = 65536;

// sums(c) = sum of the squares of chunks(c)'s elements in double, a team per chunk, for c < count:
// SquareSums' one launch (a free function: nvcc takes no device lambda in a private member).
inline void square_chunk_sums(const Exec& exec, const Kokkos::View<SquareChunk*, Device>& chunks,
                              const Kokkos::View<double*, MemSpace>& sums, size_t count) {
  Region region("trident::sum_of_squares");
  Kokkos::parallel_for(
      "sum_of_squares", row_teams(exec, static_cast<int>(count)),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const SquareChunk c = chunks(team.league_rank());
        double sum = 0.0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, c.n),
            [&](int i, double& acc) {
              const double v = c.x[i];
              acc += v * v;
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&] { sums(team.league_rank()) = sum; });
      });
}

// total() = 0 + the sum over vectors v < `vectors` of (0 + the sums of chunks [starts(v),
// starts(v + 1))), in that order: SquareSums::add_to's arithmetic, on the device in one thread.
inline void add_vector_sums(const Exec& exec, const Kokkos::View<size_t*, MemSpace>& starts,
                            const Kokkos::View<double*, MemSpace>& sums, size_t vectors,
                            const Kokkos::View<double, MemSpace>& total) {
  Kokkos::parallel_for(
      "sum_of_squares_total", Kokkos::RangePolicy<Exec>(exec, 0, 1), KOKKOS_LAMBDA(int) {
        double t = 0.0;
        for (size_t v = 0; v < vectors; ++v) {
          double s = 0.0;
          for (size_t c = starts(v); c < starts(v + 1); ++c) s += sums(c);
          t += s;
        }
        total() = t;
      });
}

// The global norm's squares of many vectors, with one launch and one wait. On GPUs (kGpu) every
// queued vector is cut into chunks of kSquareChunk elements, one launch sums each chunk in a team,
// and add_to() reads the chunks' sums and adds each vector's in order: one launch a step where a
// reduction per tensor was 148 for GPT-2, and one synchronisation. On host spaces (kCpu) each
// vector is summed when queued (host_sum_of_squares). add_to() adds the vectors' sums to `total`
// one by one in queue order, so the result is the bits of a loop of sum_of_squares calls in either
// shape. Made once, for at most `capacity` vectors per round; the chunk table goes to the device
// when it differs from the last round's (a step queues the same vectors as the one before).
class SquareSums {
 public:
  explicit SquareSums(size_t capacity = 0, Shape shape = kBuildShape)
      : shape_(shape), capacity_(capacity) {
    host_sums_.reserve(capacity);
    vector_chunks_.reserve(capacity + 1);
  }

  void queue(const Exec& exec, const ConstVec& x) {
    const size_t n = x.extent(0);
    if (n == 0) return;  // adds nothing
    if (queued_ == capacity_) throw std::logic_error("SquareSums: more vectors than slots");
    ++queued_;
    if (shape_ == Shape::kCpu) {
      host_sums_.push_back(host_sum_of_squares(exec, x));
      return;
    }
    if (vector_chunks_.empty()) vector_chunks_.push_back(0);
    for (size_t at = 0; at < n; at += kSquareChunk)
      chunks_.push_back({x.data() + at, static_cast<int>(std::min<size_t>(kSquareChunk, n - at))});
    vector_chunks_.push_back(chunks_.size());
  }

  // total += every queued sum, in queue order; empties the queue.
  void add_to(const Exec& exec, double& total) {
    if (!chunks_.empty()) {
      upload_chunks(exec);
      square_chunk_sums(exec, device_chunks_, chunk_sums_, chunks_.size());
      read_chunk_sums(exec);
    }
    for (const double s : host_sums_) total += s;
    clear();
  }

  // total() = 0 + every queued sum in queue order, the bits add_to() gives, left on the device:
  // the GPU shape adds the chunks' sums there (no wait for the host); the CPU shape, whose sums
  // are on the host already, copies theirs. Empties the queue.
  void sum_on_device(const Exec& exec, const Kokkos::View<double, MemSpace>& total) {
    if (chunks_.empty()) {
      double sum = 0.0;
      for (const double s : host_sums_) sum += s;
      Kokkos::deep_copy(exec, total, sum);
      exec.fence();  // `sum` is a local
    } else {
      upload_chunks(exec);
      square_chunk_sums(exec, device_chunks_, chunk_sums_, chunks_.size());
      add_vector_sums(exec, device_vector_chunks_, chunk_sums_, vector_chunks_.size() - 1, total);
    }
    clear();
  }

 private:
  void clear() {
    queued_ = 0;
    host_sums_.clear();
    chunks_.clear();
    vector_chunks_.clear();
  }

  // The GPU shape's chunk table (and where each vector's chunks start) on the device, copied when
  // it differs from the last round's.
  void upload_chunks(const Exec& exec) {
    const size_t count = chunks_.size();
    if (uploaded_ != chunks_ || uploaded_vectors_ != vector_chunks_) {
      Region region("trident::sum_of_squares_chunks");
      if (device_chunks_.extent(0) < count) {  // the first round, or more chunks than before
        // Every element is written before it is read: no initialising kernels.
        device_chunks_ = Kokkos::View<SquareChunk*, Device>(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "square_chunks"), count);
        host_chunks_ = Kokkos::create_mirror_view(device_chunks_);
        chunk_sums_ = Kokkos::View<double*, MemSpace>(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "square_chunk_sums"), count);
        host_chunk_sums_ = Kokkos::create_mirror_view(chunk_sums_);
      }
      std::copy(chunks_.begin(), chunks_.end(), host_chunks_.data());
      Kokkos::deep_copy(exec, device_chunks_, host_chunks_);
      if (device_vector_chunks_.extent(0) < vector_chunks_.size()) {
        device_vector_chunks_ = Kokkos::View<size_t*, MemSpace>(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "square_vector_chunks"),
            vector_chunks_.size());
        host_vector_chunks_ = Kokkos::create_mirror_view(device_vector_chunks_);
      }
      std::copy(vector_chunks_.begin(), vector_chunks_.end(), host_vector_chunks_.data());
      Kokkos::deep_copy(exec, device_vector_chunks_, host_vector_chunks_);
      exec.fence();  // the host tables are rewritten next time only after the copies
      uploaded_ = chunks_;
      uploaded_vectors_ = vector_chunks_;
    }
  }

  // Each vector's sum of its chunks' sums into host_sums_ (one wait).
  void read_chunk_sums(const Exec& exec) {
    const size_t count = chunks_.size();
    const auto sums = chunk_sums_;
    const auto range = std::make_pair(size_t{0}, count);
    Kokkos::deep_copy(exec, Kokkos::subview(host_chunk_sums_, range), Kokkos::subview(sums, range));
    exec.fence();
    for (size_t v = 0; v + 1 < vector_chunks_.size(); ++v) {
      double sum = 0.0;
      for (size_t c = vector_chunks_[v]; c < vector_chunks_[v + 1]; ++c) sum += host_chunk_sums_(c);
      host_sums_.push_back(sum);
    }
  }

  Shape shape_;
  size_t capacity_, queued_ = 0;
  std::vector<double> host_sums_;
  std::vector<SquareChunk> chunks_, uploaded_;
  std::vector<size_t> vector_chunks_;  // chunks_ index where each queued vector starts, and the end
  std::vector<size_t> uploaded_vectors_;
  Kokkos::View<size_t*, MemSpace> device_vector_chunks_;
  Kokkos::View<size_t*, MemSpace>::HostMirror host_vector_chunks_;
  Kokkos::View<SquareChunk*, Device> device_chunks_;
  Kokkos::View<SquareChunk*, Device>::HostMirror host_chunks_;
  Kokkos::View<double*, MemSpace> chunk_sums_;
  Kokkos::View<double*, MemSpace>::HostMirror host_chunk_sums_;
};

// sum_i x_i^2 in double, for the global gradient norm: on host spaces bit-identical at every
// thread count; on GPUs in the chunks SquareSums sums, deterministic for a given build and GPU.
inline double sum_of_squares(const Exec& exec, const ConstVec& x, Shape shape = kBuildShape) {
  if (shape == Shape::kCpu) return host_sum_of_squares(exec, x);
  SquareSums one(1, shape);
  one.queue(exec, x);
  double total = 0.0;
  one.add_to(exec, total);
  return total;
}

}  // namespace trident::kernels
