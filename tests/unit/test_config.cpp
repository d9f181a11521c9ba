// Config parsing and validation: every bad input names the key or file and what is valid.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/build_options.hpp"
#include "core/error.hpp"
#include "io/config.hpp"

using namespace trident;

namespace {

std::string write_config(const std::string& text) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path() / "trident_config_test";
  std::filesystem::create_directories(dir / "models");
  std::ofstream(dir / "models" / "m.toml") << "[model]\nn_layer = 3\nn_embd = 48\nn_head = 4\n";
  const auto path = dir / ("c" + std::to_string(counter++) + ".toml");
  // A run config must have a [model] section; the tests that do not care get the defaults.
  std::ofstream(path) << text << (text.find("[model]") == std::string::npos ? "\n[model]\n" : "");
  return path.string();
}

// The InputError message from loading + validating `text` for a world of `ranks`.
std::string error_of(const std::string& text, std::vector<std::string> overrides = {},
                     int ranks = 1) {
  try {
    resolve(load_config(write_config(text), overrides), ranks);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& text, const std::string& needle,
                  std::vector<std::string> overrides = {}, int ranks = 1) {
  const std::string msg = error_of(text, std::move(overrides), ranks);
  EXPECT_NE(msg.find(needle), std::string::npos) << "message: '" << msg << "'";
}

}  // namespace

TEST(Config, DefaultsAndModelPresetAndOverrides) {
  const Config read = load_config(write_config("[model]\nfrom = \"models/m.toml\"\nn_head = 3\n"),
                                  {"run.steps=7", "optim.lr=0.5", "run.name=abc"});
  EXPECT_EQ(read.parallel.dp, 0);  // derived only when the world size is known
  const Config c = resolve(read, 2);
  EXPECT_EQ(c.model.n_layer, 3);  // from the preset
  EXPECT_EQ(c.model.n_embd, 48);
  EXPECT_EQ(c.model.n_head, 3);  // the run file overrides the preset
  EXPECT_EQ(c.run.steps, 7);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.5);
  EXPECT_EQ(c.run.name, "abc");
  EXPECT_EQ(c.parallel.dp, 2);  // derived from the world size
  EXPECT_EQ(c.train.micro_batch_size, c.train.batch_size / 2);
}

TEST(Config, TomlRoundTripIsExact) {
  const Config c =
      resolve(load_config(write_config("[optim]\nlr = 3.3e-4\n[run]\nname = \"x y\"\n[parallel]\n"
                                       "schedule = \"gpipe\"\n[zero]\nstage = 1\n"),
                          {"precision.compute=bf16", "dp.sync=async"}),
              1);
  Config back = parse_config_text(c.to_toml(), "roundtrip");
  EXPECT_EQ(back.to_toml(), c.to_toml());
  EXPECT_DOUBLE_EQ(back.optim.lr, 3.3e-4);
  EXPECT_EQ(back.run.name, "x y");
  // Choices are stored typed and written back by name (zero.stage by number).
  EXPECT_EQ(back.parallel.schedule, pipeline::ScheduleKind::kGpipe);
  EXPECT_EQ(back.zero.stage, ZeroStage::kOptimizer);
  EXPECT_EQ(back.precision.compute, Precision::kBf16);
  EXPECT_EQ(back.dp.sync, DpSync::kAsync);
  EXPECT_NE(c.to_toml().find("schedule = 'gpipe'\n"), std::string::npos) << c.to_toml();
  EXPECT_NE(c.to_toml().find("stage = 1\n"), std::string::npos);
  EXPECT_NE(c.to_toml().find("sync = 'async'\n"), std::string::npos);
}

TEST(Config, ValidateReadsAndNeverWrites) {
  Config c = load_config(write_config(""), {});
  const std::string before = c.to_toml();
  // Unresolved (dp = 0) is invalid for any world size, and validating changes nothing.
  EXPECT_THROW(validate(c, 2), InputError);
  EXPECT_EQ(c.to_toml(), before);
  const Config resolved = resolve(c, 2);
  EXPECT_EQ(c.to_toml(), before);  // resolve works on a copy
  EXPECT_EQ(resolved.parallel.dp, 2);
  EXPECT_NO_THROW(validate(resolved, 2));
  EXPECT_THROW(validate(resolved, 4), InputError);  // the resolved layout is for 2 ranks
}

