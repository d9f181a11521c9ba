// Writes what torch_gpt.py checks: the tiny model's parameters, one batch, its loss, logits and
// gradients, and the losses and final parameters of 10 AdamW steps, computed by trident; and the
// same batch's loss and gradients under bf16 compute.
#include <hdf5.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/hash.hpp"
#include "core/memory.hpp"
#include "core/runtime.hpp"
#include "io/config.hpp"
#include "io/hdf5.hpp"
#include "model/gpt.hpp"
#include "model/params.hpp"
#include "optim/adamw.hpp"

namespace {

constexpr int kBatch = 4;  // B
constexpr int kSeq = 16;   // T (at most the block size, less so wpe rows past T get no gradient)
constexpr uint64_t kInitSeed = 1234;
constexpr uint64_t kDataSeed = 0x7e57da7aULL;
constexpr int kAdamSteps = 10;
constexpr double kLr = 1e-3;

// A dataset of any numeric type; `shape` empty means an HDF5 scalar.
void write_dataset(hid_t parent, const std::string& name, const std::vector<int64_t>& shape,
                   hid_t file_type, hid_t mem_type, const void* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  trident::h5::Handle space(
      dims.empty() ? H5Screate(H5S_SCALAR)
                   : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
      H5Sclose);
  TRIDENT_H5(static_cast<hid_t>(space));
  trident::h5::Handle dset(
      H5Dcreate2(parent, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      H5Dclose);
  TRIDENT_H5(static_cast<hid_t>(dset));
  TRIDENT_H5(H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

void write_floats(hid_t parent, const std::string& name, const std::vector<int64_t>& shape,
                  const float* data) {
  write_dataset(parent, name, shape, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data);
}

void write_ints(hid_t parent, const std::string& name, const std::vector<int64_t>& shape,
                const int32_t* data) {
  write_dataset(parent, name, shape, H5T_STD_I32LE, H5T_NATIVE_INT32, data);
}

void write_doubles(hid_t parent, const std::string& name, const std::vector<int64_t>& shape,
                   const double* data) {
  write_dataset(parent, name, shape, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, data);
}

// Every parameter-shaped tensor of a flat buffer under its global name, as in a checkpoint.
// Each dataset carries the table's weight-decay flag so the reference can check its own choice.
void write_tensors(hid_t group, const trident::ParamTable& table, const trident::View1& flat) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), flat);
  for (const trident::ParamSpec& p : table.specs()) {
    write_floats(group, p.name, p.shape, host.data() + p.offset);
    trident::h5::Handle dset(H5Dopen2(group, p.name.c_str(), H5P_DEFAULT), H5Dclose);
    TRIDENT_H5(static_cast<hid_t>(dset));
    trident::h5::write_attr(dset, "weight_decay", static_cast<int64_t>(p.weight_decay));
  }
}

// Moves the GPT-2 initialisation away from its special values: zero biases and unit LayerNorm
// gains would hide any forward bug in those terms (a dropped bias changes nothing), and weights
// of std 0.02 leave attention almost uniform and GELU almost linear (at that init, a missing
// 1/sqrt(HS) score scale moved the loss by only 6e-6 relative, and erf GELU instead of tanh the
// logits by 4e-6). Matrices are scaled by kWeightScale (std 0.2), every 1-D tensor gets
// kVectorSpread * N(0,1) added (gains 1 +- 0.1, biases +- 0.1).
constexpr float kWeightScale = 10.0f, kVectorSpread = 0.1f;
constexpr uint64_t kSpreadSeed = 0x5b2eadULL;

void spread_parameters(trident::GptStage& model) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.params());
  for (const trident::ParamSpec& p : model.table().specs()) {
    trident::ParamSpec unit = p;
    unit.init = trident::InitKind::kNormal;
    unit.init_std = 1.0f;
    for (int64_t i = 0; i < p.numel(); ++i) {
      float& v = host(p.offset + i);
      v = p.shape.size() >= 2 ? v * kWeightScale
                              : v + kVectorSpread * trident::initial_value(kSpreadSeed, unit, i);
    }
  }
  Kokkos::deep_copy(model.params(), host);
}

// Row-major [N, V] copy of the last forward's logits (backward overwrites them in place).
std::vector<float> copy_logits(const trident::GptStage& model, int N, int V) {
  return trident::host_values(model.logits(0), 0, static_cast<size_t>(N) * V);
}

