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

// Who shares a unit's ZeRO shards: the dp ranks, or for an expert unit (expert tensors form units
// of their own where their replicas are not the dp ranks: expert parallelism, or tp ranks routing
// their own rows) the experts' replicas (Grid::expert_data_comm).
struct ShardGroups {
  int dp = 1, dp_rank = 0;
  int expert_dp = 1, expert_dp_rank = 0;
  int parts(const ParamUnit& u) const { return u.experts ? expert_dp : dp; }
  int index(const ParamUnit& u) const { return u.experts ? expert_dp_rank : dp_rank; }
  // This rank's part of unit u: its elements, and where they start in the flat buffer.
  int64_t part(const ParamUnit& u) const { return u.padded / parts(u); }
  int64_t part_begin(const ParamUnit& u) const { return u.offset + index(u) * part(u); }
};

// The segments this rank owns: its part of every unit, split into equal parts over the unit's
// group (the table must have been laid out with the groups' sizes as unit alignments). With
// groups of one, every unit whole.
inline std::vector<Segment> zero_shard(const LocalParamTable& table, const ShardGroups& g) {
  std::vector<Segment> out;
  for (const ParamUnit& u : table.units())
    out.push_back({g.part_begin(u), g.part_begin(u) + g.part(u)});
  return out;
}
// The same where every unit is shared by the dp ranks.
inline std::vector<Segment> zero_shard(const LocalParamTable& table, int dp, int dp_rank) {
  return zero_shard(table, ShardGroups{dp, dp_rank, dp, dp_rank});
}

}  // namespace trident