TEST(Config, ChoicesAreTypedOnReadingAndBadNamesListTheValidOnes) {
  expect_error("[parallel]\nschedule = \"zb\"\n",
               "parallel.schedule = 'zb' must be one of gpipe, 1f1b, interleaved");
  expect_error("", "parallel.backend_dp = 'gloo' must be one of auto, mpi, nccl",
               {"parallel.backend_dp=gloo"});
  expect_error("", "zero.stage = 5 must be 0, 1, 2 or 3", {"zero.stage=5"});
  expect_error("[zero]\nstage = \"two\"\n", "'zero.stage' must be an integer");
  expect_error("[dp]\nsync = 3\n", "'dp.sync' must be a string");
  expect_error("", "recompute.policy = 'most' must be one of none, selective, full",
               {"recompute.policy=most"});
  expect_error("", "offload.params = 'host' must be none or nvme", {"offload.params=host"});
  expect_error("", "precision.fp32_matmul = 'fast' must be ieee or tf32",
               {"precision.fp32_matmul=fast"});
  expect_error("", "attention.kernel = 'flash' must be one of auto, cudnn, tiled",
               {"attention.kernel=flash"});
  EXPECT_EQ(load_config(write_config(""), {}).attention.kernel, kernels::AttentionKernel::kAuto);
  EXPECT_EQ(load_config(write_config(""), {"attention.kernel=tiled"}).attention.kernel,
            kernels::AttentionKernel::kTiled);
#if !defined(TRIDENT_GPU_BUILD)  // no cuDNN on host builds: asking for it is an error
  expect_error("", "attention.kernel = 'cudnn' needs the CUDA build", {"attention.kernel=cudnn"});
#endif
  EXPECT_EQ(load_config(write_config(""), {}).precision.fp32_matmul, Fp32Matmul::kIeee);
  const Config c = load_config(write_config(""), {"parallel.backend_tp=nccl", "dp.sync=local_sgd",
                                                  "precision.fp32_matmul=tf32"});
  EXPECT_EQ(c.parallel.backend_tp, CollectiveBackend::kNccl);
  EXPECT_EQ(c.dp.sync, DpSync::kLocalSgd);
  EXPECT_EQ(c.precision.fp32_matmul, Fp32Matmul::kTf32);
}

TEST(Config, BadInputNamesTheKey) {
  expect_error("[train]\nbatchsize = 4\n", "unknown key 'train.batchsize'");
  expect_error("[train]\nbatchsize = 4\n", "batch_size");  // lists the valid keys
  expect_error("[trian]\nbatch_size = 4\n", "unknown table [trian]");
  expect_error("[train]\nbatch_size = \"four\"\n", "'train.batch_size' must be an integer");
  expect_error("[optim]\nlr = \"fast\"\n", "'optim.lr' must be a number");
  expect_error("[run]\nname = 3\n", "'run.name' must be a string");
  expect_error("[train]\nbatch_size = 99999999999\n", "out of range");
  expect_error("train = 3\n", "must be a table");
  expect_error("[model]\nn_embd = 50\nn_head = 4\n", "model.n_head = 4 must divide");
  expect_error("[model]\nblock_size = 16\n[train]\nseq_len = 32\n",
               "train.seq_len = 32 must be between 1 and model.block_size = 16");
  expect_error("[model]\nn_layer = -2\n", "model.n_layer");
  expect_error("[model]\nvocab_size = 20000000\n", "model.vocab_size");
  expect_error("[optim]\nlr = -1.0\n", "optim.lr");
  expect_error("[optim]\nbeta2 = 1.0\n", "optim.beta2");
  expect_error("[run]\nsteps = -5\n", "run.steps");
  expect_error("[train]\nbatch_size = 0\n", "train.batch_size");
  expect_error("[train]\nbatch_size = 6\n", "divisible by parallel.dp = 4", {}, 4);
  expect_error("[train]\nbatch_size = 8\nmicro_batch_size = 3\n", "train.micro_batch_size");
  expect_error("[parallel]\ndp = 3\n", "must equal the number of MPI ranks 2", {}, 2);
  expect_error("[model]\nfrom = \"models/none.toml\"\n", "models/none.toml' does not exist");
  expect_error("[model]\nfrom = \"/tmp\"\n", "(model.from): model file '/tmp' is a directory");
  expect_error("[model]\nfrom = \"/dev/zero\"\n", "'/dev/zero' is not a regular file");
  expect_error("[run\n", "TOML syntax error");
}

TEST(Config, BadOverridesNameTheKey) {
  expect_error("", "unknown key 'run.stepz'", {"run.stepz=3"});
  expect_error("", "expected section.key=value", {"steps=3"});
  expect_error("", "'1.5x' is not an integer", {"run.steps=1.5x"});
  expect_error("", "unknown table [nope]", {"nope.x=1"});
}

TEST(Config, MissingFileIsNamed) {
  try {
    load_config("/nonexistent/run.toml", {});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/run.toml"), std::string::npos);
  }
}

