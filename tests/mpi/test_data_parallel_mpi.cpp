// Data parallelism over 4 ranks with experts folded dp4 x ep2: local SGD's average and async's
// reduction run the experts' part over their replicas (2 ranks each) and the dense part over dp.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "comm/comm.hpp"
#include "comm/grid.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "parallel/data/strategy.hpp"

using namespace trident;

namespace {

ModelConfig tiny_moe() {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.n_layer = 2, m.n_embd = 16, m.n_head = 4, m.n_kv_head = 2, m.vocab_size = 11;
  m.block_size = 8, m.ffn_hidden = 24;
  m.moe.n_experts = 8, m.moe.top_k = 2, m.moe.expert_ffn_hidden = 12, m.moe.moe_layer_every = 2;
  return m;
}

// Sets every element of `v` to `value`.
void fill(const View1& v, float value) {
  Kokkos::deep_copy(v, value);
}

}  // namespace

TEST(DataParallelMpi, LocalSgdAveragesExpertsOverTheirReplicasOnly) {
  int world = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ASSERT_EQ(world, 4);
  GridShape shape;
  shape[Axis::dp] = 4;
  const Grid grid(MPI_COMM_WORLD, shape, 2);
  const ExpertFold fold = grid.experts();
  ASSERT_EQ(fold.expert_dp, 2);
  MpiCommunicator dp(grid.comm(Axis::dp)), experts(grid.expert_comm()),
      replicas(grid.expert_data_comm());
  const ModelConfig m = tiny_moe();
  StageLayout layout = whole_model(m);
  layout.ep_size = fold.ep, layout.ep_rank = fold.ep_rank;
  MemoryLedger ledger;
  PhaseTimer timer;
  GptStage stage(m, layout, nullptr, ledger, 2, 8, 1,
                 DataParallelStrategy::stage_buffers(ZeroStage::kNone, 4, fold.expert_dp),
                 ExpertComms{&experts, grid.expert_comm()});
  DataParallelSettings settings;
  settings.sync = DpSync::kLocalSgd;
  auto strategy = DataParallelStrategy::create(stage, dp, settings, ledger, timer, &replicas);
  // Each rank's parameters all rank + 1: a dense element averages to the mean over the four
  // ranks, an expert's to the mean over the two ranks holding it (the same ep rank).
  fill(stage.params(), static_cast<float>(rank + 1));
  strategy->average_replicas();
  const std::vector<float> after = host_values(
      stored_f32(stage.params().data(), stage.params().extent(0)), 0, stage.params().extent(0));
  double expert_mean = 0;
  for (int r = 0; r < 4; ++r)
    if (expert_fold(shape, grid_coord(shape, r), 2).ep_rank == fold.ep_rank)
      expert_mean += (r + 1) / 2.0;
  int experts_seen = 0;
  for (const LocalParam& p : stage.local().params()) {
    const float want = p.experts() ? static_cast<float>(expert_mean) : 2.5f;
    experts_seen += p.experts() ? 1 : 0;
    for (int64_t i = 0; i < p.numel; ++i)
      ASSERT_EQ(after[static_cast<size_t>(p.offset + i)], want) << p.spec->name << "[" << i << "]";
  }
  EXPECT_EQ(experts_seen, 2);  // experts.fc and experts.proj of the one MoE layer
}
