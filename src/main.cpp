// The `trident` executable: train | generate | prepare | plan | ckpt | config | env subcommands.
#include <mpi.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "comm/grid.hpp"
#include "comm/host_comm.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/output_file.hpp"
#include "core/provenance.hpp"
#include "core/runtime.hpp"
#include "core/timer.hpp"
#include "io/checkpoint_tools.hpp"
#include "io/config.hpp"
#include "io/flight_report.hpp"
#include "io/hf_models.hpp"
#include "io/prepare.hpp"
#include "plan/checkpoint_interval.hpp"
#include "plan/expert_plan.hpp"
#include "plan/memory_model.hpp"
#include "plan/planner.hpp"
#include "plan/roofline.hpp"
#include "train/faults.hpp"
#include "train/generate.hpp"
#include "train/step_allocations.hpp"
#include "train/step_profiler.hpp"
#include "train/trainer.hpp"

namespace {

constexpr int kExitBadInput = 2;

// Numbers on the command line must be finite: "nan" and "inf" parse as doubles but mean nothing
// as a temperature, a fraction or a bandwidth.
const CLI::Validator kFinite(
    [](std::string& text) {
      double value = 0;
      try {
        value = std::stod(text);
      } catch (const std::exception&) {
        return std::string();  // not a number at all: the option's own conversion says so
      }
      return std::isfinite(value) ? std::string() : "must be a finite number, not '" + text + "'";
    },
    "FINITE");

// A path option given as "" names nothing: refused, where it once wrote nothing and exited 0.
const CLI::Validator kPath(
    [](std::string& text) { return text.empty() ? std::string("names no path (\"\")") : ""; },
    "PATH");

// Rank 0 writes the profiled step's table into the run directory and prints its summary and the
// longest labels.
void report_profile(const trident::StepProfiler& profiler, const std::filesystem::path& run_dir,
                    int profile_step) {
  if (!profiler.profiled()) {
    std::printf("PROFILE step=%d not reached: the run did not train that step\n", profile_step);
    return;
  }
  const std::filesystem::path path = run_dir / fmt::format("profile_step_{}.tsv", profile_step);
  const std::string table = profiler.table();
  trident::write_text_file(path.string(), table);
  std::printf("%s\n", profiler.summary_line().c_str());
  const std::vector<std::string> mismatched = profiler.mismatched_labels();
  if (!mismatched.empty()) {
    std::printf(
        "launch roofline: %zu labels launched other than predicted (measured vs predicted "
        "calls):\n",
        mismatched.size());
    for (const std::string& m : mismatched) std::printf("  %s\n", m.c_str());
  }
  std::printf("profile of step %d (all %zu labels: %s):\n", profile_step,
              profiler.launches().rows().size(), path.c_str());
  std::istringstream lines(table);
  std::string line;
  int shown = 0;
  while (std::getline(lines, line) && shown < 16)
    if (!line.empty() && line[0] != '#') {
      std::printf("  %s\n", line.c_str());
      ++shown;
    }
  std::fflush(stdout);
}

int run_train(MPI_Comm world, const std::string& config_path,
              const std::vector<std::string>& overrides, trident::TrainOptions options,
              const trident::FaultPlan& faults, bool report_allocations, int profile_step) {
  int world_size = 0;
  TRIDENT_MPI(MPI_Comm_size(world, &world_size));
  trident::Config config =
      trident::resolve(trident::load_config(config_path, overrides), world_size);
  // Every rank must run the same config (an MPMD launch, or a file that differs between nodes,
  // would otherwise build mismatched grids or diverge silently).
  trident::require_same_config(config, trident::HostCollectives(world));
  trident::Grid grid(world, config.parallel.shape(), config.parallel.ep);
  if (!grid.groups_node_local(trident::Axis::tp) && grid.rank() == 0)
    std::fprintf(stderr,
                 "warning: a tensor-parallel group spans nodes; tp traffic will cross "
                 "the network (place ranks so tp groups share a node)\n");
  if (profile_step > config.run.steps)
    throw trident::InputError(
        fmt::format("--profile-step {} is past the run's last step (run.steps = {})", profile_step,
                    config.run.steps));
  const std::filesystem::path run_dir = std::filesystem::path(config.run.out_dir) / config.run.name;
  trident::InjectedFaults injected(faults, grid.rank());
  trident::StepHooks* hooks = &injected;
  std::optional<trident::StepProfiler> profiler;
  if (profile_step > 0) {
    hooks = &profiler.emplace(hooks, profile_step);
    profiler->predict(config);
  }
  std::optional<trident::StepAllocations> allocations;
  if (report_allocations) hooks = &allocations.emplace(hooks);
  options.hooks = hooks;
  options.config_path = config_path;
  const int status = trident::train(std::move(config), grid, options);
  // Rank by rank, so that the lines do not interleave.
  for (int r = 0; allocations && r < world_size; ++r) {
    if (r == grid.rank()) {
      std::fputs(allocations->report(grid.rank()).c_str(), stdout);
      std::fflush(stdout);
    }
    TRIDENT_MPI(MPI_Barrier(world));
  }
  if (profiler && grid.rank() == 0) report_profile(*profiler, run_dir, profile_step);
  return status;
}

void print_plan(const trident::PlanModel& m, const trident::PlanCluster& c, double batch_tokens,
                int top) {
  const trident::PlanResult r = trident::plan_layouts(m, c, batch_tokens);
  const double psi = m.param_count();
  const std::string experts =
      m.moe.experts > 0
          ? fmt::format(" ({:.3g}B active) experts={} top_k={} expert_ffn={} shared={} every={}",
                        m.active_param_count() / 1e9, m.moe.experts, m.moe.top_k, m.expert_width(),
                        m.moe.shared, m.moe.every)
          : "";
  std::printf(
      "model: %.3gB parameters, %sL=%d h=%d heads=%d%s seq=%d%s | cluster: %d x %.0f GB GPUs, %d "
      "per node | batch %.0f tokens\n",
      psi / 1e9, m.llama ? "llama " : "", m.layers, m.hidden, m.heads,
      m.llama ? fmt::format(" kv_heads={} ffn={}", m.kv(), m.ffn_width()).c_str() : "", m.seq,
      experts.c_str(), c.gpus, c.gpu_mem_gb, c.gpus_per_node, batch_tokens);
  // One decimal, as the ZeRO paper prints them; three significant digits below 1 GB.
  auto gb = [&](int stage) {
    const double v = trident::zero_paper_model_states(psi, c.gpus, stage) / 1e9;
    return v >= 1 ? fmt::format("{:.1f}", v) : fmt::format("{:.3g}", v);
  };
  std::printf(
      "model states per GPU with ZeRO over all %d GPUs (bf16 + fp32 Adam, K = 12): "
      "baseline %s GB, P_os %s GB, P_os+g %s GB, P_os+g+p %s GB\n",
      c.gpus, gb(0).c_str(), gb(1).c_str(), gb(2).c_str(), gb(3).c_str());
  std::printf("%d layouts considered, %zu fit; the recommendation, then fastest first:\n",
              r.considered, r.feasible.size());
  // MFU as `train` counts it; HFU counts the recomputed FLOPs too.
  std::printf("%-70s %9s %9s %9s %9s %9s %6s %6s\n", "layout", "mem GB", "states", "activ.",
              "step s", "tok/s/GPU", "MFU%", "HFU%");
  const double peak = c.peak_tflops * 1e12;
  for (int i = 0; i < top && i < static_cast<int>(r.feasible.size()); ++i) {
    const auto& k = r.feasible[i];
    const double per_gpu = batch_tokens / k.step_seconds / c.gpus;
    std::printf("%-70s %9.1f %9.1f %9.1f %9.2f %9.0f %6.1f %6.1f\n", k.describe().c_str(),
                k.memory_gb(), k.params_gb + k.grads_gb + k.optimizer_gb, k.activations_gb,
                k.step_seconds, per_gpu,
                100 * per_gpu * trident::plan_model_flops_per_token(m) / peak,
                100 * per_gpu * trident::plan_hardware_flops_per_token(m, k.recompute) / peak);
  }
  std::printf("RECOMMEND %s\nwhy: %s\n", r.recommendation.c_str(), r.reasons.c_str());
}

// One transformer layer's kept activations for one micro-batch, trident's own bytes beside
// Korthikanti et al. 2022's Table 2 formula, for every recomputation policy with and without
// sequence parallelism at the config's tp; then the config's own as one CONFIG_ line.
void print_layer_activations(const trident::Config& c) {
  using trident::RecomputePolicy;
  const trident::MemoryQuery q = trident::memory_query(c);
  const auto& m = c.model;
  const int b = c.train.micro_batch_size, s = c.train.seq_len, t = c.parallel.tp;
  auto ours = [&](RecomputePolicy policy, bool sp) {
    trident::MemoryQuery v = q;
    v.recompute = {policy, 0};
    v.sequence_parallel = sp;
    return trident::layer_activation_bytes(v, policy == RecomputePolicy::kFull);
  };
  auto paper = [&](RecomputePolicy policy, bool sp) {
    if (m.llama())
      return trident::llama_layer_activation_bytes(s, b, m.n_embd, m.n_head, m.kv_heads(),
                                                   m.mlp_hidden(), t, sp && t > 1, policy);
    return trident::paper_layer_activation_bytes(s, b, m.n_embd, m.n_head, t, sp && t > 1, policy);
  };
  std::printf(
      "activations of one layer and micro-batch (b=%d s=%d h=%d a=%d t=%d), MB: trident (%s "
      "storage, no dropout, fp32 norm and softmax statistics) | %s\n",
      b, s, m.n_embd, m.n_head, t, trident::name_of(c.precision.compute),
      m.llama() ? "Korthikanti et al. 2022 Table 2's accounting for a Llama layer (16-bit, no "
                  "dropout)"
                : "Korthikanti et al. 2022 Table 2 (16-bit, dropout masks)");
  std::printf("  %-10s %-18s %10s %10s %8s\n", "recompute", "sequence_parallel", "trident", "paper",
              "ratio");
  for (const RecomputePolicy policy :
       {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull})
    for (const bool sp : {false, true}) {
      if (sp && t == 1) continue;
      std::printf("  %-10s %-18s %10.3f %10.3f %8.3f\n", trident::name_of(policy),
                  sp ? "on" : "off", ours(policy, sp) / 1e6, paper(policy, sp) / 1e6,
                  ours(policy, sp) / paper(policy, sp));
    }
  const bool sp = c.parallel.sequence_parallel && t > 1;
  const RecomputePolicy policy = c.recompute.policy;
  std::printf("CONFIG_LAYER_ACTIVATIONS trident_bytes=%.0f paper_bytes=%.0f\n", ours(policy, sp),
              paper(policy, sp));
}

// What trident's memory model predicts for a run config's own layout, on its busiest rank.
void print_config_memory(const trident::Config& c, double gpu_mem_gb) {
  const trident::BusiestRank r = trident::predict_busiest_rank(trident::memory_query(c));
  const auto& p = c.parallel;
  std::printf(
      "this config as written: %s (%d ranks) %s%s%s, ZeRO-%d, %s compute, "
      "recompute %s, micro-batch %d x %d per step\n",
      p.shape().describe().c_str(), static_cast<int>(p.ranks()), trident::name_of(p.schedule),
      p.sequence_parallel && p.tp > 1 ? ", sequence parallel" : "",
      c.model.moe.enabled() ? fmt::format(", ep={}", p.ep).c_str() : "",
      static_cast<int>(c.zero.stage), trident::name_of(c.precision.compute),
      trident::name_of(c.recompute.policy), c.train.micro_batch_size,
      c.train.batch_size / p.dp / c.train.micro_batch_size);
  std::printf("trident's memory model, busiest rank (%s), GB:", r.rank.describe().c_str());
  for (int k = 0; k < trident::kMemCategories; ++k)
    std::printf(" %s %.2f", trident::mem_category_name(static_cast<trident::MemCategory>(k)),
                r.prediction.bytes[k] / 1e9);
  // Fits as the planner decides it: the prediction plus the runtime reserve within the usable
  // share of HBM, the same figures its "why:" line prints.
  const double total_gb = r.prediction.total() / 1e9;
  const double usable_gb = trident::kPlanUsableMemoryFraction * gpu_mem_gb;
  std::printf(
      "\nCONFIG_MEMORY total_gb=%.2f model_states_gb=%.2f runtime_gb=%.1f usable_gb=%.1f "
      "fits=%s\n",
      total_gb, r.prediction.model_states() / 1e9, trident::kPlanRuntimeGB, usable_gb,
      total_gb + trident::kPlanRuntimeGB <= usable_gb ? "yes" : "no");
  print_layer_activations(c);
}

// The planner's time model for a run config's own layout on `cluster` (the paper's cluster by
// default), with TFLOP/s per GPU counted as Narayanan et al. 2021 count them (their Eq. 3), so the
// figure compares with their Table 1, for a dense model; as Megatron-Core counts them (model FLOPs:
// train's MFU numerator, the active experts only) for every model; and samples per second.
void print_config_time(const trident::Config& c, trident::PlanModel m,
                       const trident::PlanCluster& cluster) {
  const auto& p = c.parallel;
  if (c.offload.optimizer == trident::OffloadTarget::kNvme ||
      c.offload.params == trident::OffloadTarget::kNvme) {
    std::printf("CONFIG_TIME not predicted: the time model has no NVMe offload\n");
    return;
  }
  m.seq = c.train.seq_len;
  trident::PlanCandidate layout;
  layout.dp = p.dp, layout.tp = p.tp, layout.pp = p.pp, layout.ep = p.ep, layout.cp = p.cp;
  layout.virtual_stages = p.virtual_stages;
  layout.zero = static_cast<int>(c.zero.stage);
  layout.offload = c.offload.optimizer == trident::OffloadTarget::kHost ? "host" : "none";
  layout.recompute = trident::name_of(c.recompute.policy);
  layout.micro_batch = c.train.micro_batch_size;
  layout.sequence_parallel = p.sequence_parallel && p.tp > 1;
  trident::PlanCluster on = cluster;
  on.gpus = layout.gpus();
  const double sequences = c.train.batch_size;
  const trident::PlanCandidate k =
      trident::predict_layout(m, on, sequences * c.train.seq_len, layout);
  const bool dense = !c.model.moe.enabled();
  const double tflops =
      dense ? trident::paper_step_flops(m, sequences) / k.step_seconds / on.gpus / 1e12 : 0.0;
  // MFU as `train` computes it (6N + 12 L C T a token, no recomputation), and the hardware FLOPs
  // utilisation that counts the recomputed forwards too.
  const double tokens = sequences * c.train.seq_len;
  const double model_flops = trident::flops_per_token(c.model, c.train.seq_len) * tokens;
  const double recompute_flops =
      trident::recompute_flops_per_token(c.model, c.train.seq_len, c.recompute.resolved(),
                                         p.pp * p.virtual_stages) *
      tokens;
  const double peak = on.peak_tflops * 1e12 * on.gpus * k.step_seconds;
  const double mfu = 100 * model_flops / peak, hfu = 100 * (model_flops + recompute_flops) / peak;
  std::printf(
      "time model on %d x %.0f TFLOP/s GPUs (%d per node, %.0f GB/s in a node, %.0f GB/s between "
      "nodes): step %.2f s = compute %.2f (recompute %.2f) + pipeline %.2f + tensor-parallel %.2f "
      "+ data-parallel %.2f exposed (of %.2f) + offload %.2f + expert all-to-all %.2f + "
      "context-parallel %.2f\n",
      on.gpus, on.peak_tflops, on.gpus_per_node, on.intra_gbs, on.inter_gbs, k.step_seconds,
      k.compute_seconds, k.recompute_seconds, k.bubble_seconds, k.tp_seconds, k.dp_seconds,
      k.dp_traffic_seconds, k.offload_seconds, k.ep_seconds, k.cp_seconds);
  const double model_tflops = model_flops / k.step_seconds / on.gpus / 1e12;
  std::printf(
      "utilisation: MFU %.1f%% (train's: 6N + 12LCT FLOPs a token, N the active parameters, no "
      "recomputation), %.1f TFLOP/s per GPU; hardware FLOPs utilisation %.1f%% (recomputation "
      "counted)",
      mfu, model_tflops, hfu);
  if (dense)
    std::printf(
        "; %.1f TFLOP/s per GPU by Narayanan et al. 2021's Eq. 3 (which counts a full "
        "recomputation)",
        tflops);
  std::printf("; %.1f samples/s\n", sequences / k.step_seconds);
  std::printf(
      "CONFIG_TIME step_s=%.3f%s model_tflops_per_gpu=%.1f samples_per_second=%.2f "
      "mfu_percent=%.1f hfu_percent=%.1f\n",
      k.step_seconds, dense ? fmt::format(" tflops_per_gpu={:.1f}", tflops).c_str() : "",
      model_tflops, sequences / k.step_seconds, mfu, hfu);
}

// `trident train`: options, then the run on every rank.
struct TrainCommand {
  CLI::App* app = nullptr;
  std::string config_path;
  std::vector<std::string> overrides;
  trident::TrainOptions options;
  trident::FaultPlan faults;
  bool report_allocations = false;
  int profile_step = 0;