TEST(Config, ChangesThatAlterTheRemainingRunAreToldApartFromLayout) {
  const Config before = resolve(load_config(write_config(""), {}), 4);
  const Config after = resolve(
      load_config(write_config(""),
                  {"parallel.tp=2", "zero.stage=1", "recompute.policy=full", "run.log_every=5",
                   "optim.warmup_steps=9", "precision.compute=bf16", "run.steps=200"}),
      4);
  std::map<std::string, bool> math;
  for (const ConfigChange& c : config_changes(before, after)) math[c.key] = c.changes_math;
  const std::map<std::string, bool> expected{
      {"run.steps", true},         {"run.log_every", false},    {"optim.warmup_steps", true},
      {"parallel.dp", false},      {"parallel.tp", false},      {"zero.stage", false},
      {"recompute.policy", false}, {"precision.compute", true}, {"train.micro_batch_size", false}};
  EXPECT_EQ(math, expected);
  EXPECT_TRUE(config_changes(before, before).empty());
  EXPECT_EQ(config_hash(before), config_hash(resolve(load_config(write_config(""), {}), 4)));
  EXPECT_NE(config_hash(before), config_hash(after));
}

// The Llama family's keys: defaults, what each family accepts, and the tp rules for its heads.
TEST(Config, LlamaKeysAreReadAndChecked) {
  const std::string llama = "[model]\nfamily = \"llama\"\nn_embd = 64\nn_head = 8\nn_kv_head = 2\n";
  const Config c = resolve(load_config(write_config(llama), {}), 1);
  EXPECT_TRUE(c.model.llama());
  EXPECT_EQ(c.model.kv_heads(), 2);
  EXPECT_FALSE(c.model.tied());          // Llama's default: an untied head
  EXPECT_EQ(c.model.mlp_hidden(), 256);  // 8 * 64 / 3 = 170, rounded up to 256
  EXPECT_TRUE(resolve(load_config(write_config("[model]\n"), {}), 1).model.tied());  // GPT-2's
  const Config tied = load_config(write_config(llama), {"model.tie_embeddings=true"});
  EXPECT_TRUE(tied.model.tied());
  expect_error("[model]\nfamily = \"mamba\"\n", "model.family = 'mamba' must be gpt2 or llama");
  expect_error("[model]\nn_kv_head = 2\n", "apply to model.family = 'llama' only");
  expect_error("[model]\ntie_embeddings = false\n", "apply to model.family = 'llama' only");
  expect_error(llama + "tie_embeddings = 1\n", "model.tie_embeddings' must be true or false");
  expect_error("[model]\nfamily = \"llama\"\nn_embd = 64\nn_head = 8\nn_kv_head = 3\n",
               "model.n_kv_head = 3 must divide model.n_head = 8");
  expect_error("[model]\nfamily = \"llama\"\nn_embd = 24\nn_head = 8\n", "must be even");
  // tp 4 over 2 key/value heads replicates them; tp 4 over 6 neither splits nor replicates.
  EXPECT_EQ(error_of(llama, {"parallel.tp=4"}, 4), "");
  expect_error("[model]\nfamily = \"llama\"\nn_embd = 96\nn_head = 12\nn_kv_head = 6\n",
               "parallel.tp = 4 and model.n_kv_head = 6: one must divide the other",
               {"parallel.tp=4"}, 4);
  expect_error(llama + "ffn_hidden = 90\n", "must divide the MLP width 90", {"parallel.tp=4"}, 4);
}

TEST(Config, MixtureOfExpertsKeysParseAndTheirLimitsNameTheKey) {
  const Config c = resolve(load_config(write_config("[model]\nfamily = \"llama\"\nn_experts = 8\n"
                                                    "top_k = 2\nrouter = \"sigmoid\"\n"
                                                    "drop_policy = \"position\"\n"
                                                    "capacity_factor = 1.25\n"),
                                       {"train.z_loss_coeff=0.001"}),
                           1);
  EXPECT_EQ(c.model.moe.n_experts, 8);
  EXPECT_EQ(c.model.moe.router, kernels::RouterScore::kSigmoid);
  EXPECT_EQ(c.model.moe.drop_policy, kernels::DropPolicy::kPosition);
  EXPECT_EQ(c.model.moe.capacity_factor, 1.25);
  EXPECT_EQ(c.train.z_loss_coeff, 0.001);
  EXPECT_EQ(c.train.aux_loss_coeff, 0.01);  // the default
  EXPECT_EQ(Config().model.moe.n_experts, 0) << "a dense model unless asked";
  expect_error("[model]\nn_experts = 4\ntop_k = 5\n",
               "model.top_k = 5 must be between 1 and model.n_experts = 4");
  expect_error("[model]\nn_experts = 4\nmoe_layer_every = 0\n", "model.moe_layer_every = 0");
  expect_error("[model]\nn_experts = -1\n", "model.n_experts = -1");
  expect_error("[model]\nn_experts = 4\ncapacity_factor = -1.0\n",
               "model.capacity_factor = -1 must be 0 (dropless) or a positive number");
  expect_error("[model]\nn_experts = 4\ncapacity_factor = inf\n",
               "'model.capacity_factor' = inf must be a finite number");
  expect_error("", "train.aux_loss_coeff", {"train.aux_loss_coeff=-1"});
  expect_error("", "model.router = 'top' must be softmax or sigmoid", {"model.router=top"});
}
