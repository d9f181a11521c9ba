// Context parallelism's split of a sequence: balanced chunks, global positions, and attention
// parts that cover every causal (query, key) pair of the sequence exactly once.
#include <gtest/gtest.h>

#include <vector>

#include "model/context_parallel.hpp"

using namespace trident;

TEST(ContextSplit, RankHoldsChunkRAndItsMirror) {
  const ContextSplit split{4, 1, 32};  // 8 chunks of 4 tokens: rank 1 holds chunks 1 and 6
  EXPECT_EQ(split.chunk(), 4);
  EXPECT_EQ(split.local(), 8);
  const std::vector<int> want{4, 5, 6, 7, 24, 25, 26, 27};
  for (int t = 0; t < split.local(); ++t) EXPECT_EQ(split.position(t), want[t]) << t;
}

// Every query of every rank sees, over the parts of every source, each key at or before its
// position exactly once and no key after it; the first part a query meets starts its softmax
// (merge false) and every later one merges. Balanced, every rank does the same number of score
// products; cut in contiguous blocks, each rank does more than the one before (the imbalance the
// balanced chunks remove: bench/context_parallel.sh shows it in step time).
TEST(ContextSplit, PartsCoverEveryCausalPairOnce) {
  for (const bool balanced : {true, false})
    for (int cp = 1; cp <= 8; ++cp) {
      const int T = 2 * cp * 3;  // chunks of 3
      std::vector<long> work(cp, 0);
      for (int rank = 0; rank < cp; ++rank) {
        const ContextSplit split{cp, rank, T, balanced};
        std::vector<int> seen(size_t(T) * T, 0);  // [query position, key position]
        std::vector<int> parts_met(split.local(), 0);
        for (int step = 0; step < cp; ++step) {
          const int source = (rank + cp - step) % cp;
          const ContextSplit from{cp, source, T, balanced};
          for (const kernels::AttentionPart& part : context_parts(split, source)) {
            ASSERT_GE(part.shift, 0);
            for (int i = 0; i < part.q_rows; ++i) {
              const int q_row = part.q_first + i;
              EXPECT_EQ(part.merge, parts_met[q_row] > 0)
                  << "cp " << cp << " rank " << rank << " source " << source << " row " << q_row;
              ++parts_met[q_row];
              for (int j = 0; j < part.k_rows && j <= i + part.shift; ++j) {
                ++seen[size_t(split.position(q_row)) * T + from.position(part.k_first + j)];
                ++work[rank];
              }
            }
          }
        }
        for (int t = 0; t < split.local(); ++t)
          for (int key = 0; key < T; ++key)
            ASSERT_EQ(seen[size_t(split.position(t)) * T + key], key <= split.position(t) ? 1 : 0)
                << (balanced ? "balanced" : "contiguous") << " cp " << cp << " rank " << rank
                << " query " << split.position(t) << " key " << key;
      }
      for (int rank = 1; rank < cp; ++rank)
        if (balanced)
          EXPECT_EQ(work[rank], work[0]) << "cp " << cp;
        else
          EXPECT_GT(work[rank], work[rank - 1]) << "contiguous cp " << cp;
    }
}
