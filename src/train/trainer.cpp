// Training driver implementation.
#include "train/trainer.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "core/version.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset.hpp"
#include "io/timings.hpp"
#include "kernels/adamw.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/schedule.hpp"

namespace trident {
namespace {

constexpr uint64_t kTrainStream = 1, kValStream = 2;

std::string hostnames(MPI_Comm comm) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  TRIDENT_MPI(MPI_Get_processor_name(name, &len));
  int size = 0;
  TRIDENT_MPI(MPI_Comm_size(comm, &size));
  std::vector<char> all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  TRIDENT_MPI(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                            MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm));
  std::string out;
  for (int r = 0; r < size; ++r)
    out +=
        (r ? "," : "") + std::string(all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  return out;
}

std::string now_iso8601() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Checks that a checkpoint's model matches the configured one, before anything is written.
void check_resume_compatible(const Config& ours, const std::string& path) {
  const Config theirs = read_checkpoint_config(path);
  const ModelConfig &a = ours.model, &b = theirs.model;
  if (a.n_layer != b.n_layer || a.n_embd != b.n_embd || a.n_head != b.n_head ||
      a.vocab_size != b.vocab_size || a.block_size != b.block_size)
    throw InputError(fmt::format(
        "checkpoint '{}' holds a different model (L={} C={} NH={} V={} block={}) than the "
        "config (L={} C={} NH={} V={} block={})",
        path, b.n_layer, b.n_embd, b.n_head, b.vocab_size, b.block_size, a.n_layer, a.n_embd,
        a.n_head, a.vocab_size, a.block_size));
}

class Trainer {
 public:
  Trainer(Config c, const Grid& grid, const TrainOptions& opt)
      : c_(std::move(c)), grid_(grid), opt_(opt) {}
  int run();

 private:
  double evaluate(Gpt& model, const BatchSampler& val);
  void log(const std::string& line) const {
    if (grid_.rank() == 0) {
      std::fputs((line + "\n").c_str(), stdout);
      std::fflush(stdout);
    }
  }

