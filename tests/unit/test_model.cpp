// The whole GPT on one rank: gradients against finite differences, micro-batching, determinism
// and vocabulary padding. Parameters and gradients may live in device memory (GPU builds): the
// tests read and write them through host copies.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "core/hash.hpp"
#include "model/gpt.hpp"
#include "model/params.hpp"

using namespace trident;

namespace {

ModelConfig tiny() {
  return ModelConfig::gpt2(2, 16, 2, 11, 8);  // L, C, NH, V, block
}

std::vector<float> values(const View1& v) {
  return host_values(stored_f32(v.data(), v.extent(0)), 0, v.extent(0));
}

void set_value(const View1& v, size_t i, float value) {
  set_host_values(stored_f32(v.data(), v.extent(0)), i, {value});
}

// Multiplies every parameter by `factor` and returns the new values.
std::vector<float> scale_weights(const View1& p, float factor) {
  std::vector<float> weights = values(p);
  for (float& w : weights) w *= factor;
  set_host_values(stored_f32(p.data(), p.extent(0)), 0, weights);
  return weights;
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
  const View1 p = model.params();
  const std::vector<float> weights = scale_weights(p, 10.0f);
  std::vector<int32_t> in, tg;
  batch(B, T, m.vocab_size, in, tg);
  const float scale = 1.0f / (B * T);
  model.zero_grads();
  model.forward(0, in.data(), tg.data(), B, T);
  model.backward(0, scale, {});
  const std::vector<float> g = values(model.grads());
  for (const ParamSpec& s : model.table().specs()) {
    // The comparison means something only where the gradient is not ~0: each tensor must have
    // a sampled element that moves the loss visibly (else a path dropped out of backward).
    // Element e of a tensor is local element e: a padded vocabulary's rows follow the real ones.
    const int64_t offset = model.local().at(s.name).offset;
    double largest = 0;
    for (int k = 0; k < 3; ++k) {  // three elements of every tensor
      const int64_t i = offset + static_cast<int64_t>(mix64(k * 31 + s.offset) % s.numel());
      const float saved = weights[i], h = 1e-3f;
      set_value(p, i, saved + h);
      const double fp = model.forward(0, in.data(), tg.data(), B, T) * scale;
      set_value(p, i, saved - h);
      const double fm = model.forward(0, in.data(), tg.data(), B, T) * scale;
      set_value(p, i, saved);
      const double numeric = (fp - fm) / (2 * h);
      const double err = std::abs(numeric - g[i]) / std::max(5e-2, std::abs(numeric));
      EXPECT_LT(err, 5e-2) << s.name << "[" << i - offset << "] numeric " << numeric << " analytic "
                           << g[i];
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
  const std::vector<float> a = values(whole.grads()), b = values(split.grads());
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_abs = std::max<double>(max_abs, std::abs(a[i]));
    max_diff = std::max<double>(max_diff, std::abs(a[i] - b[i]));
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
  EXPECT_EQ(ledger.peak(MemCategory::kParams), model.local().total_numel() * sizeof(float));
}

// A vocabulary padded to a multiple of 128 (GPU builds' default) computes what the unpadded one
// does: the same losses and gradients of every real row, on a tied (GPT-2) and an untied (Llama)
// head; the padded rows start at zero and get zero gradients (so AdamW, with zero moments and
// decoupled decay, keeps them zero).
TEST(Gpt, PaddedVocabularyChangesNoResult) {
  for (const bool llama : {false, true}) {
    ModelConfig m = tiny();
    if (llama) {
      m.family = ModelFamily::kLlama;
      m.n_kv_head = 1;
      m.ffn_hidden = 24;
    }
    SCOPED_TRACE(llama ? "llama" : "gpt2");
    const int B = 2, T = 8;
    std::vector<int32_t> in, tg;
    batch(B, T, m.vocab_size, in, tg);
    ModelConfig padded = m;
    m.vocab_padding = 1;
    padded.vocab_padding = 128;
    MemoryLedger l1, l2;
    GptStage plain(m, whole_model(m), nullptr, l1, B, T, 1);
    GptStage wide(padded, whole_model(padded), nullptr, l2, B, T, 1);
    ASSERT_EQ(wide.local().at("wte").shape[0], 128);
    ASSERT_EQ(plain.local().at("wte").shape[0], m.vocab_size);
    double losses[2];
    GptStage* stages[2] = {&plain, &wide};
    for (int k = 0; k < 2; ++k) {
      stages[k]->init_params(13);
      stages[k]->zero_grads();
      losses[k] = stages[k]->forward(0, in.data(), tg.data(), B, T);
      stages[k]->backward(0, 1.0f / (B * T), {});
    }
    EXPECT_NEAR(losses[1], losses[0], 1e-6 * std::abs(losses[0]));
    const std::vector<float> p0 = values(plain.params()), p1 = values(wide.params());
    const std::vector<float> g0 = values(plain.grads()), g1 = values(wide.grads());
    int64_t padded_rows = 0;
    for (const LocalParam& q : wide.local().params()) {
      const LocalParam& r = plain.local().at(q.spec->name);
      double largest = 0;
      for (int64_t i = 0; i < r.numel; ++i)
        largest = std::max<double>(largest, std::abs(g0[r.offset + i]));
      for (int64_t i = 0; i < q.numel; ++i) {
        const int64_t global = wide.local().global_index(q, i);
        if (global < 0) {  // a padded row
          ++padded_rows;
          ASSERT_EQ(p1[q.offset + i], 0.0f) << q.spec->name;
          ASSERT_EQ(g1[q.offset + i], 0.0f) << q.spec->name;
          continue;
        }
        ASSERT_EQ(p1[q.offset + i], p0[r.offset + global]) << q.spec->name;
        ASSERT_NEAR(g1[q.offset + i], g0[r.offset + global], 1e-6 * largest) << q.spec->name;
      }
    }
    EXPECT_EQ(padded_rows, (128 - m.vocab_size) * m.n_embd * (m.tied() ? 1 : 2));
  }
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
        std::vector<float> upstream_values(grad_output.size());
        for (size_t i = 0; i < upstream_values.size(); ++i)
          upstream_values[i] = 1e-3f * static_cast<float>(mix64(i) % 1000) - 0.5f;
        set_host_values(grad_output, 0, upstream_values);
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
              std::vector<float> input(x.count());
              for (size_t i = 0; i < input.size(); ++i)
                input[i] = 1e-3f * static_cast<float>(mix64(i + 77 * mb) % 2000) - 1.0f;
              set_host_values(
                  x.format() == Precision::kFp32
                      ? stored_f32(static_cast<float*>(x.data()), x.count())
                      : stored_f16(static_cast<uint16_t*>(x.data()), x.count(), x.format()),
                  0, input);
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
        const std::vector<float> a = values(fused.grads()), b = values(split.grads());
        ASSERT_EQ(a.size(), b.size());
        double largest = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          ASSERT_EQ(a[i], b[i]) << "gradient element " << i;
          largest = std::max<double>(largest, std::abs(a[i]));
        }
        EXPECT_GT(largest, 0.0);
        ++compared;
      }
  EXPECT_EQ(compared, 36);
}

namespace {

// A tiny Llama (or GPT-2, its experts GELU MLPs with biases) whose layer 0 is an MoE layer (8
// experts, top-2) and layer 1 dense.
ModelConfig tiny_moe(double capacity_factor, ModelFamily family = ModelFamily::kLlama) {
  ModelConfig m;
  m.family = family;
  m.n_layer = 2, m.n_embd = 16, m.n_head = 4, m.n_kv_head = 2, m.vocab_size = 11;
  m.block_size = 8, m.ffn_hidden = 24;
  m.moe.n_experts = 8, m.moe.top_k = 2, m.moe.expert_ffn_hidden = 12, m.moe.moe_layer_every = 2;
  m.moe.capacity_factor = capacity_factor;
  m.moe.n_shared_experts = capacity_factor > 0 ? 1 : 0;  // one run with a shared expert
  return m;
}

}  // namespace

// Every parameter's gradient of the objective (the loss plus the balancing losses) against
// central differences, with an MoE layer in the stack, dropless and with drops (the latter with a
// shared expert), in both families. A finite difference that changes the routing is skipped (the
// objective jumps there).
TEST(Gpt, MoeModelGradientsMatchFiniteDifferences) {
  for (const ModelFamily family : {ModelFamily::kLlama, ModelFamily::kGpt2})
    for (const double capacity_factor : {0.0, 1.0}) {
      const ModelConfig m = tiny_moe(capacity_factor, family);
      MemoryLedger ledger;
      const int B = 2, T = 6;
      GptStage model(m, whole_model(m), nullptr, ledger, B, T, 1);
      model.set_moe_loss_coefficients(0.05, 0.01);
      model.init_params(3);
      const View1 p = model.params();
      // Half the dense test's factor: the MoE paths curve more.
      const std::vector<float> weights = scale_weights(p, 5.0f);
      std::vector<int32_t> in, tg;
      batch(B, T, m.vocab_size, in, tg);
      const float scale = 1.0f / (B * T);
      model.zero_grads();
      model.forward(0, in.data(), tg.data(), B, T);
      const std::array<double, 2> losses = model.moe_losses(0);
      const std::vector<int32_t> routing = model.moe_routing(0);
      ASSERT_EQ(routing.size(), 2u * B * T * 2);
      EXPECT_GT(losses[0], 0.5) << "aux of a router is at least about 1 (E sum f P)";
      EXPECT_GT(losses[1], 0.0);
      model.backward(0, scale, {});
      const std::vector<float> g = values(model.grads());
      int routing_changes = 0, samples = 0;
      for (const ParamSpec& s : model.table().specs()) {
        const int64_t offset = model.local().at(s.name).offset;
        double largest = 0;
        for (int k = 0; k < 4; ++k) {
          const int64_t i = offset + static_cast<int64_t>(mix64(k * 31 + s.offset) % s.numel());
          const float saved = weights[i], h = 1e-3f;
          ++samples;
          set_value(p, i, saved + h);
          const double fp = model.forward(0, in.data(), tg.data(), B, T) * scale;
          const bool moved_up = model.moe_routing(0) != routing;
          set_value(p, i, saved - h);
          const double fm = model.forward(0, in.data(), tg.data(), B, T) * scale;
          const bool moved_down = model.moe_routing(0) != routing;
          set_value(p, i, saved);
          if (moved_up || moved_down) {
            ++routing_changes;
            continue;
          }
          const double numeric = (fp - fm) / (2 * h);
          const double err = std::abs(numeric - g[i]) / std::max(5e-2, std::abs(numeric));
          EXPECT_LT(err, 5e-2) << s.name << "[" << i - offset << "] numeric " << numeric
                               << " analytic " << g[i] << " capacity " << capacity_factor
                               << (m.llama() ? " llama" : " gpt2");
          largest = std::max(largest, std::abs(numeric));
        }
        if (s.name.find("moe.experts") == std::string::npos) {  // an expert may get no token
          EXPECT_GT(largest, 1e-4) << s.name << ": no sampled element moves the loss";
        }
      }
      // A few samples may move the routing, not most (the check would then test little).
      EXPECT_LT(routing_changes, samples / 8) << "of " << samples;
    }
}
