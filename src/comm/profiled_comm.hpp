// A communicator that labels each of its calls for the step profiler (core/launch_profiler.hpp):
// "<backend> <operation> <axis>", with the bytes it moves, timed as one launch.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.hpp"
#include "core/launch_profiler.hpp"

namespace trident {

// Forwards every call to `inner`. While a step is profiled, each call is timed from its start to
// its return on Kokkos' stream (an MPI call and its host staging whole; an NCCL call as the
// compute stream waits for it); non-blocking calls are timed to their issue, their wait falls in
// the phase that waits. Nothing else costs more than a flag test.
class ProfiledCommunicator final : public Communicator {
 public:
  ProfiledCommunicator(std::unique_ptr<Communicator> inner, std::string axis)
      : inner_(std::move(inner)), axis_(std::move(axis)) {}
  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }
  const char* backend() const override { return inner_->backend(); }

  void allreduce_sum(CommBuffer buf) override {
    ProfiledCall call;
    open(call, "allreduce_sum", buf);
    inner_->allreduce_sum(buf);
  }
  void allreduce_max(CommBuffer buf) override {
    ProfiledCall call;
    open(call, "allreduce_max", buf);
    inner_->allreduce_max(buf);
  }
  Request iallreduce_sum(CommBuffer buf) override {
    ProfiledCall call;
    open(call, "iallreduce_sum", buf);
    return inner_->iallreduce_sum(buf);
  }
  void reduce_scatter_sum(CommBuffer send, CommBuffer recv) override {
    ProfiledCall call;
    open(call, "reduce_scatter_sum", send);
    inner_->reduce_scatter_sum(send, recv);
  }
  void reduce_scatter_sum(CommBuffer send, CommBuffer recv,
                          const std::vector<size_t>& counts) override {
    ProfiledCall call;
    open(call, "reduce_scatter_sum", send);
    inner_->reduce_scatter_sum(send, recv, counts);
  }
  void allgather(CommBuffer send, CommBuffer recv) override {
    ProfiledCall call;
    open(call, "allgather", recv);
    inner_->allgather(send, recv);
  }
  Request iallgather(CommBuffer send, CommBuffer recv) override {
    ProfiledCall call;
    open(call, "iallgather", recv);
    return inner_->iallgather(send, recv);
  }
  void broadcast(CommBuffer buf, int root) override {
    ProfiledCall call;
    open(call, "broadcast", buf);
    inner_->broadcast(buf, root);
  }
  void alltoallv(CommBuffer send, const std::vector<size_t>& send_counts, CommBuffer recv,
                 const std::vector<size_t>& recv_counts) override {
    size_t sent = 0;
    for (size_t c : send_counts) sent += c;
    ProfiledCall call;
    open(call, "alltoallv", send.window(0, sent));
    inner_->alltoallv(send, send_counts, recv, recv_counts);
  }
  void send(CommBuffer buf, int peer, int tag) override {
    ProfiledCall call;
    open(call, "send", buf);
    inner_->send(buf, peer, tag);
  }
  void recv(CommBuffer buf, int peer, int tag) override {
    ProfiledCall call;
    open(call, "recv", buf);
    inner_->recv(buf, peer, tag);
  }
  Request isend(CommBuffer buf, int peer, int tag) override {
    ProfiledCall call;
    open(call, "isend", buf);
    return inner_->isend(buf, peer, tag);
  }
  Request irecv(CommBuffer buf, int peer, int tag) override {
    ProfiledCall call;
    open(call, "irecv", buf);
    return inner_->irecv(buf, peer, tag);
  }

 private:
  // Opens `call` labelled "<backend> <operation> <axis>" with `buffer`'s bytes (the whole buffer:
  // an all-gather's result, a reduce-scatter's input) when a profiler listens.
  void open(ProfiledCall& call, const char* operation, const CommBuffer& buffer) const {
    if (LaunchProfiler::listening())
      call.open(std::string(inner_->backend()) + " " + operation + " " + axis_, 0,
                static_cast<double>(buffer.count() * bytes_of(buffer.format())));
  }

  std::unique_ptr<Communicator> inner_;
  std::string axis_;
};

}  // namespace trident
