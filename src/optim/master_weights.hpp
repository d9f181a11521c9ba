// fp32 master weights for 16-bit training: the optimizer updates these over the rank's owned
// segments (its ZeRO shard, or everything), and the 16-bit parameters are rounded from them.
#pragma once

#include <vector>

#include "core/half.hpp"
#include "core/memory.hpp"
#include "model/params.hpp"
#include "model/partition.hpp"

namespace trident {

class MasterWeights {
 public:
  MasterWeights(const LocalParamTable& local, std::vector<Segment> owned, MemoryLedger& ledger);
  // The counter-based initial values of the owned elements (what GptStage::init_params rounds).
  void init(uint64_t seed);
  // Compact: the owned segments one after another, as AdamW's moments.
  const View1& values() const { return values_; }
  // Writes round(master) into the owned positions of the 16-bit flat buffer.
  void round_into(const HalfView1& params16, Precision p) const;
  // Owned positions of a full-layout fp32 buffer <- / -> the master values.
  void read_full(const View1& full) const;
  void write_full(const View1& full);

 private:
  const LocalParamTable& local_;
  std::vector<Segment> owned_;
  View1 values_;
};

}  // namespace trident
