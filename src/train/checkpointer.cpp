// Checkpoint writing, rotation, loading and gradient dumps over the strategies' owned buffers.
#include "train/checkpointer.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <regex>

#include "core/error.hpp"
#include "core/paths.hpp"
#include "core/version.hpp"
#include "model/params.hpp"

namespace trident {

Checkpointer::Checkpointer(const Config& config, const Grid& grid, const HostCollectives& world,
                           std::vector<ModelChunk>& chunks, std::string layout,
                           std::string data_identity, StepHooks& hooks,
                           std::vector<float>& expert_bias)
    : config_(config),
      grid_(grid),
      world_(world),
      chunks_(chunks),
      layout_(std::move(layout)),
      data_identity_(std::move(data_identity)),
      hooks_(hooks),
      expert_bias_(expert_bias),
      dir_(std::filesystem::path(config.run.out_dir) / config.run.name / "checkpoints") {}

bool Checkpointer::due(int step) const {
  const int every = config_.run.checkpoint_every;
  return every >= 0 && (step == config_.run.steps || (every > 0 && step % every == 0));
}

ShardOwner Checkpointer::owner() const {
  ShardOwner o;
  o.dp = grid_.data_size();  // ZeRO shards over dp x cp
  o.dp_rank = grid_.data_rank();
  o.tp_rank = grid_.coord()[Axis::tp];
  o.expert_dp = grid_.experts().expert_dp;
  o.expert_dp_rank = grid_.experts().expert_dp_rank;
  o.zero_stage = static_cast<int>(config_.zero.stage);
  return o;
}

std::vector<ShardBuffers> Checkpointer::buffers(const std::vector<ChunkState>& states) const {
  std::vector<ShardBuffers> out;
  for (size_t c = 0; c < chunks_.size(); ++c)
    out.push_back({&chunks_[c].stage->local(), states[c].params, states[c].m, states[c].v});
  return out;
}

// Rank 0 compares the free space of the checkpoint directory's file system with what the
// checkpoint holds (parameters and two moments in fp32, plus a margin for metadata) and every rank
// learns the answer, so none starts a collective write that cannot end.
void Checkpointer::require_room(const std::string& which) const {
  const double needed =
      3.0 * 4.0 * static_cast<double>(ParamTable(config_.model).total_numel()) + 1048576.0;
  double available = 0;
  if (world_.rank() == 0) {
    struct statvfs fs {};
    available = statvfs(dir_.c_str(), &fs) == 0
                    ? static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize)
                    : needed;  // unknown: let the write itself report
  }
  available = world_.max(available);
  if (available < needed)
    throw InputError(
        fmt::format("the file system holding {} is full: {:.1f} MiB free, {} needs {:.1f} MiB; "
                    "free space or point run.out_dir at another file system, then --resume auto",
                    dir_.string(), available / 1048576.0, which, needed / 1048576.0));
}

void Checkpointer::require_writable() const {
  world_.agree([&] {
    if (world_.rank() != 0) return;
    make_directories(dir_, "the checkpoint directory");
    // A file written and removed: the permission bits alone say nothing on a read-only mount, to
    // root, or under ACLs and quotas.
    const std::filesystem::path probe = dir_ / fmt::format(".write_test.{}", getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const bool written = fd >= 0 && ::write(fd, "t", 1) == 1;
    const int error = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(probe.c_str());
    if (!written)
      throw InputError(
          fmt::format("the checkpoint directory {} is not writable: {}; make it writable or point "
                      "run.out_dir elsewhere (run.checkpoint_every = -1 writes no checkpoint)",
                      dir_.string(), explain_errno(error)));
  });
  require_room("the run's first checkpoint");
}

std::vector<std::string> Checkpointer::remove_unfinished_writes() const {
  std::vector<std::string> removed;
  if (world_.rank() != 0) return removed;
  static const std::regex unfinished(R"(\.step_[0-9]{6,}\.h5\.[0-9]+\.[0-9a-f]+\.tmp)");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, unfinished) || !entry.is_regular_file(ec)) continue;
    if (std::filesystem::remove(entry.path(), ec)) removed.push_back(entry.path().string());
  }
  return removed;
}

Checkpointer::~Checkpointer() {
  if (writer_.joinable()) writer_.join();
}