  void add_to(CLI::App& parent) {
    app = parent.add_subcommand("train", "train a model (run under mpirun for several ranks)");
    app->add_option("--config", config_path, "run config (TOML), e.g. inputs/small.toml")
        ->required();
    app->add_option("--set", overrides, "override a key: --set run.steps=10 (repeatable)");
    CLI::Option* resume = app->add_option_function<std::string>(
        "--resume",
        [this](const std::string& v) {
          options.resume_newest = v == "auto";
          options.resume = options.resume_newest ? "" : v;
        },
        "continue from this checkpoint (.h5), or 'auto': the newest complete one in "
        "<out_dir>/<name>/checkpoints, if any (for requeued jobs)");
    app->add_flag("--overwrite", options.overwrite,
                  "start afresh in a run directory that holds an earlier run, deleting its "
                  "timings and checkpoints (without it such a run is refused)")
        ->excludes(resume);
    app->add_flag("--allow-config-change", options.allow_config_change,
                  "resume although the config changes what the remaining steps compute "
                  "(optimizer, LR schedule, data, seed, precision); the changes are listed");
    app->add_flag("--report-allocations", report_allocations,
                  "count what Kokkos allocates and frees inside each training step (on a GPU, "
                  "cudaMalloc / cudaFree) and print STEP_ALLOCATIONS lines at the end: after "
                  "the first two steps there should be none");
    app->add_option("--profile-step", profile_step,
                    "time every kernel launch, GEMM and copy of step K (1-based) by label; rank 0 "
                    "writes the table to <run dir>/profile_step_K.tsv and prints a PROFILE line "
                    "(launches, their time, the share of an unprofiled step they fill)")
        ->check(CLI::Range(1, 1 << 30));
    app->add_option("--dump-grads", options.dump_grads,
                    "write the first step's gradients, gathered to global shapes, to this .h5 "
                    "(checkpoint schema, /params); for layout checks")
        ->check(kPath);
    add_fault_option("--inject-overflow", trident::parse_overflow,
                     "STEP:RANK: that rank's gradient becomes infinite at that step (tests fp16 "
                     "loss scaling)",
                     "--inject-overflow takes STEP:RANK, e.g. 3:1");
    add_fault_option("--inject-fault", trident::parse_fault,
                     "KIND:STEP:RANK with KIND kill, hang or kill-in-checkpoint: that rank is "
                     "killed, hangs, or is killed inside the checkpoint write at that step; "
                     "hang-comm:STEP:RANK:AXIS[:OP]: it hangs before its first operation on AXIS "
                     "(named OP) in that step; slow:STEP:RANK:FACTOR: its compute takes FACTOR "
                     "times as long from that step on (tests)",
                     "--inject-fault takes KIND:STEP:RANK, KIND one of kill, hang, "
                     "kill-in-checkpoint, or hang-comm:STEP:RANK:AXIS[:OP], or "
                     "slow:STEP:RANK:FACTOR with FACTOR in [1, 100]");
  }
  // A test-only option parsed into `faults`; `usage` when the value does not parse.
  void add_fault_option(const std::string& name,
                        bool (*parse)(const std::string&, trident::FaultPlan&),
                        const std::string& help, const std::string& usage) {
    app->add_option_function<std::string>(
           name, [this, parse](const std::string& v) { parse(v, faults); }, help)
        ->check([parse, usage](const std::string& v) {
          trident::FaultPlan plan;
          return parse(v, plan) ? std::string() : usage;
        });
  }
  int run() const {
    return run_train(MPI_COMM_WORLD, config_path, overrides, options, faults, report_allocations,
                     profile_step);
  }
};

// `trident generate`, `prepare` and `ckpt`: rank 0 reads or writes files.
struct FileCommands {
  CLI::App *generate = nullptr, *prepare = nullptr, *ckpt = nullptr, *doctor = nullptr;
  CLI::App *ckpt_info = nullptr, *ckpt_verify = nullptr, *ckpt_export = nullptr,
           *ckpt_import = nullptr;
  trident::GenerateOptions gen;
  trident::PrepareOptions prep;
  std::string ckpt_path, export_out, hf_dir, hf_dtype = "fp32", doctor_dir;
  bool allow_non_finite = false, info_json = false;
  double max_shard_mb = 5000;

