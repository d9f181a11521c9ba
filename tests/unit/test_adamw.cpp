// AdamW's single launch (the GPU shape): every owned element of every tensor in one kernel gives
// the per-tensor launches' bits, for fp32, fp16 master weights and bf16 split halves, whole and
// as a ZeRO shard with unit padding, and launches once a step.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/launch_profiler.hpp"
#include "core/stored.hpp"
#include "model/params.hpp"
#include "model/partition.hpp"
#include "optim/adamw.hpp"

using namespace trident;

namespace {

std::vector<float> values(const View1& v) {
  return host_values(stored_f32(v.data(), v.extent(0)), 0, v.extent(0));
}
// The bit patterns (a low half read as a number may be a NaN, which equals nothing).
std::vector<uint16_t> bits(const HalfView1& v) {
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<uint16_t>(host.data(), host.data() + host.extent(0));
}
View1 filled(const std::string& label, size_t n, unsigned seed, float scale) {
  View1 v(label, n);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = scale * (static_cast<float>((i * 2654435761u + seed * 97u) % 2001u) / 1000.0f - 1.0f);
  set_host_values(stored_f32(v.data(), n), 0, x);
  return v;
}
HalfView1 rounded(const View1& v, Precision format) {
  HalfView1 h("half", v.extent(0));
  set_host_values(stored_f16(h.data(), h.extent(0), format), 0, values(v));
  return h;
}

// The AdamW kernel launches of one step.
template <class F>
int64_t launches(F&& step) {
  LaunchProfiler profiler;
  profiler.start();
  step();
  profiler.stop();
  int64_t n = 0;
  for (const LaunchRow& row : profiler.rows())
    if (row.label.rfind("adamw_update", 0) == 0) n += row.calls;
  return n;
}

struct Layout {
  int dp, rank;
};

}  // namespace

TEST(AdamW, SingleLaunchGivesThePerTensorLaunchesBits) {
  // Biases, gains and matrices, a vocabulary that is no multiple of the shard count.
  const ModelConfig m = ModelConfig::gpt2(2, 16, 2, 37, 8);
  const ParamTable table(m);
  for (const Layout layout : {Layout{1, 0}, Layout{3, 2}}) {
    SCOPED_TRACE("dp=" + std::to_string(layout.dp) + " rank=" + std::to_string(layout.rank));
    const LocalParamTable local(table, m, whole_model(m), layout.dp);
    const std::vector<Segment> owned = zero_shard(local, layout.dp, layout.rank);
    int64_t count = 0;
    for (const Segment& s : owned) count += s.size();
    const size_t n = local.total_numel();
    const View1 grads = filled("grads", n, 1, 0.5f);
    for (const Precision format : {Precision::kFp32, Precision::kFp16, Precision::kBf16}) {
      SCOPED_TRACE(name_of(format));
      MemoryLedger l1, l2;
      AdamW per_tensor(local, l1, AdamWSettings{}, owned, {}, kernels::Shape::kCpu);
      AdamW single(local, l2, AdamWSettings{}, owned, {}, kernels::Shape::kGpu);
      if (format == Precision::kFp32) {
        const View1 p1 = filled("p1", n, 2, 1.0f), p2 = filled("p2", n, 2, 1.0f);
        for (int s = 0; s < 3; ++s) {
          per_tensor.step(p1, grads, 1e-2, 0.5f);
          EXPECT_EQ(launches([&] { single.step(p2, grads, 1e-2, 0.5f); }), 1);
        }
        ASSERT_EQ(values(p1), values(p2));
      } else {
        // Master weights compact (one per owned element), the compute copy flat.
        const View1 start = filled("start", n, 3, 1.0f);
        const HalfView1 c1 = rounded(start, format), c2 = rounded(start, format);
        View1 v1("values", format == Precision::kFp16 ? count : 0), v2("values", v1.extent(0));
        HalfView1 low1("low", format == Precision::kBf16 ? count : 0), low2("low", low1.extent(0));
        const MasterParams a{{c1, Placement::kFlat, format}, v1, low1};
        const MasterParams b{{c2, Placement::kFlat, format}, v2, low2};
        for (int s = 0; s < 3; ++s) {
          per_tensor.step(a, grads, Placement::kFlat, 1e-2, 0.5f);
          EXPECT_EQ(launches([&] { single.step(b, grads, Placement::kFlat, 1e-2, 0.5f); }), 1);
        }
        ASSERT_EQ(bits(c1), bits(c2));
        ASSERT_EQ(values(v1), values(v2));
        ASSERT_EQ(bits(low1), bits(low2));
      }
      View1 m1("m1", n), va("v1", n), m2("m2", n), vb("v2", n);
      per_tensor.read_moments(m1, va);
      single.read_moments(m2, vb);
      const std::vector<float> second = values(va);
      ASSERT_EQ(values(m1), values(m2));
      ASSERT_EQ(second, values(vb));
      size_t moved = 0;
      for (const float x : second) moved += x != 0.0f;
      EXPECT_GT(moved, 0u);
      EXPECT_EQ(single.steps_taken(), 3);
    }
  }
}