// The same batch through a bf16 stage (parameters and activations in bf16, fp32 gradients) from
// `fp32_model`'s parameters rounded to bf16: group "bf16" holds those rounded parameters (as
// float32), the loss and the gradients. torch_gpt.py runs the same parameters under
// torch.autocast(bf16).
void write_bf16(hid_t file, const trident::GptStage& fp32_model, trident::MemoryLedger& ledger,
                const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets, int B,
                int T, const trident::TrainSection& train) {
  constexpr trident::Precision kBf16 = trident::Precision::kBf16;
  const trident::ModelConfig& m = fp32_model.config();
  trident::StageBuffers buffers;
  buffers.precision = kBf16;
  trident::GptStage model(m, trident::whole_model(m), nullptr, ledger, B + 1, m.block_size, 1,
                          buffers);
  model.set_moe_loss_coefficients(train.aux_loss_coeff, train.z_loss_coeff);
  const auto params32 =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), fp32_model.params());
  const auto params16 = Kokkos::create_mirror_view(model.params16());
  trident::View1 rounded("bf16_params", params32.extent(0));
  const auto rounded_host = Kokkos::create_mirror_view(rounded);
  for (size_t i = 0; i < params32.extent(0); ++i) {
    params16(i) = trident::to_half(params32(i), kBf16);
    rounded_host(i) = trident::from_half(params16(i), kBf16);
  }
  Kokkos::deep_copy(model.params16(), params16);
  Kokkos::deep_copy(rounded, rounded_host);

  const int N = B * T;
  model.zero_grads();
  const double loss = model.forward(0, inputs.data(), targets.data(), B, T) / N;
  model.backward(0, 1.0f / static_cast<float>(N), {});
  trident::h5::Handle group = trident::h5::create_group(file, "bf16");
  write_doubles(group, "loss", {}, &loss);
  // The bf16 run's routing, [MoE blocks, N, k] experts: a token whose k-th and next choices lie
  // within bf16's rounding routes either way, so the reference routes the bf16 run as it did.
  const std::vector<int32_t> routing = model.moe_routing(0);
  if (!routing.empty()) {
    const int64_t k = m.moe.top_k, per_block = 2 * static_cast<int64_t>(N) * k;
    const int64_t blocks = static_cast<int64_t>(routing.size()) / per_block;
    std::vector<int32_t> choice;
    for (int64_t b = 0; b < blocks; ++b)
      choice.insert(choice.end(), routing.begin() + b * per_block,
                    routing.begin() + b * per_block + N * k);
    write_ints(group, "moe_choice", {blocks, N, k}, choice.data());
  }
  {
    trident::h5::Handle params = trident::h5::create_group(group, "params");
    write_tensors(params, model.table(), rounded);
    trident::h5::Handle grads = trident::h5::create_group(group, "grads");
    write_tensors(grads, model.table(), model.grads());
  }
  std::printf("dump_reference: bf16 loss %.6f\n", loss);
}

