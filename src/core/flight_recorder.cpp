// The flight recorder's ring, its dumps (JSON lines, written with write(2) so that a fatal-signal
// handler can write one too) and its signal handlers.
#include "core/flight_recorder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

namespace trident {

namespace {

std::atomic<bool> g_dump_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler sets it");

extern "C" void request_flight_dump(int) {
  g_dump_requested.store(true);
}

extern "C" void dump_flight_on_fatal_signal(int signal) {
  FlightRecorder::instance().dump_from_signal(signal);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

// Appends formatted text to a file descriptor through a fixed buffer: no allocation.
class DumpWriter {
 public:
  explicit DumpWriter(int fd) : fd_(fd) {}
  ~DumpWriter() { flush(); }
  template <class... Args>
  void put(const char* format, Args... args) {
    if (used_ + kLine > sizeof buffer_) flush();
    const int n = std::snprintf(buffer_ + used_, sizeof buffer_ - used_, format, args...);
    if (n > 0) used_ += std::min<size_t>(static_cast<size_t>(n), sizeof buffer_ - used_ - 1);
  }
  bool ok() const { return ok_; }

 private:
  void flush() {
    for (size_t done = 0; done < used_;) {
      const ssize_t n = write(fd_, buffer_ + done, used_ - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok_ = false;
        break;
      }
      done += static_cast<size_t>(n);
    }
    used_ = 0;
  }
  static constexpr size_t kLine = 512;  // the longest line put() writes
  int fd_;
  char buffer_[8192];
  size_t used_ = 0;
  bool ok_ = true;
};

const char* phase_name(int phase) {
  return phase >= 0 && phase < kPhases ? kPhaseNames[phase] : "";
}

}  // namespace

FlightRecorder& FlightRecorder::instance() {
  static FlightRecorder recorder;
  return recorder;
}

int FlightRecorder::add_communicator(const std::string& axis, std::vector<int> world_members) {
  const std::lock_guard<std::mutex> lock(mutex_);
  comms_.push_back({axis, std::move(world_members)});
  collective_seq_.push_back(0);
  return static_cast<int>(comms_.size()) - 1;
}

void FlightRecorder::start(size_t capacity, int world_rank, const std::string& host,
                           const std::string& dump_path, const PhaseTimer* timer,
                           const std::atomic<int>* step) {
  const std::lock_guard<std::mutex> lock(mutex_);
  ring_.assign(capacity, FlightEntry{});
  capacity_ = capacity;
  issued_ = 0;
  rank_ = world_rank;
  host_ = host;
  dump_path_ = dump_path;
  temp_path_ = dump_path + ".tmp";
  dump_dir_ = dump_path.substr(0, dump_path.rfind('/') + 1);
  // A dump describes a process that is gone; a restart (which reads it first) starts afresh.
  unlink(dump_path_.c_str());
  timer_ = timer;
  step_ = step;
  start_ = PhaseTimer::Clock::now();
  if (capacity == 0) return;
  // A dump on request, and on a crash, unless something else handles those signals already
  // (run.stop_signals may take SIGUSR2).
  struct sigaction current;
  if (sigaction(SIGUSR2, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    std::signal(SIGUSR2, request_flight_dump);
  for (const int fatal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    if (sigaction(fatal, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
      std::signal(fatal, dump_flight_on_fatal_signal);
}

void FlightRecorder::stop() {
  const std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = 0;
  ring_.clear();
  timer_ = nullptr;
  step_ = nullptr;
}

int64_t FlightRecorder::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(PhaseTimer::Clock::now() - start_)
      .count();
}

void FlightRecorder::hang_before(const std::string& axis, const std::string& op, int step) {
  hang_ = {axis, op, step};
}

void FlightRecorder::maybe_hang(int comm, const char* op) {
  if (hang_.step == 0 || !step_ || step_->load() != hang_.step) return;
  if (comms_[comm].axis != hang_.axis || std::strstr(op, hang_.op.c_str()) == nullptr) return;
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the watchdog ends the job
}

uint64_t FlightRecorder::issue(int comm, const char* op, uint64_t bytes, int peer) {
  if (capacity_ == 0 || comm < 0) return 0;
  maybe_hang(comm, op);
  const std::lock_guard<std::mutex> lock(mutex_);
  if (capacity_ == 0) return 0;
  FlightEntry& e = ring_[issued_ % capacity_];
  e = FlightEntry{};
  e.id = ++issued_;
  e.comm = comm;
  e.seq = peer < 0 ? ++collective_seq_[comm]
                   : ++p2p_seq_[{comm, peer, std::strstr(op, "send") != nullptr}];
  e.op = op;
  e.bytes = bytes;
  e.peer = peer;
  e.step = step_ ? step_->load(std::memory_order_relaxed) : 0;
  e.phase = timer_ ? timer_->current_phase() : -1;
  e.issued_us = now_us();
  return e.id;
}

void FlightRecorder::complete(uint64_t ticket) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (capacity_ == 0 || issued_ - ticket >= capacity_) return;  // overwritten since
  FlightEntry& e = ring_[(ticket - 1) % capacity_];
  if (e.id == ticket) e.completed_us = now_us();
}

bool FlightRecorder::dump_requested() {
  return g_dump_requested.exchange(false);
}

bool FlightRecorder::dump(const char* reason) {
  const std::lock_guard<std::mutex> lock(mutex_);
  return write_dump(reason);
}

void FlightRecorder::dump_from_signal(int signal) {
  char reason[32];
  std::snprintf(reason, sizeof reason, "signal %d", signal);
  write_dump(reason);  // reads the ring as it is: a torn last entry is acceptable there
}

// The header line (rank, host, why, where the rank is, the communicators), then one line per
// entry, oldest first. Written to a temporary created afresh (never through a planted link) and
// renamed over the dump path.
bool FlightRecorder::write_dump(const char* reason) {
  if (capacity_ == 0 || dump_path_.empty()) return false;
  mkdir(dump_dir_.c_str(), 0755);  // made at the first dump: a healthy run writes nothing
  unlink(temp_path_.c_str());
  const int fd =
      open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = true;
  {
    DumpWriter out(fd);
    out.put(
        "{\"flight_record\": 1, \"rank\": %d, \"host\": \"%s\", \"reason\": \"%s\", \"step\": %d, "
        "\"phase\": \"%s\", \"now_us\": %lld, \"capacity\": %zu, \"issued\": %llu, \"comms\": [",
        rank_, host_.c_str(), reason, step_ ? step_->load() : 0,
        phase_name(timer_ ? timer_->current_phase() : -1), static_cast<long long>(now_us()),
        capacity_, static_cast<unsigned long long>(issued_));
    for (size_t c = 0; c < comms_.size(); ++c) {
      out.put("%s{\"axis\": \"%s\", \"members\": [", c ? ", " : "", comms_[c].axis.c_str());
      for (size_t m = 0; m < comms_[c].members.size(); ++m)
        out.put("%s%d", m ? ", " : "", comms_[c].members[m]);
      out.put("]}");
    }
    out.put("]}\n");
    const uint64_t first = issued_ > capacity_ ? issued_ - capacity_ + 1 : 1;
    for (uint64_t id = first; id <= issued_; ++id) {
      const FlightEntry& e = ring_[(id - 1) % capacity_];
      out.put(
          "{\"id\": %llu, \"comm\": %d, \"seq\": %lld, \"op\": \"%s\", \"bytes\": %llu, "
          "\"peer\": %d, \"step\": %d, \"phase\": \"%s\", \"issued_us\": %lld, "
          "\"completed_us\": %lld}\n",
          static_cast<unsigned long long>(e.id), e.comm, static_cast<long long>(e.seq), e.op,
          static_cast<unsigned long long>(e.bytes), e.peer, e.step, phase_name(e.phase),
          static_cast<long long>(e.issued_us), static_cast<long long>(e.completed_us));
    }
    ok = out.ok();
  }
  ok = fsync(fd) == 0 && ok;
  ok = close(fd) == 0 && ok;
  return ok && rename(temp_path_.c_str(), dump_path_.c_str()) == 0;
}

}  // namespace trident