  void add_to(CLI::App& app) {
    generate = app.add_subcommand("generate", "sample text from a checkpoint");
    generate->add_option("--ckpt", gen.checkpoint, "checkpoint (.h5)")->required();
    generate->add_option("--prompt", gen.prompt, "text to continue");
    generate->add_option("--tokens", gen.tokens, "tokens to sample")->capture_default_str();
    generate->add_option("--temperature", gen.temperature, "softmax temperature")
        ->check(kFinite)
        ->capture_default_str();
    generate->add_flag("--print-logits", gen.print_logits,
                       "print the prompt's next-token logits, one a line, instead of sampling");
    generate->add_option("--top-k", gen.top_k, "sample among the k most likely (0: all)")
        ->capture_default_str();
    generate->add_option("--seed", gen.seed, "sampling seed")->capture_default_str();
    generate->add_option("--tokenizer", gen.tokenizer,
                         "Hugging Face model directory whose tokenizer encodes the prompt and "
                         "decodes the output (default: the checkpoint's data.tokenizer)");
    generate->add_flag("--print-tokens", gen.print_tokens,
                       "after the text, print the prompt's and the sample's token ids");
    prepare = app.add_subcommand(
        "prepare", "build train/val token files: bytes, or a Hugging Face model's tokenizer");
    prepare->add_option("--text", prep.text_path, "UTF-8 text file, or - for stdin")->required();
    prepare->add_option("--out-dir", prep.out_dir, "output directory")->capture_default_str();
    prepare->add_option("--name", prep.name, "file name prefix")->capture_default_str();
    prepare->add_option("--val-fraction", prep.val_fraction, "share held out for validation")
        ->check(kFinite)
        ->capture_default_str();
    prepare
        ->add_option("--token-bytes", prep.token_bytes,
                     "bytes an id is stored in: 2 (llm.c's format) or 4 (32-bit ids); default: 2 "
                     "where the vocabulary fits 16 bits, else 4")
        ->check(CLI::IsMember({2, 4}));
    prepare->add_option("--tokenizer", prep.tokenizer,
                        "Hugging Face model directory (tokenizer.json) to tokenize with; default: "
                        "one id per byte");
    prepare->add_option("--doc-separator", prep.doc_separator,
                        "with --tokenizer: cut the text into documents at this string, each "
                        "framed by BOS/EOS as the tokenizer says (default: one document)");
    prepare->add_option("--max-bytes", prep.max_bytes, "stop with an error past this much text")
        ->capture_default_str();
    doctor = app.add_subcommand(
        "doctor", "merge a run's flight records and name the rank the others wait for");
    doctor->add_option("run_dir", doctor_dir, "run directory (or its flight/ directory)")
        ->required();
    ckpt = app.add_subcommand("ckpt", "inspect, verify, export or import a checkpoint");
    ckpt->require_subcommand(1);
    ckpt_info = ckpt->add_subcommand("info", "configuration, writing layout, step, sizes");
    ckpt_info->add_option("path", ckpt_path, "checkpoint (.h5)")->required();
    ckpt_info->add_flag("--json", info_json, "print it as one JSON object");
    ckpt_verify = ckpt->add_subcommand("verify", "recompute every dataset's checksum");
    ckpt_verify->add_option("path", ckpt_path, "checkpoint (.h5)")->required();
    ckpt_export = ckpt->add_subcommand(
        "export",
        "write the parameters as an llm.c model file (gpt2_124M.bin layout) or a Hugging Face "
        "GPT-2, Llama or Mixtral directory (config.json + safetensors)");
    ckpt_export->add_option("path", ckpt_path, "checkpoint (.h5)")->required()->check(kPath);
    CLI::Option* llmc = ckpt_export->add_option("--llmc", export_out, "output .bin")->check(kPath);
    CLI::Option* hf =
        ckpt_export->add_option("--hf", hf_dir, "output directory (Hugging Face)")->check(kPath);
    llmc->excludes(hf);
    ckpt_export->add_option("--dtype", hf_dtype, "--hf tensors: fp32 or bf16")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->capture_default_str();
    ckpt_export
        ->add_option("--max-shard-mb", max_shard_mb,
                     "--hf: split the safetensors into shards of at most this size")
        ->check(CLI::Range(0.001, 1e9))
        ->capture_default_str();
    ckpt_export->callback([this, llmc, hf] {
      if (llmc->count() + hf->count() == 0)
        throw CLI::RequiredError("ckpt export needs --llmc OUT.bin or --hf DIR");
    });
    ckpt_import = ckpt->add_subcommand(
        "import", "make a trident checkpoint of a Hugging Face GPT-2, Llama or Mixtral directory");
    ckpt_import->add_option("--hf", hf_dir, "directory with config.json and safetensors")
        ->required()
        ->check(kPath);
    ckpt_import->add_option("--out", ckpt_path, "checkpoint to write (.h5)")
        ->required()
        ->check(kPath);
    ckpt_import->add_flag("--allow-non-finite", allow_non_finite,
                          "keep weights that are NaN or infinite (refused by default)");
  }
  bool chosen() const { return *generate || *prepare || *ckpt || *doctor; }
  int run(int rank) const {
    if (rank != 0) return 0;
    if (*generate) {
      trident::generate(gen, [](const std::string& text) { std::cout << text << std::flush; });
      std::cout << std::endl;
    }
    if (*prepare) trident::prepare_corpus(prep);
    if (*doctor) trident::flight_report(doctor_dir);
    if (*ckpt_info) trident::checkpoint_info(ckpt_path, info_json);
    if (*ckpt_verify && trident::checkpoint_verify(ckpt_path) > 0) return kExitBadInput;
    if (*ckpt_export && !export_out.empty()) {
      trident::export_llmc(ckpt_path, export_out);
      std::printf("wrote %s\n", export_out.c_str());
    }
    if (*ckpt_export && !hf_dir.empty())
      trident::export_hf(ckpt_path, hf_dir, hf_dtype,
                         static_cast<uint64_t>(max_shard_mb * 1024.0 * 1024.0));
    if (*ckpt_import) trident::import_hf(hf_dir, ckpt_path, allow_non_finite);
    return 0;
  }
};

// `trident config`: a run config checked against a rank count and printed resolved.
struct ConfigCommand {
  CLI::App* app = nullptr;
  std::string path;
  std::vector<std::string> overrides;
  int ranks = 0;