// AdamW reading its gradient's scale on the device (kernels::clip_scale's output: the clip with
// no wait for the host) gives the bits of the scale passed by value, in the single launch and the
// per-tensor launches, and goes back to the argument when told.
TEST(AdamW, ScaleReadOnTheDeviceGivesTheArgumentsBits) {
  const ModelConfig m = ModelConfig::gpt2(2, 16, 2, 37, 8);
  const ParamTable table(m);
  const LocalParamTable local(table, m, whole_model(m), 1);
  const size_t n = local.total_numel();
  const View1 grads = filled("grads", n, 4, 0.5f);
  const Kokkos::View<float, MemSpace> scale("scale");
  Kokkos::deep_copy(scale, 0.3f);
  for (const kernels::Shape shape : {kernels::Shape::kCpu, kernels::Shape::kGpu}) {
    MemoryLedger l1, l2;
    AdamW by_value(local, l1, AdamWSettings{}, {}, {}, shape);
    AdamW on_device(local, l2, AdamWSettings{}, {}, {}, shape);
    ASSERT_TRUE(on_device.read_grad_scale_from(scale.data()));
    const View1 p1 = filled("p1", n, 5, 1.0f), p2 = filled("p2", n, 5, 1.0f);
    for (int s = 0; s < 2; ++s) {
      by_value.step(p1, grads, 1e-2, 0.3f);
      on_device.step(p2, grads, 1e-2, 123.0f);  // the argument is not read
    }
    ASSERT_EQ(values(p1), values(p2)) << (shape == kernels::Shape::kGpu ? "gpu" : "cpu");
    ASSERT_TRUE(on_device.read_grad_scale_from(nullptr));
    by_value.step(p1, grads, 1e-2, 0.7f);
    on_device.step(p2, grads, 1e-2, 0.7f);
    ASSERT_EQ(values(p1), values(p2));
  }
}

// The per-tensor path launches once for each piece of a tensor it owns: many more.
TEST(AdamW, PerTensorLaunchesAreManyMore) {
  const ModelConfig m = ModelConfig::gpt2(2, 16, 2, 37, 8);
  const ParamTable table(m);
  const LocalParamTable local(table, m, whole_model(m));
  MemoryLedger ledger;
  AdamW per_tensor(local, ledger, AdamWSettings{}, {}, {}, kernels::Shape::kCpu);
  const View1 p = filled("p", local.total_numel(), 2, 1.0f);
  const View1 g = filled("g", local.total_numel(), 1, 0.5f);
  EXPECT_EQ(launches([&] { per_tensor.step(p, g, 1e-2, 1.0f); }),
            static_cast<int64_t>(local.params().size()));
}