  Config c_;
  const Grid& grid_;
  TrainOptions opt_;
  std::vector<int32_t> inputs_, targets_;
};

double Trainer::evaluate(Gpt& model, const BatchSampler& val) {
  const int T = c_.train.seq_len, micro = c_.train.micro_batch_size;
  const int per_rank = c_.train.batch_size / grid_.shape().dp;
  double sum = 0.0;
  for (int b = 0; b < c_.run.eval_batches; ++b)
    for (int first = 0; first < per_rank; first += micro) {
      val.fill(b, grid_.coord().dp * per_rank + first, micro, inputs_.data(), targets_.data());
      sum += model.forward(inputs_.data(), targets_.data(), micro, T);
    }
  double total = 0.0;
  TRIDENT_MPI(MPI_Allreduce(&sum, &total, 1, MPI_DOUBLE, MPI_SUM, grid_.dp_comm()));
  return total / (static_cast<double>(c_.run.eval_batches) * c_.train.batch_size * T);
}

int Trainer::run() {
  const int T = c_.train.seq_len, micro = c_.train.micro_batch_size;
  const int dp = grid_.shape().dp, per_rank = c_.train.batch_size / dp;
  const int64_t tokens_per_step = static_cast<int64_t>(c_.train.batch_size) * T;

  // Everything the user supplied is checked before any file is written.
  const std::vector<uint16_t> train_tokens = read_token_file(c_.data.train);
  const std::vector<uint16_t> val_tokens = read_token_file(c_.data.val);
  for (const auto* tokens : {&train_tokens, &val_tokens}) {
    const uint16_t max_token =
        tokens->empty() ? 0 : *std::max_element(tokens->begin(), tokens->end());
    if (max_token >= c_.model.vocab_size)
      throw InputError(fmt::format("data file '{}' holds token {} but model.vocab_size = {}",
                                   tokens == &train_tokens ? c_.data.train : c_.data.val, max_token,
                                   c_.model.vocab_size));
  }
  const BatchSampler train_sampler(train_tokens, c_.run.seed, kTrainStream, T);
  const BatchSampler val_sampler(val_tokens, c_.run.seed, kValStream, T);
  if (!opt_.resume.empty()) check_resume_compatible(c_, opt_.resume);

  MemoryLedger ledger;
  Gpt model(c_.model, ledger, micro, T);
  model.init_params(static_cast<uint64_t>(c_.run.seed));
  AdamW optimizer(model.table(), ledger,
                  {c_.optim.beta1, c_.optim.beta2, c_.optim.eps, c_.optim.weight_decay});
  int start_step = 0;
  if (!opt_.resume.empty()) {
    const CheckpointMeta meta = load_checkpoint(opt_.resume, model, &optimizer);
    start_step = static_cast<int>(meta.data_cursor);
    log(fmt::format("resumed from {} at step {} (written with layout {})", opt_.resume, start_step,
                    meta.layout));
  }
  const LrSchedule schedule{c_.optim.lr, c_.optim.min_lr_ratio, c_.optim.warmup_steps,
                            c_.run.steps};
  inputs_.resize(static_cast<size_t>(micro) * T);
  targets_.resize(static_cast<size_t>(micro) * T);

  const std::filesystem::path run_dir = std::filesystem::path(c_.run.out_dir) / c_.run.name;
  const std::filesystem::path ckpt_dir = run_dir / "checkpoints";
  const std::string layout = grid_.describe() + fmt::format(" micro_batch={}", micro);
  const std::string hosts = hostnames(grid_.world());
  std::unique_ptr<TimingsWriter> timings;
  if (grid_.rank() == 0) {
    std::filesystem::create_directories(ckpt_dir);
    const auto timings_path = run_dir / "timings.h5";
    if (start_step > 0 && std::filesystem::exists(timings_path))
      std::filesystem::rename(timings_path,
                              run_dir / fmt::format("timings.before_step_{}.h5", start_step));
    const char* slurm = std::getenv("SLURM_JOB_ID");
    timings = std::make_unique<TimingsWriter>(
        timings_path.string(), grid_.size(),
        std::map<std::string, std::string>{{"config", c_.to_toml()},
                                           {"layout", layout},
                                           {"git_revision", git_revision()},
                                           {"hostnames", hosts},
                                           {"slurm_job_id", slurm ? slurm : ""},
                                           {"start_time", now_iso8601()},
                                           {"resumed_from", opt_.resume}});
  }
  TRIDENT_MPI(MPI_Barrier(grid_.world()));

  const double flops_token = flops_per_token(c_.model, T);
  log(fmt::format("trident {} | model {} L={} C={} NH={} V={} T={} | {:.3f}M parameters",
                  git_revision(), c_.model.name, c_.model.n_layer, c_.model.n_embd, c_.model.n_head,
                  c_.model.vocab_size, T, model.table().total_numel() / 1e6));
  log(
      fmt::format("layout {} | {} ranks | global batch {} x {} = {} tokens | {} micro-batches "
                  "per rank",
                  layout, grid_.size(), c_.train.batch_size, T, tokens_per_step, per_rank / micro));
  log(
      fmt::format("MFU = {:.4g} FLOP/token x tokens/s / ({} ranks x {} TFLOP/s peak per rank); "
                  "FLOP/token = 6 x params + 12 x L x C x T (PaLM)",
                  flops_token, grid_.size(), c_.run.peak_tflops));
  log(fmt::format("outputs: {}", run_dir.string()));

  PhaseTimer timer;
  std::vector<double> gathered(static_cast<size_t>(grid_.size()) * kPhases);
  std::vector<double> gathered_mem(grid_.size());
  double loss = 0.0, val_loss = NAN, grad_norm = 0.0, lr = 0.0, sum_ms = 0.0;
  int timed_steps = 0;
  std::string last_ckpt;
  for (int step = start_step; step < c_.run.steps; ++step) {
    timer.reset();
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grads();
    double loss_sum = 0.0;
    const float loss_scale = 1.0f / static_cast<float>(tokens_per_step);
    for (int first = 0; first < per_rank; first += micro) {
      train_sampler.fill(step, grid_.coord().dp * per_rank + first, micro, inputs_.data(),
                         targets_.data());
      {
        ScopedPhase p(timer, Phase::kForward);
        loss_sum += model.forward(inputs_.data(), targets_.data(), micro, T);
      }
      ScopedPhase p(timer, Phase::kBackward);
      model.backward(loss_scale);
    }
    {
      ScopedPhase p(timer, Phase::kDpComm);
      if (dp > 1)
        TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, model.grads().data(),
                                  static_cast<int>(model.grads().extent(0)), MPI_FLOAT, MPI_SUM,
                                  grid_.dp_comm()));
      TRIDENT_MPI(MPI_Allreduce(&loss_sum, &loss, 1, MPI_DOUBLE, MPI_SUM, grid_.dp_comm()));
    }
    loss /= static_cast<double>(tokens_per_step);
    if (!std::isfinite(loss)) {
      log(fmt::format("error: loss is {} at step {}; stopping (lower optim.lr or check the data)",
                      loss, step + 1));
      return 3;
    }
    {
      ScopedPhase p(timer, Phase::kOptimizer);
      grad_norm = std::sqrt(kernels::sum_of_squares(Exec(), model.grads()));
      const double max_norm = c_.optim.max_norm;
      const float clip = max_norm > 0 && grad_norm > max_norm
                             ? static_cast<float>(max_norm / (grad_norm + 1e-6))
                             : 1.0f;
      lr = schedule.at(step);
      optimizer.step(model.params(), model.grads(), lr, clip);
    }
    const bool last = step + 1 == c_.run.steps;
    const bool want_ckpt =
        last || (c_.run.checkpoint_every > 0 && (step + 1) % c_.run.checkpoint_every == 0);
    if (want_ckpt && grid_.rank() == 0) {
      ScopedPhase p(timer, Phase::kIo);
      last_ckpt = (ckpt_dir / fmt::format("step_{:06d}.h5", step + 1)).string();
      save_checkpoint(last_ckpt, c_, model, optimizer,
                      {step + 1, step + 1, c_.run.seed, layout, git_revision()});
    }
    const double step_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Validation is outside the step's timed phases: it is not training work.
    val_loss = NAN;
    if (last || (c_.run.eval_every > 0 && (step + 1) % c_.run.eval_every == 0))
      val_loss = evaluate(model, val_sampler);