  void add_to(CLI::App& parent) {
    app = parent.add_subcommand(
        "config", "check a run config against a rank count and print it resolved (TOML)");
    app->add_option("--config", path, "run config (TOML)")->required();
    app->add_option("--set", overrides, "override a key, as for train (repeatable)");
    app->add_option("--ranks", ranks,
                    "ranks to validate against (default dp x cp x tp x pp, dp = 0 counting as 1)")
        ->check(CLI::Range(1, 1 << 24));
  }
  void run(int rank) const {
    const trident::Config read = trident::load_config(path, overrides);
    trident::ParallelSection layout = read.parallel;
    layout.dp = std::max(layout.dp, 1);  // dp = 0 fills the ranks
    const trident::Config c =
        trident::resolve(read, ranks > 0 ? ranks : static_cast<int>(layout.ranks()));
    if (rank == 0) std::cout << c.to_toml();
  }
};

// `trident env`: what this process runs with, as one JSON line (jobs/ stores it in sweep.json).
struct EnvCommand {
  CLI::App* app = nullptr;

  void add_to(CLI::App& parent) {
    app = parent.add_subcommand(
        "env", "print the CPU, threads, BLAS kernel, MPI and revision a run here gets (JSON)");
  }
  void run(int rank) const {
    if (rank == 0)
      std::cout << trident::environment_json(Kokkos::DefaultExecutionSpace::name(),
                                             Kokkos::DefaultExecutionSpace().concurrency())
                << "\n";
  }
};

// The launch roofline of a one-rank config's step on `d`, as the CUDA build would launch it: on
// the datasheet ceilings, and on measured ones when given; its table to --roofline-table.
void print_roofline(const trident::Config& c, const trident::DevicePreset& d,
                    const std::optional<trident::RooflineCeilings>& measured,
                    const std::string& table_path) {
  trident::MemoryQuery q = trident::memory_query(c);
  const int padding = trident::gpu_vocab_padding(q.model);
  if (padding != q.model.vocab_padding)
    std::printf(
        "launch roofline: the vocabulary padded to a multiple of %d, the CUDA build's "
        "default (set model.vocab_padding to predict another)\n",
        padding);
  q.model.vocab_padding = padding;
  trident::StepLaunches launches;
  try {
    launches = trident::predict_step_launches(q, trident::LaunchTarget{});
  } catch (const trident::InputError& e) {
    std::printf("launch roofline: not predicted: %s\n", e.what());
    return;
  }
  const double tokens = static_cast<double>(q.micro_batch) * q.seq_len * q.micro_batches;
  const double model_flops = trident::flops_per_token(c.model, q.seq_len) * tokens;
  std::vector<trident::RooflineCeilings> ceilings{trident::datasheet_ceilings(d)};
  if (measured) ceilings.push_back(*measured);
  trident::Roofline last;
  for (const trident::RooflineCeilings& ceiling : ceilings) {
    last = trident::time_launches(launches, ceiling);
    std::fputs(trident::roofline_report(last, ceiling, d, model_flops, tokens, 20).c_str(), stdout);
  }
  if (table_path.empty()) return;
  trident::write_text_file(table_path, trident::roofline_tsv(last));
  std::printf("launch roofline table (%s ceilings): %s\n", ceilings.back().source.c_str(),
              table_path.c_str());
}

// `trident plan`: the layouts of a model on a cluster, and a config's own memory.
struct PlanCommand {
  CLI::App* app = nullptr;
  trident::PlanModel model;
  trident::PlanCluster cluster;
  std::string config_path;
  std::vector<std::string> overrides;
  std::string device;
  std::string attention = "unfused", cp_comm = "ring";
  double batch_tokens = 1 << 20;
  int top = 10;
  // How often to checkpoint (plan/checkpoint_interval.hpp).
  double checkpoint_seconds = 0, mtbf_hours = 0, restart_seconds = 0;
  // The launch roofline's measured ceilings and its table.
  double copy_gbs = 0, gemm_tflops = 0;
  std::string gemm_ceilings, roofline_table;
  std::optional<trident::RooflineCeilings> measured_ceilings;

