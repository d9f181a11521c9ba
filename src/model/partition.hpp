// ZeRO's partition: in every unit of a rank's flat (stage, tp slice) buffer, dp equal shards.
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.hpp"

namespace trident {

// A contiguous range [begin, end) of the flat buffer.
struct Segment {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// The segments dp rank `dp_rank` owns: the dp_rank-th of dp equal parts of every unit (the table
// must have been laid out with unit alignment dp). With dp == 1, every unit whole.
inline std::vector<Segment> zero_shard(const LocalParamTable& table, int dp, int dp_rank) {
  std::vector<Segment> out;
  for (const ParamUnit& u : table.units()) {
    const int64_t part = u.padded / dp;
    out.push_back({u.offset + dp_rank * part, u.offset + (dp_rank + 1) * part});
  }
  return out;
}

}  // namespace trident
