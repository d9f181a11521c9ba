// The run lock: holder records, staleness rules and the heartbeat thread.
#include "core/run_lock.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/paths.hpp"

namespace trident {
namespace {

constexpr auto kHeartbeatPeriod = std::chrono::seconds(30);

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

struct ProcessState {
  bool exists = false, zombie = false;
  std::string comm;  // the executable's name, as the kernel keeps it (15 bytes at most)
};

// From /proc/<pid>/stat ("pid (comm) state ..."; comm may hold spaces and parentheses). A killed
// process stays a zombie until its parent (mpirun's daemon) reaps it: that holder is gone too.
ProcessState process_state(pid_t pid) {
  ProcessState state;
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) {
    state.exists = kill(pid, 0) == 0 || errno != ESRCH;  // no /proc: the signal check alone
    return state;
  }
  const size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= line.size())
    return {true, false, ""};
  state.exists = true;
  state.comm = line.substr(open + 1, close - open - 1);
  for (char& c : state.comm)
    if (c == ' ' || c == '=') c = '_';  // one word in the lock's "key=value" record
  state.zombie = line[close + 2] == 'Z';
  return state;
}

// "host=h pid=p comm=c slurm_job=j slurm_restart=r started=t": who holds a lock.
using Holder = std::map<std::string, std::string>;

Holder this_process() {
  const std::time_t t = std::time(nullptr);
  char started[64];
  std::strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return {{"host", host_name()},
          {"pid", std::to_string(getpid())},
          {"comm", process_state(getpid()).comm},
          {"slurm_job", env_or_empty("SLURM_JOB_ID")},
          {"slurm_restart", env_or_empty("SLURM_RESTART_COUNT")},
          {"started", started}};
}

Holder read_holder(const std::string& path) {
  Holder holder;
  std::ifstream in(path);
  std::string word;
  while (in >> word)
    if (const size_t eq = word.find('='); eq != std::string::npos)
      holder[word.substr(0, eq)] = word.substr(eq + 1);
  return holder;
}

std::string describe(const Holder& h) {
  std::string out = fmt::format("pid {} on host {}", h.count("pid") ? h.at("pid") : "?",
                                h.count("host") ? h.at("host") : "?");
  if (h.count("slurm_job") && !h.at("slurm_job").empty())
    out += fmt::format(", Slurm job {}", h.at("slurm_job"));
  if (h.count("started")) out += fmt::format(", started {}", h.at("started"));
  return out;
}

// Why the holder is certainly gone, or empty while it may still run.
std::string why_stale(const Holder& holder, double seconds_since_refresh) {
  const Holder me = this_process();
  const auto field = [&](const char* key) {
    return holder.count(key) ? holder.at(key) : std::string();
  };
  if (field("host") == me.at("host") && !field("pid").empty()) {
    const long pid = std::strtol(field("pid").c_str(), nullptr, 10);
    if (pid <= 0) return "";
    const ProcessState state = process_state(static_cast<pid_t>(pid));
    if (!state.exists || state.zombie) return "its process is gone";
    if (!field("comm").empty() && !state.comm.empty() && state.comm != field("comm"))
      return fmt::format("its pid now belongs to '{}'", state.comm);
    return "";  // alive here: the pid check is certain, whatever the heartbeat says
  }
  if (!field("slurm_job").empty() && field("slurm_job") == me.at("slurm_job") &&
      field("slurm_restart") != me.at("slurm_restart"))
    return "it is an earlier run of this requeued Slurm job";
  if (seconds_since_refresh > kRunLockStaleSeconds)
    return fmt::format("it was last refreshed {:.0f} s ago", seconds_since_refresh);
  return "";
}

// Creates `path` holding this process's record; false when it exists.
bool create_exclusive(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return false;
    throw InputError(
        fmt::format("cannot create the lock file '{}': {}", path, explain_errno(errno)));
  }
  std::string record;
  for (const auto& [key, value] : this_process()) record += key + "=" + value + " ";
  record.back() = '\n';
  const bool written =
      write(fd, record.data(), record.size()) == static_cast<ssize_t>(record.size());
  const int saved = errno;
  close(fd);
  if (!written) {
    unlink(path.c_str());
    throw InputError(
        fmt::format("cannot write the lock file '{}': {}", path, explain_errno(saved)));
  }
  return true;
}

}  // namespace

RunLock::RunLock(std::string path, const std::string& what,
                 const std::function<void(const std::string&)>& note)
    : path_(std::move(path)) {
  for (int attempt = 0;; ++attempt) {
    if (create_exclusive(path_)) break;
    // lstat, not stat: O_EXCL refuses a symbolic link even when it dangles, so following one
    // would find nothing there and retry for ever.
    struct stat st {};
    if (lstat(path_.c_str(), &st) != 0) {
      if (errno == ENOENT && attempt < 100) continue;  // released meanwhile: try again
      throw InputError(
          fmt::format("cannot inspect the lock file '{}': {}", path_, explain_errno(errno)));
    }
    if (!S_ISREG(st.st_mode))
      throw InputError(fmt::format(
          "the lock file '{}' of {} is {}, not a lock trident wrote: remove it if no run uses {}",
          path_, what,
          S_ISLNK(st.st_mode)   ? "a symbolic link"
          : S_ISDIR(st.st_mode) ? "a directory"
                                : "not a regular file",
          what));
    const Holder holder = read_holder(path_);
    const double age = std::difftime(std::time(nullptr), st.st_mtime);
    const std::string stale = why_stale(holder, age);
    if (stale.empty() || attempt > 2)
      throw InputError(fmt::format(
          "{} is in use by another run ({}; lock file {}, refreshed {:.0f} s ago): wait for it to "
          "end or choose another run.name; if that run is dead, remove the lock file",
          what, describe(holder), path_, age));
    note(fmt::format("taking over the lock of {} from {}: {}", what, describe(holder), stale));
    // Only the stale file itself: a racing taker may already have replaced it with its own.
    struct stat now {};
    if (lstat(path_.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_mtime == st.st_mtime)
      unlink(path_.c_str());
  }
  thread_ = std::thread([this] { heartbeat(); });
}

RunLock::~RunLock() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  unlink(path_.c_str());
}

void RunLock::heartbeat() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, kHeartbeatPeriod, [this] { return stopping_; }))
    utimensat(AT_FDCWD, path_.c_str(), nullptr, 0);  // mtime = now: the holder is alive
}

}  // namespace trident
