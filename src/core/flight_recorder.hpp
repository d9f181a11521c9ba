// The collective flight recorder: every rank's last N communication operations, written to the
// run directory when the watchdog fires, on a fatal signal or on SIGUSR2, for `trident doctor`.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/timer.hpp"

namespace trident {

// One operation: issued, then completed (a blocking call when it returns, a non-blocking one when
// its request is waited on or tested done). Collectives are numbered per communicator, in the
// order every member issues them; point-to-point operations per (communicator, peer, direction).
struct FlightEntry {
  uint64_t id = 0;  // this rank's issue count, 1-based
  int comm = -1;    // index of the communicator (FlightRecorder::add_communicator)
  int64_t seq = 0;
  const char* op = "";  // a string literal
  uint64_t bytes = 0;
  int peer = -1;  // rank in the communicator of a point-to-point operation's peer; -1: collective
  int step = 0;
  int phase = -1;                            // Phase, -1 between phases
  int64_t issued_us = 0, completed_us = -1;  // since the recorder started; -1: in flight
};

// A process's recorder (one per rank). Off (capacity 0) until start(); while off an operation
// costs one branch.
class FlightRecorder {
 public:
  static constexpr size_t kDefaultCapacity = 2048;
  static FlightRecorder& instance();

  // Names a communicator: its axis ("tp", "dp", ...) and its members' world ranks in its own rank
  // order. Returns its index for issue().
  int add_communicator(const std::string& axis, std::vector<int> world_members);

  // Records from now on into a ring of `capacity` entries (0: off), read the step from `step`
  // and the phase from `timer`, and writes dumps to `dump_path` (its directory is made at the
  // first dump; an earlier dump there is removed now).
  // Installs the SIGUSR2 request and the fatal-signal dumps (where no handler is installed).
  void start(size_t capacity, int world_rank, const std::string& host, const std::string& dump_path,
             const PhaseTimer* timer, const std::atomic<int>* step);
  // Stops recording (the timer and step it reads are about to go).
  void stop();
  size_t capacity() const { return capacity_; }

  // Records an operation as issued; returns the ticket complete() takes (0 while off).
  uint64_t issue(int comm, const char* op, uint64_t bytes, int peer = -1);
  void complete(uint64_t ticket);

  // Writes the ring, oldest first, to the dump path (replacing an earlier dump), with why; false
  // when it could not. Safe from the watchdog's thread.
  bool dump(const char* reason);
  // Whether SIGUSR2 asked for a dump since the last call.
  bool dump_requested();

  // Test seam (--inject-fault hang-comm): this rank stops for good before issuing, in `step`,
  // the first operation on `axis` whose name contains `op` ("" matches any).
  void hang_before(const std::string& axis, const std::string& op, int step);

  // For the fatal-signal handler: the dump without locks or allocation.
  void dump_from_signal(int signal);

 private:
  FlightRecorder() = default;
  void maybe_hang(int comm, const char* op);
  bool write_dump(const char* reason);
  int64_t now_us() const;

  struct Communicator {
    std::string axis;
    std::vector<int> members;
  };
  std::mutex mutex_;
  std::vector<Communicator> comms_;
  std::vector<int64_t> collective_seq_;                    // per communicator
  std::map<std::tuple<int, int, bool>, int64_t> p2p_seq_;  // (comm, peer, sends)
  std::vector<FlightEntry> ring_;
  size_t capacity_ = 0;
  uint64_t issued_ = 0;
  int rank_ = 0;
  std::string host_, dump_path_, temp_path_, dump_dir_;
  const PhaseTimer* timer_ = nullptr;
  const std::atomic<int>* step_ = nullptr;
  PhaseTimer::Clock::time_point start_;
  struct Hang {
    std::string axis, op;
    int step = 0;
  } hang_;
};

// Marks a blocking operation complete when it returns (or throws).
class RecordedCall {
 public:
  explicit RecordedCall(uint64_t ticket) : ticket_(ticket) {}
  ~RecordedCall() {
    if (ticket_ != 0) FlightRecorder::instance().complete(ticket_);
  }
  RecordedCall(const RecordedCall&) = delete;
  RecordedCall& operator=(const RecordedCall&) = delete;

 private:
  uint64_t ticket_;
};

}  // namespace trident
