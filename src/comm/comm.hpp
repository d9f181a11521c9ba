// The collectives interface one axis of the grid exposes; backends: MPI (always), NCCL (GPU
// builds).
#pragma once

#include <mpi.h>

#include "core/half.hpp"

#include <cstddef>
#include <memory>
#include <string>

namespace trident {

// A pending non-blocking operation. wait() blocks until it completes; destroying an unfinished
// request waits too, so a buffer is never released under a transfer.
class Request {
 public:
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;
  };
  Request() = default;
  explicit Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& o) noexcept {
    wait();
    impl_ = std::move(o.impl_);
    return *this;
  }
  ~Request() { wait(); }
  void wait() {
    if (impl_) impl_->wait();
    impl_.reset();
  }
  // True when complete (and then released); false while in flight.
  bool test() {
    if (impl_ && !impl_->test()) return false;
    impl_.reset();
    return true;
  }

 private:
  std::unique_ptr<Impl> impl_;
};

// Float collectives over one communicator (an axis of the grid, or a combination of axes).
// Buffers live in the execution space's memory; counts are in elements.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual const char* backend() const = 0;

  virtual void allreduce_sum(float* buf, size_t n) = 0;  // in place
  virtual void allreduce_max(float* buf, size_t n) = 0;  // in place
  virtual Request iallreduce_sum(float* buf, size_t n) = 0;
  // recv[recv_count] = this rank's chunk of the sum of every rank's send[size * recv_count].
  virtual void reduce_scatter_sum(const float* send, float* recv, size_t recv_count) = 0;
  // recv[size * send_count] = every rank's send[send_count], in rank order. In place when
  // send == recv + rank * send_count.
  virtual void allgather(const float* send, float* recv, size_t send_count) = 0;
  virtual Request iallgather(const float* send, float* recv, size_t send_count) = 0;
  // The same for 16-bit values (bf16 / fp16 bit patterns, gathered unchanged).
  virtual void allgather_16(const uint16_t* send, uint16_t* recv, size_t send_count) = 0;
  virtual Request iallgather_16(const uint16_t* send, uint16_t* recv, size_t send_count) = 0;
  // Sums of 16-bit values in format p (bf16 or fp16): each partial sum is rounded to the format,
  // as a 16-bit NCCL reduction does. Half the bytes of the fp32 collectives.
  virtual Request iallreduce_sum_16(uint16_t* buf, size_t n, Precision p) = 0;
  virtual void reduce_scatter_sum_16(const uint16_t* send, uint16_t* recv, size_t recv_count,
                                     Precision p) = 0;
  virtual void broadcast(float* buf, size_t n, int root) = 0;
  virtual void send(const float* buf, size_t n, int peer, int tag) = 0;
  virtual void recv(float* buf, size_t n, int peer, int tag) = 0;
  virtual Request isend(const float* buf, size_t n, int peer, int tag) = 0;
  virtual Request irecv(float* buf, size_t n, int peer, int tag) = 0;
  // Double-precision sum for scalars (losses, norms), small counts only.
  virtual void allreduce_sum(double* buf, size_t n) = 0;
};

// MPI backend over a communicator it does not own (the grid owns and frees it).
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm);
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const char* backend() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_; }

  void allreduce_sum(float* buf, size_t n) override;
  void allreduce_max(float* buf, size_t n) override;
  Request iallreduce_sum(float* buf, size_t n) override;
  void reduce_scatter_sum(const float* send, float* recv, size_t recv_count) override;
  void allgather(const float* send, float* recv, size_t send_count) override;
  Request iallgather(const float* send, float* recv, size_t send_count) override;
  void allgather_16(const uint16_t* send, uint16_t* recv, size_t send_count) override;
  Request iallgather_16(const uint16_t* send, uint16_t* recv, size_t send_count) override;
  Request iallreduce_sum_16(uint16_t* buf, size_t n, Precision p) override;
  void reduce_scatter_sum_16(const uint16_t* send, uint16_t* recv, size_t recv_count,
                             Precision p) override;
  void broadcast(float* buf, size_t n, int root) override;
  void send(const float* buf, size_t n, int peer, int tag) override;
  void recv(float* buf, size_t n, int peer, int tag) override;
  Request isend(const float* buf, size_t n, int peer, int tag) override;
  Request irecv(float* buf, size_t n, int peer, int tag) override;
  void allreduce_sum(double* buf, size_t n) override;

 private:
  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
};

}  // namespace trident