    double step_max = 0, step_min = 0;
    const double peak_mem = static_cast<double>(ledger.peak_total());
    TRIDENT_MPI(MPI_Gather(timer.all().data(), kPhases, MPI_DOUBLE, gathered.data(), kPhases,
                           MPI_DOUBLE, 0, grid_.world()));
    TRIDENT_MPI(
        MPI_Gather(&peak_mem, 1, MPI_DOUBLE, gathered_mem.data(), 1, MPI_DOUBLE, 0, grid_.world()));
    TRIDENT_MPI(MPI_Reduce(&step_s, &step_max, 1, MPI_DOUBLE, MPI_MAX, 0, grid_.world()));
    TRIDENT_MPI(MPI_Reduce(&step_s, &step_min, 1, MPI_DOUBLE, MPI_MIN, 0, grid_.world()));
    if (grid_.rank() == 0) {
      StepRecord r;
      r.step = step + 1;
      r.loss = loss;
      r.val_loss = val_loss;
      r.lr = lr;
      r.grad_norm = grad_norm;
      r.tokens = tokens_per_step;
      r.step_seconds_max = step_max;
      r.step_seconds_min = step_min;
      r.phase_seconds = gathered;
      r.peak_mem_bytes = gathered_mem;
      timings->append(r);
      if (step > start_step || c_.run.steps - start_step == 1) {  // first step warms caches
        sum_ms += step_max * 1e3;
        ++timed_steps;
      }
      const double tok_s = tokens_per_step / step_max;
      const double mfu = 100.0 * flops_token * tok_s / (grid_.size() * c_.run.peak_tflops * 1e12);
      if ((step + 1) % c_.run.log_every == 0 || last)
        log(fmt::format(
            "step {:>5}/{} | loss {:.4f} | lr {:.3e} | norm {:.4f} | {:.1f} ms "
            "(min {:.1f}) | {:.0f} tok/s | MFU {:.2f}% | peak mem {:.1f} MiB",
            step + 1, c_.run.steps, loss, lr, grad_norm, step_max * 1e3, step_min * 1e3, tok_s, mfu,
            *std::max_element(gathered_mem.begin(), gathered_mem.end()) / 1048576.0));
      if (!std::isnan(val_loss))
        log(fmt::format("eval  {:>5}/{} | val loss {:.4f}", step + 1, c_.run.steps, val_loss));
    }
  }
  if (grid_.rank() == 0) {
    const double ms = timed_steps ? sum_ms / timed_steps : 0.0;
    const double tok_s = ms > 0 ? tokens_per_step / (ms / 1e3) : 0.0;
    const double mfu = 100.0 * flops_token * tok_s / (grid_.size() * c_.run.peak_tflops * 1e12);
    log(fmt::format("checkpoint: {}", last_ckpt.empty() ? "none" : last_ckpt));
    log(
        fmt::format("PERFORMANCE steps={} ranks={} layout=\"{}\" ms_per_step={:.2f} "
                    "tokens_per_s={:.1f} mfu_percent={:.3f} final_loss={:.6f} val_loss={:.6f} "
                    "peak_mem_mib={:.1f}",
                    c_.run.steps - start_step, grid_.size(), layout, ms, tok_s, mfu, loss, val_loss,
                    ledger.peak_total() / 1048576.0));
  }
  return 0;
}

}  // namespace

int train(Config config, const Grid& grid, const TrainOptions& options) {
  return Trainer(std::move(config), grid, options).run();
}

}  // namespace trident
