// Optimizer-state offload: the file store round-trips, and AdamW streamed from files through a
// small buffer updates exactly like AdamW with resident moments, for a whole buffer or a shard.
// The buffers may live in device memory (GPU builds): the test reads and fills them through host
// copies.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/file_store.hpp"
#include "core/stored.hpp"
#include "model/params.hpp"
#include "optim/adamw.hpp"

using namespace trident;

namespace {
std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("trident_offload_" + name)).string();
}
std::vector<float> values(const View1& v) {
  return host_values(stored_f32(v.data(), v.extent(0)), 0, v.extent(0));
}
void fill(const View1& v, const std::vector<float>& values) {
  set_host_values(stored_f32(v.data(), v.extent(0)), 0, values);
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
    std::vector<float> start(n), grads(n);
    for (int64_t i = 0; i < n; ++i) {
      start[i] = 0.01f * static_cast<float>(i % 17);
      grads[i] = 0.1f * static_cast<float>((i * 7) % 11) - 0.5f;
    }
    fill(p1, start);
    fill(p2, start);
    fill(g, grads);
    for (int s = 0; s < 3; ++s) {
      resident.step(p1, g, 1e-2, 0.7f);
      streamed.step(p2, g, 1e-2, 0.7f);
    }
    ASSERT_EQ(values(p1), values(p2));
    View1 m1("m1", n), v1("v1", n), m2("m2", n), v2("v2", n);
    resident.read_moments(m1, v1);
    streamed.read_moments(m2, v2);
    ASSERT_EQ(values(m1), values(m2));
    const std::vector<float> second = values(v1);
    ASSERT_EQ(second, values(v2));
    int64_t owned_nonzero = 0;
    for (const float v : second) owned_nonzero += v != 0.0f;
    EXPECT_GT(owned_nonzero, 0);
    // Writing moments back (a resumed run) and stepping again still agrees.
    streamed.write_moments(m1, v1);
    resident.step(p1, g, 1e-2, 1.0f);
    streamed.step(p2, g, 1e-2, 1.0f);
    ASSERT_EQ(values(p1), values(p2));
  }
}
