// Ownership of a run's files: a lock file naming its holder (host, pid, Slurm job), taken with
// O_EXCL so that it works where flock does not (Lustre and GPFS mounted without it), kept fresh
// by a heartbeat and taken over only when its holder is provably gone.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace trident {

// A lock not refreshed for this long belongs to a run that died with its node.
constexpr double kRunLockStaleSeconds = 600;

class RunLock {
 public:
  // Takes `path` for this process. Throws InputError naming the holder when another live run
  // holds it; `what` says what is locked ("run directory runs/x"). A lock whose holder is gone
  // (on this host with its pid gone, an earlier incarnation of this requeued Slurm job, or not
  // refreshed for kRunLockStaleSeconds) is taken over and `note` told why.
  RunLock(std::string path, const std::string& what,
          const std::function<void(const std::string&)>& note);
  // Stops the heartbeat and removes the lock file.
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  void heartbeat();
  std::string path_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace trident
