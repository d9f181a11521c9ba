// The whole GPT on one rank: gradients against finite differences, micro-batching and
// determinism.
#include <gtest/gtest.h>

#include <cmath>

#include "core/hash.hpp"
#include "model/gpt.hpp"
#include "model/params.hpp"

using namespace trident;

namespace {

ModelConfig tiny() {
  return ModelConfig::gpt2(2, 16, 2, 11, 8);  // L, C, NH, V, block
}

void batch(int B, int T, int V, std::vector<int32_t>& in, std::vector<int32_t>& tg) {
  in.resize(B * T);
  tg.resize(B * T);
  for (int i = 0; i < B * T; ++i) {
    in[i] = static_cast<int32_t>(mix64(i) % V);
    tg[i] = static_cast<int32_t>(mix64(i + 1000) % V);
  }
}

}  // namespace

TEST(Gpt, GradientsMatchFiniteDifferences) {
  const ModelConfig m = tiny();
  MemoryLedger ledger;
  const int B = 2, T = 6;
  GptStage model(m, whole_model(m), nullptr, ledger, B, T, 1);
  model.init_params(3);
  // Larger weights than GPT-2's 0.02 so every path contributes visibly to the loss; h = 1e-3
  // and an absolute floor of 5e-2 on the relative error absorb float rounding of the loss.
  auto p = model.params();
  for (size_t i = 0; i < p.extent(0); ++i) p(i) *= 10.0f;
  std::vector<int32_t> in, tg;
  batch(B, T, m.vocab_size, in, tg);
  const float scale = 1.0f / (B * T);
  model.zero_grads();
  model.forward(0, in.data(), tg.data(), B, T);
  model.backward(0, scale, {});
  auto g = model.grads();
  for (const ParamSpec& s : model.table().specs()) {
    // The comparison means something only where the gradient is not ~0: each tensor must have
    // a sampled element that moves the loss visibly (else a path dropped out of backward).
    double largest = 0;
    for (int k = 0; k < 3; ++k) {  // three elements of every tensor
      const int64_t i = s.offset + static_cast<int64_t>(mix64(k * 31 + s.offset) % s.numel());
      const float saved = p(i), h = 1e-3f;
      p(i) = saved + h;
      const double fp = model.forward(0, in.data(), tg.data(), B, T) * scale;
      p(i) = saved - h;
      const double fm = model.forward(0, in.data(), tg.data(), B, T) * scale;
      p(i) = saved;
      const double numeric = (fp - fm) / (2 * h);
      const double err = std::abs(numeric - g(i)) / std::max(5e-2, std::abs(numeric));
      EXPECT_LT(err, 5e-2) << s.name << "[" << i - s.offset << "] numeric " << numeric
                           << " analytic " << g(i);
      largest = std::max(largest, std::abs(numeric));
    }
    EXPECT_GT(largest, 1e-4) << s.name << ": no sampled element moves the loss";
  }
}

TEST(Gpt, MicroBatchesAccumulateToTheFullBatchGradient) {
  const ModelConfig m = tiny();
  const int B = 4, T = 8;
  std::vector<int32_t> in, tg;
  batch(B, T, m.vocab_size, in, tg);
  MemoryLedger l1, l2;
  GptStage whole(m, whole_model(m), nullptr, l1, B, T, 1);
  GptStage split(m, whole_model(m), nullptr, l2, 2, T, 1);
  whole.init_params(5);
  split.init_params(5);
  whole.zero_grads();
  const double loss_whole = whole.forward(0, in.data(), tg.data(), B, T);
  whole.backward(0, 1.0f / (B * T), {});
  split.zero_grads();
  double loss_split = 0;
  for (int first = 0; first < B; first += 2) {
    loss_split += split.forward(0, in.data() + first * T, tg.data() + first * T, 2, T);
    split.backward(0, 1.0f / (B * T), {});
  }
  EXPECT_NEAR(loss_whole, loss_split, 1e-4 * std::abs(loss_whole));
  auto a = whole.grads(), b = split.grads();
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < a.extent(0); ++i) {
    max_abs = std::max<double>(max_abs, std::abs(a(i)));
    max_diff = std::max<double>(max_diff, std::abs(a(i) - b(i)));
  }
  EXPECT_LT(max_diff, 1e-5 * max_abs + 1e-9);
}

TEST(Gpt, InitialLossIsNearLogVocabAndRunsAreDeterministic) {
  const ModelConfig m = tiny();
  const int B = 3, T = 8;
  std::vector<int32_t> in, tg;
  batch(B, T, m.vocab_size, in, tg);
  MemoryLedger ledger;
  GptStage model(m, whole_model(m), nullptr, ledger, B, T, 1);
  model.init_params(9);
  const double loss = model.forward(0, in.data(), tg.data(), B, T) / (B * T);
  EXPECT_NEAR(loss, std::log(m.vocab_size), 0.05);
  EXPECT_EQ(model.forward(0, in.data(), tg.data(), B, T) / (B * T), loss);
  EXPECT_GT(ledger.peak(MemCategory::kParams), 0u);
  EXPECT_EQ(ledger.peak(MemCategory::kParams), model.table().total_numel() * sizeof(float));
}

