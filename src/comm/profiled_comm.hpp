// A communicator that labels each of its calls for the step profiler (core/launch_profiler.hpp):
// "<backend> <operation> <axis>", with the bytes it moves, timed as one launch; and records each
// in the flight recorder (core/flight_recorder.hpp).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.hpp"
#include "core/flight_recorder.hpp"
#include "core/launch_profiler.hpp"

namespace trident {

// Forwards every call to `inner`. While a step is profiled, each call is timed from its start to
// its return on Kokkos' stream (an MPI call and its host staging whole; an NCCL call as the
// compute stream waits for it); non-blocking calls are timed to their issue, their wait falls in
// the phase that waits. The flight recorder sees each call issued, and completed when it returns
// or, non-blocking, when its request is waited on or tested done (an NCCL call returns once it is
// queued on the stream). With neither listening a call costs two flag tests.
class ProfiledCommunicator final : public Communicator {
 public:
  // `recorded`: the communicator's index in the flight recorder (FlightRecorder::add_communicator).
  ProfiledCommunicator(std::unique_ptr<Communicator> inner, std::string axis, int recorded)
      : inner_(std::move(inner)), axis_(std::move(axis)), recorded_(recorded) {}
  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }
  const char* backend() const override { return inner_->backend(); }

  void allreduce_sum(CommBuffer buf) override {
    ProfiledCall call;
    open(call, "allreduce_sum", buf);
    const RecordedCall done(record("allreduce_sum", buf));
    inner_->allreduce_sum(buf);
  }
  void allreduce_max(CommBuffer buf) override {
    ProfiledCall call;
    open(call, "allreduce_max", buf);
    const RecordedCall done(record("allreduce_max", buf));
    inner_->allreduce_max(buf);
  }
  Request iallreduce_sum(CommBuffer buf) override {
    ProfiledCall call;
    open(call, "iallreduce_sum", buf);
    const uint64_t ticket = record("iallreduce_sum", buf);
    return completes_on_wait(ticket, inner_->iallreduce_sum(buf));
  }
  void reduce_scatter_sum(CommBuffer send, CommBuffer recv) override {
    ProfiledCall call;
    open(call, "reduce_scatter_sum", send);
    const RecordedCall done(record("reduce_scatter_sum", send));
    inner_->reduce_scatter_sum(send, recv);
  }
  void reduce_scatter_sum(CommBuffer send, CommBuffer recv,
                          const std::vector<size_t>& counts) override {
    ProfiledCall call;
    open(call, "reduce_scatter_sum", send);
    const RecordedCall done(record("reduce_scatter_sum", send));
    inner_->reduce_scatter_sum(send, recv, counts);
  }
  void allgather(CommBuffer send, CommBuffer recv) override {
    ProfiledCall call;
    open(call, "allgather", recv);
    const RecordedCall done(record("allgather", recv));
    inner_->allgather(send, recv);
  }
  Request iallgather(CommBuffer send, CommBuffer recv) override {
    ProfiledCall call;
    open(call, "iallgather", recv);
    const uint64_t ticket = record("iallgather", recv);
    return completes_on_wait(ticket, inner_->iallgather(send, recv));
  }
  void broadcast(CommBuffer buf, int root) override {
    ProfiledCall call;
    open(call, "broadcast", buf);
    const RecordedCall done(record("broadcast", buf));
    inner_->broadcast(buf, root);
  }
  void alltoallv(CommBuffer send, const std::vector<size_t>& send_counts, CommBuffer recv,
                 const std::vector<size_t>& recv_counts) override {
    size_t sent = 0;
    for (size_t c : send_counts) sent += c;
    ProfiledCall call;
    open(call, "alltoallv", send.window(0, sent));
    const RecordedCall done(record("alltoallv", send.window(0, sent)));
    inner_->alltoallv(send, send_counts, recv, recv_counts);
  }
  void send(CommBuffer buf, int peer, int tag) override {
    ProfiledCall call;
    open(call, "send", buf);
    const RecordedCall done(record("send", buf, peer));
    inner_->send(buf, peer, tag);
  }
  void recv(CommBuffer buf, int peer, int tag) override {
    ProfiledCall call;
    open(call, "recv", buf);
    const RecordedCall done(record("recv", buf, peer));
    inner_->recv(buf, peer, tag);
  }
  Request isend(CommBuffer buf, int peer, int tag) override {
    ProfiledCall call;
    open(call, "isend", buf);
    const uint64_t ticket = record("isend", buf, peer);
    return completes_on_wait(ticket, inner_->isend(buf, peer, tag));
  }
  Request irecv(CommBuffer buf, int peer, int tag) override {
    ProfiledCall call;
    open(call, "irecv", buf);
    const uint64_t ticket = record("irecv", buf, peer);
    return completes_on_wait(ticket, inner_->irecv(buf, peer, tag));
  }

 private:
  // Opens `call` labelled "<backend> <operation> <axis>" with `buffer`'s bytes (the whole buffer:
  // an all-gather's result, a reduce-scatter's input) when a profiler listens.
  void open(ProfiledCall& call, const char* operation, const CommBuffer& buffer) const {
    if (LaunchProfiler::listening())
      call.open(std::string(inner_->backend()) + " " + operation + " " + axis_, 0,
                static_cast<double>(buffer.count() * bytes_of(buffer.format())));
  }

  // Records `operation` as issued in the flight recorder; the ticket completes it.
  uint64_t record(const char* operation, const CommBuffer& buffer, int peer = -1) const {
    return FlightRecorder::instance().issue(recorded_, operation,
                                            buffer.count() * bytes_of(buffer.format()), peer);
  }
  // A request that completes `ticket` when it is waited on or tested done.
  class RecordedRequest final : public Request::Impl {
   public:
    RecordedRequest(uint64_t ticket, Request inner) : ticket_(ticket), inner_(std::move(inner)) {}
    void wait() override {
      inner_.wait();
      finish();
    }
    bool test() override {
      if (!inner_.test()) return false;
      finish();
      return true;
    }

   private:
    void finish() {
      if (ticket_ != 0) FlightRecorder::instance().complete(ticket_);
      ticket_ = 0;
    }
    uint64_t ticket_;
    Request inner_;
  };
  static Request completes_on_wait(uint64_t ticket, Request inner) {
    if (ticket == 0) return inner;
    return Request(std::make_unique<RecordedRequest>(ticket, std::move(inner)));
  }

  std::unique_ptr<Communicator> inner_;
  std::string axis_;
  int recorded_;
};

}  // namespace trident
