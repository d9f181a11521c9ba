// AdamW on a flat fp32 shard (decoupled weight decay), and the squared-norm reduction.
#pragma once

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

  AdamWElement(AdamWHyper h, float scale)
      : b1(h.beta1),
        b2(h.beta2),
        eps(h.eps),
        lr(h.lr),
        inv_bc1(1.0f / (1.0f - static_cast<float>(std::pow(h.beta1, h.step)))),
        inv_sqrt_bc2(1.0f / std::sqrt(1.0f - static_cast<float>(std::pow(h.beta2, h.step)))),
        decay(1.0f - h.lr * h.weight_decay),
        grad_scale(scale) {}

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
template <class F>
inline void adamw_update_pieces(const Exec& exec, const char* label, const AdamWPieces& pieces,
                                int64_t count, AdamWHyper h, float grad_scale, const F& f) {
  Region region("trident::adamw_update");
  const AdamWElement decayed(h, grad_scale);
  h.weight_decay = 0.0f;
  const AdamWElement plain(h, grad_scale);
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<Exec>(exec, 0, count), KOKKOS_LAMBDA(int64_t j) {
        const AdamWPiece p = piece_of(pieces, j);
        if (p.kind != AdamWPiece::kPadding)
          f(j, p.flat + (j - p.compact), p.kind == AdamWPiece::kDecays ? decayed : plain);
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

// sum_i x_i^2 in double, for the global gradient norm; bit-identical at every thread count. GPUs
// reduce element-wise in Kokkos' block tree instead (64 segments would be 64 threads), which is
// deterministic for a given launch.
inline double sum_of_squares(const Exec& exec, const ConstVec& x, Shape shape = kBuildShape) {
  Region region("trident::sum_of_squares");
  const size_t n = x.extent(0);
  if (n == 0) return 0.0;
  if (shape == Shape::kGpu) {
    double total = 0.0;
    Kokkos::parallel_reduce(
        "sum_of_squares", Kokkos::RangePolicy<Exec>(exec, 0, n),
        KOKKOS_LAMBDA(size_t i, double& acc) {
          const double v = x(i);
          acc += v * v;
        },
        total);
    return total;
  }
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

// The global norm's squares of many vectors, with one wait. On GPUs (kGpu) each vector's sum is
// reduced into its own slot of a device buffer, queued behind the kernels that wrote the vector,
// and add_to() reads every slot at once: one synchronisation a step, not one per tensor. On host
// spaces (kCpu) each is summed when queued (sum_of_squares). add_to() adds the sums to `total` one
// by one in queue order, so the result is the bits of a loop of sum_of_squares calls. Made once,
// for at most `capacity` vectors per round.
class SquareSums {
 public:
  explicit SquareSums(size_t capacity = 0, Shape shape = kBuildShape)
      : shape_(shape), slots_("square_sums", shape == Shape::kGpu ? capacity : 0) {
    host_slots_ = Kokkos::create_mirror_view(slots_);
    host_sums_.reserve(capacity);
  }

  void queue(const Exec& exec, const ConstVec& x) {
    const size_t n = x.extent(0);
    if (n == 0) return;  // adds nothing
    if (shape_ == Shape::kCpu) {
      host_sums_.push_back(sum_of_squares(exec, x, shape_));
      return;
    }
    if (queued_ == slots_.extent(0)) throw std::logic_error("SquareSums: more vectors than slots");
    Region region("trident::sum_of_squares");
    Kokkos::parallel_reduce(
        "sum_of_squares", Kokkos::RangePolicy<Exec>(exec, 0, n),
        KOKKOS_LAMBDA(size_t i, double& acc) {
          const double v = x(i);
          acc += v * v;
        },
        Kokkos::subview(slots_, queued_));
    ++queued_;
  }

  // total += every queued sum, in queue order; empties the queue.
  void add_to(const Exec& exec, double& total) {
    if (queued_ > 0) {
      const auto range = std::make_pair(size_t{0}, queued_);
      Kokkos::deep_copy(exec, Kokkos::subview(host_slots_, range), Kokkos::subview(slots_, range));
      exec.fence();
      for (size_t i = 0; i < queued_; ++i) total += host_slots_(i);
    }
    for (const double s : host_sums_) total += s;
    queued_ = 0;
    host_sums_.clear();
  }

 private:
  Shape shape_;
  Kokkos::View<double*, MemSpace> slots_;
  Kokkos::View<double*, MemSpace>::HostMirror host_slots_;
  std::vector<double> host_sums_;
  size_t queued_ = 0;
};

}  // namespace trident::kernels
