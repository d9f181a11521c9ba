// ZeRO's flat partition: a rank's (stage, tp slice) buffer split into dp equal, padded shards.
#pragma once

#include <algorithm>
#include <cstdint>

namespace trident {

struct ZeroPartition {
  int64_t total = 0;  // elements in the unpadded flat buffer
  int dp = 1, rank = 0;

  // Elements per shard: ceil(total / dp); the buffer is padded to shard * dp.
  int64_t shard() const { return (total + dp - 1) / dp; }
  int64_t padded() const { return shard() * dp; }
  // This rank's shard [begin, end) of the unpadded buffer (the last may be short or empty).
  int64_t begin() const { return std::min(total, rank * shard()); }
  int64_t end() const { return std::min(total, (rank + 1) * shard()); }
};

}  // namespace trident
