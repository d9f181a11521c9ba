// Master weights for 16-bit training over the rank's owned segments (its ZeRO shard, or
// everything): what AdamW updates, with the 16-bit compute copy forward and backward read.
#pragma once

#include <vector>

#include "core/half.hpp"
#include "core/memory.hpp"
#include "model/params.hpp"
#include "model/partition.hpp"
#include "optim/adamw.hpp"

namespace trident {

// fp16 keeps fp32 master weights beside the compute copy (4 + 2 bytes a parameter). bf16 keeps
// only each master weight's low half: its upper half is the compute copy itself (bf16_high), so
// the pair is the fp32 value exactly in 4 bytes (core/half.hpp). Either way AdamW sees the same
// fp32 values and computes the same new ones.
class MasterWeights {
 public:
  // `compute`: the 16-bit parameters (flat, or compact as a ZeRO-3 shard) whose owned
  // positions this rank's optimizer writes.
  MasterWeights(const LocalParamTable& local, std::vector<Segment> owned, RoundedCopy compute,
                MemoryLedger& ledger);
  // The counter-based initial values of the owned elements, and their compute copy.
  void init(uint64_t seed);
  // What AdamW::step updates.
  const MasterParams& params() const { return params_; }
  // The owned positions of a full-layout fp32 buffer <- the master values; and the master values
  // (and their compute copy) <- those positions.
  void read_full(const View1& full) const;
  void write_full(const View1& full) { assign(full, Placement::kFlat); }
  // The owned master values (and their compute copy) <- `source`, at flat positions or compact.
  // (Public: nvcc compiles no device lambda inside a private member.)
  void assign(const View1& source, Placement source_at);

 private:
  bool split() const { return params_.compute.format == Precision::kBf16; }
  // Calls f(flat, compact, n) for each owned segment: flat position, compact position, length.
  template <class F>
  void for_owned(F&& f) const {
    int64_t compact = 0;
    for (const Segment& s : owned_) {
      f(s.begin, compact, s.size());
      compact += s.size();
    }
  }

  const LocalParamTable& local_;
  std::vector<Segment> owned_;
  int64_t count_ = 0;  // owned elements
  MasterParams params_;
};

}  // namespace trident