// Zero-bubble schedules split backward into an input-gradient pass and a deferred weight-gradient
// pass; both must give the fused backward's gradients exactly, in every precision and
// recomputation policy, on first, middle-less, last and whole stages, with two micro-batches'
// weight passes pending at once.
TEST(Gpt, SplitBackwardMatchesFusedBitForBit) {
  const ModelConfig m = ModelConfig::gpt2(2, 16, 2, 11, 8);
  const int B = 2, T = 6, N = B * T;
  std::vector<int32_t> in[2], tg[2];
  batch(B, T, m.vocab_size, in[0], tg[0]);
  for (int i = 0; i < N; ++i) {
    in[1].push_back((in[0][i] + 3) % m.vocab_size);
    tg[1].push_back((tg[0][i] + 5) % m.vocab_size);
  }
  const Recompute policies[] = {{RecomputePolicy::kNone, 0},
                                {RecomputePolicy::kSelective, 0},
                                {RecomputePolicy::kFull, 0},
                                {RecomputePolicy::kFull, 1}};
  int compared = 0;
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kFp16})
    for (const Recompute& recompute : policies)
      for (int stage = -1; stage < 2; ++stage) {  // -1: the whole model; else pp rank of 2
        SCOPED_TRACE(std::string(name_of(precision)) + " recompute " + name_of(recompute.policy) +
                     "/" + std::to_string(recompute.layers) + " stage " + std::to_string(stage));
        const StageLayout layout =
            stage < 0 ? whole_model(m) : stage_layout(m, 2, 1, stage, 0, 1, 0);
        StageBuffers buffers;
        buffers.precision = precision;
        buffers.recompute = recompute;
        MemoryLedger l1, l2;
        GptStage fused(m, layout, nullptr, l1, B, T, 2, buffers);
        buffers.deferred_sets = 2;
        GptStage split(m, layout, nullptr, l2, B, T, 2, buffers);
        // Each set keeps, per block, four [N,C] gradients, fc's [N,4C] and qkv's [N,3C]; the
        // stage input's and the final LayerNorm's where the stage has them; in stored width.
        const size_t NC = static_cast<size_t>(N) * m.n_embd;
        const size_t blocks = layout.last_layer - layout.first_layer;
        const size_t per_set =
            blocks * 11 * NC + (layout.has_embedding ? NC : 0) + (layout.has_head ? NC : 0);
        EXPECT_EQ(l2.peak(MemCategory::kActivations) - l1.peak(MemCategory::kActivations),
                  2 * per_set * (precision == Precision::kFp32 ? 4 : 2));
        fused.init_params(11);
        split.init_params(11);
        fused.zero_grads();
        split.zero_grads();
        // The input a later stage receives and the output gradient an earlier one does.
        // An upstream gradient in the storage format (what the pipeline runner receives).
        MemoryLedger received;
        const StoredTensor grad_output =
            allocate_stored(received, MemCategory::kCommBuffers, "grad_output",
                            static_cast<size_t>(N) * m.n_embd, precision);
        for (size_t i = 0; i < grad_output.size(); ++i) {
          const float v = 1e-3f * static_cast<float>(mix64(i) % 1000) - 0.5f;
          if (precision == Precision::kFp32)
            grad_output.f32(i) = v;
          else
            grad_output.f16(i) = to_half(v, precision);
        }
        // Where a stage without the head writes its output (the pipeline runner's send buffer).
        MemoryLedger sends;
        const StoredTensor output =
            layout.has_head ? StoredTensor()
                            : allocate_stored(sends, MemCategory::kCommBuffers, "output",
                                              static_cast<size_t>(N) * m.n_embd, precision);
        for (int mb = 0; mb < 2; ++mb)
          for (GptStage* s : {&fused, &split}) {
            if (!layout.has_embedding) {  // fp32, or 16-bit patterns under bf16 / fp16
              const CommBuffer x = s->input_buffer(mb);
              for (size_t i = 0; i < x.count(); ++i) {
                const float v = 1e-3f * static_cast<float>(mix64(i + 77 * mb) % 2000) - 1.0f;
                if (x.format() == Precision::kFp32)
                  static_cast<float*>(x.data())[i] = v;
                else
                  static_cast<uint16_t*>(x.data())[i] = to_half(v, x.format());
              }
            }
            s->forward(mb, layout.has_embedding ? in[mb].data() : nullptr,
                       layout.has_head ? tg[mb].data() : nullptr, B, T, output);
          }
        const float scale = 1.0f / N;
        const StoredTensor upstream = layout.has_head ? StoredTensor() : grad_output;
        // The fused backwards of both micro-batches against B0, B1, W0, W1.
        std::vector<std::vector<float>> fused_inputs, split_inputs;
        const auto input_grad = [&](const GptStage& s) {
          return host_values(s.input_grad(), 0, static_cast<size_t>(N) * m.n_embd);
        };
        for (int mb = 0; mb < 2; ++mb) {
          fused.backward(mb, scale, upstream);
          if (!layout.has_embedding) fused_inputs.push_back(input_grad(fused));
        }
        for (int mb = 0; mb < 2; ++mb) {
          split.backward_input(mb, scale, upstream, mb);
          if (!layout.has_embedding) split_inputs.push_back(input_grad(split));
        }
        for (int mb = 0; mb < 2; ++mb) split.backward_weight(mb, mb);
        EXPECT_EQ(fused_inputs, split_inputs);
        const View1 a = fused.grads(), b = split.grads();
        ASSERT_EQ(a.extent(0), b.extent(0));
        double largest = 0;
        for (size_t i = 0; i < a.extent(0); ++i) {
          ASSERT_EQ(a(i), b(i)) << "gradient element " << i;
          largest = std::max<double>(largest, std::abs(a(i)));
        }
        EXPECT_GT(largest, 0.0);
        ++compared;
      }
  EXPECT_EQ(compared, 36);
}