void Checkpointer::save(int step, const LossScaler& scaler) {
  finish();
  require_room(fmt::format("checkpoint step {}", step));
  const std::string path = (dir_ / fmt::format("step_{:06d}.h5", step)).string();
  CheckpointMeta meta{step,    step,          config_.run.seed, chunks_.front().dp->steps_taken(),
                      layout_, git_revision()};
  meta.loss_scale = scaler.scale();
  meta.loss_scale_clean_steps = scaler.clean_steps();
  meta.loss_scale_hysteresis_left = scaler.hysteresis_left();
  meta.data_identity = data_identity_;
  meta.expert_bias = expert_bias_;
  std::vector<ChunkState> states;
  for (const ModelChunk& ch : chunks_) states.push_back(ch.dp->checkpoint_state());
  const std::vector<ShardBuffers> mine = buffers(states);
  if (!share_) share_ = std::make_unique<CheckpointShare>(config_.model, mine, owner());
  pending_ = std::make_unique<CheckpointWrite>(path, config_, meta, mine, *share_, grid_.world());
  written_ = false;
  write_failure_.clear();
  const auto write = [this, step] {
    const auto start = std::chrono::steady_clock::now();
    try {
      pending_->write_elements([&] { hooks_.checkpoint_midway(step); });
    } catch (const std::exception& e) {
      write_failure_ = e.what();
    }
    write_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    written_ = true;
  };
  if (!config_.run.async_checkpoints) {
    write();
    commit_pending();
    return;
  }
  writer_ = std::thread(write);
}

double Checkpointer::poll() {
  // Every rank knows whether a write is pending (saves are collective), so all reduce or none.
  if (!pending_ || world_.min(written_ ? 1.0 : 0.0) == 0) return 0;
  return commit_pending();
}

double Checkpointer::finish() {
  return pending_ ? commit_pending() : 0;
}

double Checkpointer::commit_pending() {
  if (writer_.joinable()) writer_.join();
  const std::unique_ptr<CheckpointWrite> write = std::move(pending_);
  write->commit(write_failure_);
  last_written_ = write->path();
  if (grid_.rank() == 0)
    rotate_checkpoints(dir_.string(), config_.run.keep_checkpoints, last_written_);
  return world_.max(write_seconds_);
}

int Checkpointer::load(const std::string& path, LossScaler& scaler, const HostCollectives& world,
                       const Console& console) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<ChunkState> states;
  for (const ModelChunk& ch : chunks_) states.push_back(ch.dp->checkpoint_state());
  const CheckpointMeta meta = load_checkpoint(path, buffers(states), owner(), grid_.world());
  const double seconds =
      world.max(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  for (size_t c = 0; c < chunks_.size(); ++c)
    chunks_[c].dp->restore(states[c], static_cast<int>(meta.adam_steps));
  // The MoE selection bias goes on where it was (zeros from a checkpoint without one).
  if (!expert_bias_.empty()) {
    if (meta.expert_bias.size() == expert_bias_.size()) expert_bias_ = meta.expert_bias;
    for (ModelChunk& ch : chunks_) ch.stage->set_expert_bias(expert_bias_);
  }
  const int step = static_cast<int>(meta.data_cursor);
  console.line(fmt::format("resumed from {} at step {} (written with layout {}) in {:.3f} s", path,
                           step, meta.layout, seconds));
  if (scaler.enabled() && read_checkpoint_config(path).precision.compute == Precision::kFp16) {
    scaler.restore(meta.loss_scale, static_cast<int>(meta.loss_scale_clean_steps),
                   static_cast<int>(meta.loss_scale_hysteresis_left));
    console.line(fmt::format("fp16 loss scale restored: {:g}", scaler.scale()));
  }
  return step;
}

void Checkpointer::init_weights(const std::string& path, const HostCollectives& world,
                                const Console& console) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<ChunkState> states;
  for (const ModelChunk& ch : chunks_) states.push_back(ch.dp->checkpoint_state());
  std::vector<ShardBuffers> params = buffers(states);
  for (ShardBuffers& b : params) b.m = b.v = View1();  // the fresh moments stay as they are
  const CheckpointMeta meta = load_checkpoint(path, params, owner(), grid_.world());
  const double seconds =
      world.max(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  for (size_t c = 0; c < chunks_.size(); ++c) chunks_[c].dp->restore(states[c], 0);
  console.line(fmt::format(
      "run.init_from: weights of {} (step {} of its run, written with layout {}) in {:.3f} s; "
      "fresh optimizer, step 0",
      path, meta.step, meta.layout, seconds));
}

void Checkpointer::dump_gradients(const std::string& path, int step,
                                  const std::vector<std::string>& inputs) const {
  std::vector<ShardBuffers> grads;
  for (const ModelChunk& ch : chunks_)
    grads.push_back({&ch.stage->local(), ch.dp->gradients_at_flat_positions(), {}, {}});
  save_checkpoint(path, config_, {step, step, config_.run.seed, 0, layout_, git_revision()}, grads,
                  owner(), grid_.world(), {}, inputs);
}

}  // namespace trident
