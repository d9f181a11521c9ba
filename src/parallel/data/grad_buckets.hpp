// Data-parallel gradient reduction in buckets, each all-reduced over dp as soon as backward has
// finished every gradient in it, so communication overlaps the rest of backward. Experts' gradients
// (expert parallelism) are summed over their own replicas, the expert-data-parallel group.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/comm.hpp"
#include "core/half.hpp"
#include "core/memory.hpp"
#include "core/types.hpp"
#include "model/partition.hpp"

namespace trident {

class GradBuckets {
 public:
  // Buckets of `bucket_elems` tile `grads` from its end, because backward finishes the last
  // layers (highest offsets) first.
  // With `reduce` bf16 or fp16 each bucket is rounded into a 16-bit copy (a communication buffer
  // in `ledger`), summed in that format and widened back: half the bytes on the wire.
  // Ranges listed in `expert_ranges` are summed over `expert_dp` instead of dp (a bucket never
  // holds both kinds).
  GradBuckets(View1 grads, size_t bucket_elems, Communicator* dp,
              Precision reduce = Precision::kFp32, MemoryLedger* ledger = nullptr,
              const std::vector<Segment>& expert_ranges = {}, Communicator* expert_dp = nullptr);
  // Whether the coming backward pass is the last of the step (its gradients become final).
  void arm(bool final_pass) { armed_ = final_pass; }
  // Gradients at offsets >= `offset` are final: start every bucket lying wholly above it.
  void ready_from(int64_t offset);
  // Starts the remaining buckets and waits for all; leaves the dp-summed gradient.
  void finish();

 private:
  View1 grads_;
  Communicator* dp_;
  Precision reduce_;
  HalfView1 grads16_;                 // 16-bit reduction: the buckets in flight
  std::vector<int64_t> begin_, end_;  // bucket k covers [begin_[k], end_[k]); k = 0 is the last
  std::vector<Communicator*> comm_;   // bucket k's group: dp, or the experts' replicas
  std::vector<Request> requests_;
  bool communicates_ = false;  // some bucket has a group of several ranks
  size_t launched_ = 0;
  bool armed_ = false;
};

}  // namespace trident
