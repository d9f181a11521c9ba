// Optimizer-state offload: the file store round-trips, and AdamW streamed from files through a
// small buffer updates exactly like AdamW with resident moments, for a whole buffer or a shard.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/file_store.hpp"
#include "model/params.hpp"
#include "optim/adamw.hpp"

using namespace trident;

namespace {
std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("trident_offload_" + name)).string();
}
}  // namespace

TEST(FileStore, StartsZeroRoundTripsAndRemovesItsFile) {
  const std::string path = temp("store");
  {
    FileStore store(path, 1000);
    std::vector<float> out(10, -1.0f), in(10);
    store.read(990, 10, out.data());
    for (float x : out) EXPECT_EQ(x, 0.0f);
    for (int i = 0; i < 10; ++i) in[i] = 0.5f * i;
    store.write(500, 10, in.data());
    store.read(500, 10, out.data());
    EXPECT_EQ(out, in);
    EXPECT_EQ(std::filesystem::file_size(path), 4000u);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(AdamWOffload, StreamedMomentsMatchResidentOnesBitForBit) {
  const ModelConfig m = ModelConfig::gpt2(2, 16, 2, 40, 8);  // L, C, NH, V, block
  const ParamTable table(m);
  // Whole buffer (no ZeRO), and rank 1's shard of every unit when dp = 3.
  for (auto [dp, rank] : {std::pair{1, 0}, std::pair{3, 1}}) {
    const LocalParamTable local(table, m, whole_model(m), dp);
    const int64_t n = local.total_numel();
    MemoryLedger l1, l2;
    AdamW resident(local, l1, AdamWSettings{}, zero_shard(local, dp, rank));
    MomentStorage storage;
    storage.nvme = true;
    storage.path_prefix = temp("adamw");
    storage.buffer_elements = 100;  // many blocks crossing unit boundaries, the last one short
    AdamW streamed(local, l2, AdamWSettings{}, zero_shard(local, dp, rank), storage);
    EXPECT_EQ(l2.peak(MemCategory::kOptimizer), 2 * 100 * sizeof(float));
    // Resident: m and v of its 1/dp shard.
    EXPECT_EQ(l1.peak(MemCategory::kOptimizer) * dp, 2 * static_cast<size_t>(n) * sizeof(float));
    View1 p1("p1", n), p2("p2", n), g("g", n);
    for (int64_t i = 0; i < n; ++i) {
      p1(i) = p2(i) = 0.01f * static_cast<float>(i % 17);
      g(i) = 0.1f * static_cast<float>((i * 7) % 11) - 0.5f;
    }
    for (int s = 0; s < 3; ++s) {
      resident.step(p1, g, 1e-2, 0.7f);
      streamed.step(p2, g, 1e-2, 0.7f);
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p1(i), p2(i)) << i;
    View1 m1("m1", n), v1("v1", n), m2("m2", n), v2("v2", n);
    resident.read_moments(m1, v1);
    streamed.read_moments(m2, v2);
    int64_t owned_nonzero = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(m1(i), m2(i));
      ASSERT_EQ(v1(i), v2(i));
      owned_nonzero += v1(i) != 0.0f;
    }
    EXPECT_GT(owned_nonzero, 0);
    // Writing moments back (a resumed run) and stepping again still agrees.
    streamed.write_moments(m1, v1);
    resident.step(p1, g, 1e-2, 1.0f);
    streamed.step(p2, g, 1e-2, 1.0f);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p1(i), p2(i)) << i;
  }
}