int run(const std::string& out_path, const std::string& config_path,
        const std::vector<std::string>& overrides) {
  trident::ModelConfig m;  // the tiny model, unless a config names another
  m.name = "tiny";
  m.n_layer = 2;
  m.n_embd = 32;
  m.n_head = 4;
  m.vocab_size = 256;
  m.block_size = 32;
  // A Mixture of Experts adds its balancing losses to the objective, with the config's
  // coefficients (train.aux_loss_coeff, z_loss_coeff).
  trident::TrainSection train;
  if (!config_path.empty()) {
    const trident::Config c = trident::load_config(config_path, overrides);
    m = c.model;
    train = c.train;
  }
  if (m.block_size < kSeq) throw trident::InputError("the reference needs block_size >= 16");

  const int B = kBatch, T = kSeq, N = B * T;
  // Tokens from a hash, the targets the inputs shifted by one (as the data loader does).
  std::vector<int32_t> stream(static_cast<size_t>(B) * (T + 1));
  for (size_t i = 0; i < stream.size(); ++i)
    stream[i] = static_cast<int32_t>(trident::mix64(kDataSeed ^ trident::mix64(i)) %
                                     static_cast<uint64_t>(m.vocab_size));
  std::vector<int32_t> inputs(N), targets(N);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      inputs[b * T + t] = stream[b * (T + 1) + t];
      targets[b * T + t] = stream[b * (T + 1) + t + 1];
    }

  trident::MemoryLedger ledger;
  // Buffers sized for more than this batch (as generate does, growing T up to the block size), so
  // the windows into them must be cut for the actual (B, T).
  trident::GptStage model(m, trident::whole_model(m), nullptr, ledger, B + 1, m.block_size, 1);
  model.set_moe_loss_coefficients(train.aux_loss_coeff, train.z_loss_coeff);
  model.init_params(kInitSeed);
  spread_parameters(model);
  trident::AdamWSettings adam;  // beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1
  const float inv_tokens = 1.0f / static_cast<float>(N);

  trident::h5::Handle file = trident::h5::create_file(out_path);
  trident::h5::write_attr(file, "n_layer", static_cast<int64_t>(m.n_layer));
  trident::h5::write_attr(file, "n_embd", static_cast<int64_t>(m.n_embd));
  trident::h5::write_attr(file, "n_head", static_cast<int64_t>(m.n_head));
  trident::h5::write_attr(file, "vocab_size", static_cast<int64_t>(m.vocab_size));
  trident::h5::write_attr(file, "block_size", static_cast<int64_t>(m.block_size));
  trident::h5::write_attr(file, "family", std::string(trident::name_of(m.family)));
  trident::h5::write_attr(file, "n_kv_head", static_cast<int64_t>(m.kv_heads()));
  trident::h5::write_attr(file, "ffn_hidden", static_cast<int64_t>(m.mlp_hidden()));
  trident::h5::write_attr(file, "rope_theta", m.rope_theta);
  trident::h5::write_attr(file, "norm_eps", m.norm_eps);
  trident::h5::write_attr(file, "tie_embeddings", static_cast<int64_t>(m.tied()));
  trident::h5::write_attr(file, "n_experts", static_cast<int64_t>(m.moe.n_experts));
  trident::h5::write_attr(file, "top_k", static_cast<int64_t>(m.moe.top_k));
  trident::h5::write_attr(file, "expert_ffn_hidden", static_cast<int64_t>(m.expert_hidden()));
  trident::h5::write_attr(file, "moe_layer_every", static_cast<int64_t>(m.moe.moe_layer_every));
  trident::h5::write_attr(file, "n_shared_experts", static_cast<int64_t>(m.moe.n_shared_experts));
  trident::h5::write_attr(file, "aux_loss_coeff", train.aux_loss_coeff);
  trident::h5::write_attr(file, "z_loss_coeff", train.z_loss_coeff);
  trident::h5::write_attr(file, "init_seed", static_cast<int64_t>(kInitSeed));
  trident::h5::write_attr(file, "lr", kLr);
  trident::h5::write_attr(file, "beta1", adam.beta1);
  trident::h5::write_attr(file, "beta2", adam.beta2);
  trident::h5::write_attr(file, "eps", adam.eps);
  trident::h5::write_attr(file, "weight_decay", adam.weight_decay);
  trident::h5::write_attr(file, "adam_steps", static_cast<int64_t>(kAdamSteps));
  {
    trident::h5::Handle params = trident::h5::create_group(file, "params");
    write_tensors(params, model.table(), model.params());
    trident::h5::Handle batch = trident::h5::create_group(file, "batch");
    write_ints(batch, "inputs", {B, T}, inputs.data());
    write_ints(batch, "targets", {B, T}, targets.data());
  }

  trident::h5::Handle out = trident::h5::create_group(file, "out");
  model.zero_grads();
  const double loss = model.forward(0, inputs.data(), targets.data(), B, T) / N;
  const std::vector<float> logits = copy_logits(model, N, m.vocab_size);
  model.backward(0, inv_tokens, {});
  write_doubles(out, "loss", {}, &loss);
  write_floats(out, "logits", {N, m.vocab_size}, logits.data());
  {
    trident::h5::Handle grads = trident::h5::create_group(file, "grads");
    write_tensors(grads, model.table(), model.grads());
  }

  write_bf16(file, model, ledger, inputs, targets, B, T, train);

  trident::AdamW optimizer(model.local(), ledger, adam);
  std::vector<double> losses;
  for (int step = 0; step < kAdamSteps; ++step) {
    model.zero_grads();
    losses.push_back(model.forward(0, inputs.data(), targets.data(), B, T) / N);
    model.backward(0, inv_tokens, {});
    optimizer.step(model.params(), model.grads(), kLr, 1.0f);
  }
  write_doubles(out, "losses10", {kAdamSteps}, losses.data());
  {
    trident::h5::Handle final_params = trident::h5::create_group(file, "params_after");
    write_tensors(final_params, model.table(), model.params());
  }
  std::printf("dump_reference: wrote %s (loss %.6f; %.6f before AdamW step %d)\n", out_path.c_str(),
              loss, losses.back(), kAdamSteps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trident::with_mpi_and_kokkos(argc, argv, {argv[0], 2, true}, [&] {
    if (argc < 2) {
      std::fprintf(stderr, "usage: %s OUT.h5 [RUN_CONFIG.toml [KEY=VALUE...]]\n", argv[0]);
      return 2;
    }
    try {
      return run(argv[1], argc >= 3 ? argv[2] : "",
                 std::vector<std::string>(argv + std::min(argc, 3), argv + argc));
    } catch (const trident::InputError& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "internal error: %s\n", e.what());
      return 1;
    }
  });
}