  void add_to(CLI::App& parent) {
    app = parent.add_subcommand("plan", "recommend a layout for a model on a GPU cluster");
    app->add_option("--config", config_path,
                    "a run config: predict its own layout's memory, and plan for its model");
    app->add_option("--set", overrides, "override a key of --config (repeatable)");
    app->add_option("--params", model.params, "parameters (default 12 L h^2 + V h)")
        ->check(kFinite);
    app->add_option("--layers", model.layers, "transformer layers L");
    app->add_option("--hidden", model.hidden, "hidden size h");
    app->add_option("--heads", model.heads, "attention heads");
    app->add_flag("--llama", model.llama,
                  "Llama family: RMSNorm, SwiGLU, grouped-query attention, untied head");
    app->add_option("--kv-heads", model.kv_heads, "Llama: key/value heads (default: --heads)");
    app->add_option("--ffn", model.ffn, "Llama: SwiGLU width (default: 8h/3 rounded up to 256)");
    app->add_option("--experts", model.moe.experts,
                    "Mixture of Experts: routed experts per MoE layer (default 0: dense)");
    app->add_option("--top-k", model.moe.top_k, "MoE: experts a token is routed to")
        ->capture_default_str();
    app->add_option("--expert-ffn", model.moe.expert_ffn,
                    "MoE: an expert's MLP width (default: the dense MLP's)");
    app->add_option("--shared-experts", model.moe.shared,
                    "MoE: shared experts every token runs (default 0)");
    app->add_option("--moe-every", model.moe.every,
                    "MoE on layers 0, n, 2n, ... (default 1: every layer)")
        ->capture_default_str();
    app->add_option("--capacity-factor", model.moe.capacity_factor,
                    "MoE: slots an expert keeps, times its share (default 0: dropless)")
        ->check(kFinite);
    app->add_option("--seq", model.seq, "sequence length")->capture_default_str();
    app->add_option("--vocab", model.vocab, "vocabulary")->capture_default_str();
    std::string presets;
    for (const trident::DevicePreset& d : trident::device_presets())
      presets += (presets.empty() ? "" : ", ") + std::string(d.name);
    app->add_option("--attention", attention,
                    "attention kernel the time model assumes: unfused (scores in HBM, every "
                    "product; the default, as fitted) or fused (flash: the causal half, no scores)")
        ->check(CLI::IsMember({"unfused", "fused"}))
        ->capture_default_str();
    app->add_option("--cp-comm", cp_comm,
                    "context parallelism's keys and values: ring (each hop overlapped with "
                    "attention) or allgather (exposed, as Llama 3); with --config, the config's")
        ->check(CLI::IsMember({"ring", "allgather"}))
        ->capture_default_str();
    app->add_option("--device", device,
                    "a GPU's datasheet figures for --gpu-mem, --peak-tflops, --hbm-bw, --intra-bw "
                    "and --inter-bw (each option given too wins): " +
                        presets + ", or auto (the GPU a CUDA build runs on)");
    app->add_option("--gpus", cluster.gpus, "GPUs")->capture_default_str();
    app->add_option("--gpus-per-node", cluster.gpus_per_node, "GPUs per node")
        ->capture_default_str();
    app->add_option("--gpu-mem", cluster.gpu_mem_gb, "memory per GPU, GB")
        ->check(kFinite)
        ->capture_default_str();
    app->add_option("--peak-tflops", cluster.peak_tflops, "bf16 peak per GPU")
        ->check(kFinite)
        ->capture_default_str();
    app->add_option("--mfu", cluster.mfu, "share of the peak a full-width GEMM reaches")
        ->check(kFinite)
        ->capture_default_str();
    app->add_option("--hbm-bw", cluster.hbm_gbs, "HBM bandwidth per GPU, GB/s")
        ->check(kFinite)
        ->capture_default_str();
    app->add_option("--hbm-efficiency", cluster.hbm_efficiency,
                    "share of the HBM bandwidth element-wise kernels reach")
        ->check(kFinite)
        ->capture_default_str();
    app->add_option("--attention-efficiency", cluster.attention_efficiency,
                    "share of the peak a fused attention kernel reaches, forward and backward "
                    "(default: the --device preset's published figure, else as --mfu)")
        ->check(kFinite);
    app->add_option("--intra-bw", cluster.intra_gbs, "per-GPU bandwidth in a node, GB/s")
        ->check(kFinite)
        ->capture_default_str();
    app->add_option("--inter-bw", cluster.inter_gbs, "per-GPU bandwidth between nodes, GB/s")
        ->check(kFinite)
        ->capture_default_str();
    app->add_option("--batch-tokens", batch_tokens, "global batch in tokens")
        ->check(kFinite)
        ->capture_default_str();
    app->add_option("--top", top, "layouts to list (0: only the config's and the summary)")
        ->check(CLI::Range(0, 1000000))
        ->capture_default_str();
    // With --config and --device: the config's step launch by launch (plan/roofline.hpp).
    app->add_option("--copy-gbs", copy_gbs,
                    "launch roofline on measured ceilings: a device-to-device copy's rate, GB/s "
                    "(with --gemm-tflops)")
        ->check(CLI::PositiveNumber);
    app->add_option("--gemm-tflops", gemm_tflops,
                    "launch roofline on measured ceilings: a large bf16 GEMM's rate, TFLOP/s")
        ->check(CLI::PositiveNumber);
    app->add_option(
        "--gemm-ceilings", gemm_ceilings,
        "launch roofline: each GEMM label's measured time (bench/gpu_ceilings.py --out)");
    app->add_option("--roofline-table", roofline_table,
                    "write the launch roofline's table (the profile table's columns) to this file");
    app->add_option("--checkpoint-seconds", checkpoint_seconds,
                    "checkpoint interval: one checkpoint write's seconds (analysis/goodput.py "
                    "measures it), with --mtbf-hours")
        ->check(kFinite);
    app->add_option("--mtbf-hours", mtbf_hours,
                    "checkpoint interval: the job's mean time between failures, hours")
        ->check(kFinite);
    app->add_option("--restart-seconds", restart_seconds,
                    "checkpoint interval: seconds from a failure to training again")
        ->check(kFinite)
        ->capture_default_str();
  }
  void run(int rank) {
    const bool measured = copy_gbs > 0 || gemm_tflops > 0 || !gemm_ceilings.empty();
    if ((measured || !roofline_table.empty()) && (config_path.empty() || device.empty()))
      throw trident::InputError(
          "--copy-gbs, --gemm-tflops, --gemm-ceilings and --roofline-table belong to the launch "
          "roofline, which needs --config and --device");
    if (measured && (copy_gbs <= 0 || gemm_tflops <= 0))
      throw trident::InputError("measured ceilings need both --copy-gbs and --gemm-tflops");
    if (measured)  // read before any output: a bad file is an input error
      measured_ceilings = trident::measured_ceilings(copy_gbs, gemm_tflops, gemm_ceilings);
    model.fused_attention = attention == "fused";
    trident::parse_name(cp_comm, model.cp_comm);  // a member: checked by the option
    const bool interval = app->count("--checkpoint-seconds") + app->count("--mtbf-hours") > 0;
    if (interval) {  // checked before the plan prints anything
      if (checkpoint_seconds <= 0 || mtbf_hours <= 0)
        throw trident::InputError(
            "the checkpoint interval needs --checkpoint-seconds and --mtbf-hours, both positive");
      const trident::CheckpointInterval c =
          trident::checkpoint_interval(checkpoint_seconds, mtbf_hours * 3600, restart_seconds);
      if (rank == 0)
        std::printf(
            "%s\n",
            trident::describe(c, checkpoint_seconds, mtbf_hours * 3600, restart_seconds).c_str());
      if (app->count("--params") + app->count("--layers") + app->count("--config") == 0) return;
    }
    if (!device.empty()) apply_device(rank);
    if (!config_path.empty()) plan_for_config(rank);
    if (rank == 0) print_plan(model, cluster, batch_tokens, top);
  }
  // A Mixture-of-Experts config: its parameter counts from the parameter table (total and
  // active per token, the FLOPs MFU counts), and its layout at every expert-parallel size.
  static void print_moe_config(const trident::Config& c) {
    const trident::ModelConfig& m = c.model;
    const double total = static_cast<double>(trident::parameter_count(m));
    const double active = static_cast<double>(trident::active_parameter_count(m));
    std::printf(
        "model: %.4gB parameters, %.4gB active per token | %s, %d of %d MoE layers, top-%d "
        "routing (%s)\n",
        total / 1e9, active / 1e9, m.shape_line().c_str(), m.moe_layers(), m.n_layer, m.moe.top_k,
        trident::name_of(m.moe.router));
    std::printf("model FLOPs per token (training, active experts only): %.4g at seq %d\n",
                trident::flops_per_token(m, c.train.seq_len), c.train.seq_len);
    print_expert_options(c);
  }
  // The config's own layout at every expert-parallel size it allows: the busiest rank's memory
  // (the stages' buffer plans, as `train` predicts them) and the all-to-all volume of a step.
  static void print_expert_options(trident::Config c) {
    if (c.parallel.dp == 0) c.parallel.dp = 1;
    try {
      c = trident::resolve(c, static_cast<int>(c.parallel.ranks()));
    } catch (const trident::InputError& e) {  // the counts stand; the layout does not
      std::printf("the config's layout is not one a run can have: %s\n", e.what());
      return;
    }
    const trident::MemoryQuery q = trident::memory_query(c);
    std::printf(
        "the config's layout (dp=%d tp=%d pp=%d, micro-batch %d x %d tokens) at each "
        "expert-parallel size (memory: the buffer plans, exact; all-to-all: routing spread "
        "evenly):\n",
        q.dp, q.tp, q.pp, q.micro_batch, q.seq_len);
    std::printf("  %-6s %-22s %14s %14s %22s\n", "ep", "busiest rank", "memory MiB", "model states",
                "all-to-all MiB/step");
    for (const trident::ExpertOption& o : trident::expert_options(q)) {
      const trident::GridCoord& r = o.busiest.rank;
      std::printf("  %-6s %-22s %14.2f %14.2f %22.3f\n",
                  (std::to_string(o.ep) + (o.ep == c.parallel.ep ? " *" : "")).c_str(),
                  fmt::format("dp={} tp={} pp={}", r[trident::Axis::dp], r[trident::Axis::tp],
                              r[trident::Axis::pp])
                      .c_str(),
                  o.busiest.prediction.total() / 1048576.0,
                  o.busiest.prediction.model_states() / 1048576.0, o.exchanged_bytes / 1048576.0);
    }
  }
  // The preset's figures, except where the command line gave its own.
  void apply_device(int rank) {
    const trident::PlanCluster given = cluster;
    const trident::DevicePreset* preset = nullptr;
    if (device == "auto") {  // the GPU this (CUDA) build runs on
      const std::string name = trident::device_name();
      preset = trident::preset_for_device_name(name);
      if (!preset)
        throw trident::InputError(name.empty()
                                      ? "--device auto: this build runs on no GPU (a host build)"
                                      : "--device auto: no preset for this GPU, " + name);
    }
    cluster = trident::on_device(cluster, preset ? *preset : trident::device_preset(device));
    const auto keep = [&](const char* option, double trident::PlanCluster::*field) {
      if (app->count(option) > 0) cluster.*field = given.*field;
    };
    keep("--gpu-mem", &trident::PlanCluster::gpu_mem_gb);
    keep("--peak-tflops", &trident::PlanCluster::peak_tflops);
    keep("--hbm-bw", &trident::PlanCluster::hbm_gbs);
    keep("--intra-bw", &trident::PlanCluster::intra_gbs);
    keep("--inter-bw", &trident::PlanCluster::inter_gbs);
    keep("--attention-efficiency", &trident::PlanCluster::attention_efficiency);
    const trident::DevicePreset& d = *cluster.device;
    if (rank == 0)
      std::printf(
          "device %s: %.0f GB, %.1f TFLOP/s bf16 dense, %.0f GB/s HBM, NVLink %.0f GB/s (both "
          "directions), network %.0f GB/s per GPU (datasheets); planning with %.0f GB, %.1f "
          "TFLOP/s, %.0f GB/s HBM, %.0f GB/s in a node, %.0f GB/s between nodes%s\n",
          d.model, d.memory_gb, d.bf16_tflops, d.hbm_gbs, d.nvlink_gbs, d.network_gbs,
          cluster.gpu_mem_gb, cluster.peak_tflops, cluster.hbm_gbs, cluster.intra_gbs,
          cluster.inter_gbs,
          cluster.attention_efficiency > 0 && model.fused_attention
              ? fmt::format(", fused attention at {:.0f}% of the peak",
                            100 * cluster.attention_efficiency)
                    .c_str()
              : "");
  }
  // The config's model, batch and ranks replace the command line's where it gave none.
  void plan_for_config(int rank) {
    const trident::Config c = trident::load_config(config_path, overrides);
    model.layers = c.model.n_layer;
    model.hidden = c.model.n_embd;
    model.heads = c.model.n_head;
    model.vocab = c.model.vocab_size;
    model.llama = c.model.llama();
    model.kv_heads = c.model.kv_heads();
    model.ffn = c.model.llama() ? c.model.mlp_hidden() : 0;
    model.tied = c.model.tied();
    model.seq = c.model.block_size;
    if (app->count("--cp-comm") == 0) model.cp_comm = c.parallel.cp_comm;
    if (c.model.moe.enabled()) {
      trident::validate_model(c);
      model.moe.experts = c.model.moe.n_experts;
      model.moe.top_k = c.model.moe.top_k;
      model.moe.expert_ffn = c.model.expert_hidden();
      model.moe.shared = c.model.moe.n_shared_experts;
      model.moe.every = c.model.moe.moe_layer_every;
      model.moe.capacity_factor = c.model.moe.capacity_factor;
      if (rank == 0) print_moe_config(c);
    }
    // The config's own layout on its own ranks (dp = 0 fills --gpus), and its batch.
    const auto& p = c.parallel;
    const int ranks = p.dp > 0 ? static_cast<int>(p.ranks()) : cluster.gpus;
    if (app->count("--gpus") == 0) cluster.gpus = ranks;
    if (app->count("--batch-tokens") == 0)
      batch_tokens = static_cast<double>(c.train.batch_size) * c.train.seq_len;
    try {
      const trident::Config resolved = trident::resolve(c, ranks);
      if (rank == 0) {
        print_config_memory(resolved, cluster.gpu_mem_gb);
        print_config_time(resolved, model, cluster);
        if (cluster.device)
          print_roofline(resolved, *cluster.device, measured_ceilings, roofline_table);
      }
    } catch (const trident::InputError& e) {
      // Planning for the config's model still makes sense when its own layout does not.
      if (rank == 0)
        std::printf(
            "this config as written does not run on %d ranks (%s); planning for its model "
            "only\n",
            ranks, e.what());
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  trident::process_start_unix();  // start-up is counted from here (goodput)
  // Kokkos prints its options for --kokkos-help and takes the flag out: that was the request.
  const bool kokkos_help = std::find_if(argv, argv + argc, [](const char* a) {
                             return std::strcmp(a, "--kokkos-help") == 0;
                           }) != argv + argc;
  return trident::with_mpi_and_kokkos(argc, argv, {"trident", kExitBadInput, false}, [&] {
    if (kokkos_help) return 0;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int status = 0;
    CLI::App app{"trident: 3D-parallel GPT training on Kokkos and MPI"};
    app.footer("Kokkos' own options (threads, devices, tools): trident --kokkos-help");
    app.require_subcommand(1);
    TrainCommand train;
    FileCommands files;
    ConfigCommand show;
    PlanCommand plan;
    EnvCommand env;
    train.add_to(app);
    files.add_to(app);
    show.add_to(app);
    plan.add_to(app);
    env.add_to(app);
    try {
      app.parse(argc, argv);
      if (*train.app) status = train.run();
      if (files.chosen()) status = files.run(rank);
      if (*show.app) show.run(rank);
      if (*plan.app) plan.run(rank);
      if (*env.app) env.run(rank);
    } catch (const CLI::ParseError& e) {
      status = app.exit(e);
      if (status != 0) status = kExitBadInput;
    } catch (const trident::InputError& e) {
      if (rank == 0) std::fprintf(stderr, "trident: error: %s\n", e.what());
      status = kExitBadInput;
    } catch (const std::exception& e) {
      // Not agreed by every rank (an unexpected system error on one): say which rank, and end the
      // whole job, since the others may wait for this one in a collective.
      std::fprintf(stderr, "trident: error: rank %d: %s\n", rank, e.what());
      std::fflush(stderr);
      int ranks = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &ranks);
      if (ranks > 1) MPI_Abort(MPI_COMM_WORLD, kExitBadInput);
      status = kExitBadInput;
    }
    return status;
  });
}
