// The collectives interface one axis of the grid exposes; backends: MPI (always), NCCL (GPU
// builds).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/half.hpp"
#include "core/stored.hpp"
#include "core/types.hpp"

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

// A buffer a collective reads or writes: a window of a View in the execution space's memory and
// the format of its elements (fp32, or bf16 / fp16 bit patterns). Built only from Views, whose
// memory space is part of their type, so a host buffer given to a device build's collectives is
// a compile error, not a crash in NCCL. One path for every format: 16-bit data is not a twin
// of each call but a format the backends map to their own types.
class CommBuffer {
  // Views of E (float or uint16_t, const or not) in the execution space's memory.
  template <class V, class E, class = void>
  struct IsViewOf : std::false_type {};
  template <class V, class E>
  struct IsViewOf<V, E, std::void_t<typename V::memory_space, typename V::value_type>>
      : std::bool_constant<
            Kokkos::is_view<V>::value && std::is_same_v<typename V::memory_space, MemSpace> &&
            std::is_same_v<std::remove_const_t<typename V::value_type>, E> && V::rank == 1> {};
  template <class V, class E>
  static constexpr bool kViewOf = IsViewOf<V, E>::value;

 public:
  // fp32 values.
  template <class V, std::enable_if_t<kViewOf<V, float>, int> = 0>
  CommBuffer(const V& v)  // NOLINT(google-explicit-constructor): a View is a buffer
      : data_(const_cast<float*>(v.data())), count_(v.extent(0)) {}
  // bf16 or fp16 bit patterns; `format` says which (sums round to it).
  template <class V, std::enable_if_t<kViewOf<V, uint16_t>, int> = 0>
  CommBuffer(const V& v, Precision format)
      : data_(const_cast<uint16_t*>(v.data())), count_(v.extent(0)), format_(format) {
    if (format == Precision::kFp32)
      throw std::logic_error("CommBuffer: 16-bit elements need format bf16 or fp16");
  }
  // A stored tensor, in its own format.
  explicit CommBuffer(const StoredTensor& t)
      : data_(t.format == Precision::kFp32 ? static_cast<void*>(t.f32.data())
                                           : static_cast<void*>(t.f16.data())),
        count_(t.size()),
        format_(t.format) {}
  void* data() const { return data_; }
  size_t count() const { return count_; }
  Precision format() const { return format_; }
  // Elements [offset, offset + n) of this buffer.
  CommBuffer window(size_t offset, size_t n) const {
    CommBuffer w = *this;
    w.data_ = static_cast<char*>(data_) + offset * bytes_of(format_);
    w.count_ = n;
    return w;
  }

 private:
  void* data_ = nullptr;
  size_t count_ = 0;
  Precision format_ = Precision::kFp32;
};

// Collectives over one communicator (an axis of the grid, or a combination of axes). Sums of
// 16-bit buffers round each partial sum to the format, as a 16-bit NCCL reduction does. Counts
// are the buffers' own: an all-gather's recv holds size() x send, a reduce-scatter's send
// size() x recv.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual const char* backend() const = 0;

  virtual void allreduce_sum(CommBuffer buf) = 0;  // in place
  virtual void allreduce_max(CommBuffer buf) = 0;  // in place; fp32 only
  virtual Request iallreduce_sum(CommBuffer buf) = 0;
  // recv = this rank's part of the sum of every rank's send.
  virtual void reduce_scatter_sum(CommBuffer send, CommBuffer recv) = 0;
  // Uneven parts: send holds `counts[r]` elements for each rank r in rank order (a count may be
  // 0), and recv this rank's counts[rank()] elements of their sum.
  virtual void reduce_scatter_sum(CommBuffer send, CommBuffer recv,
                                  const std::vector<size_t>& counts) = 0;
  // recv = every rank's send, in rank order. In place when send is this rank's part of recv.
  virtual void allgather(CommBuffer send, CommBuffer recv) = 0;
  virtual Request iallgather(CommBuffer send, CommBuffer recv) = 0;
  virtual void broadcast(CommBuffer buf, int root) = 0;
  // Personalised exchange: send holds send_counts[r] elements for each rank r in rank order, and
  // recv receives recv_counts[r] elements from each rank r in rank order (counts may be 0; this
  // rank's own part is copied). Every rank's send_counts[q] equals rank q's recv_counts[it].
  virtual void alltoallv(CommBuffer send, const std::vector<size_t>& send_counts, CommBuffer recv,
                         const std::vector<size_t>& recv_counts) = 0;
  virtual void send(CommBuffer buf, int peer, int tag) = 0;
  virtual void recv(CommBuffer buf, int peer, int tag) = 0;
  virtual Request isend(CommBuffer buf, int peer, int tag) = 0;
  virtual Request irecv(CommBuffer buf, int peer, int tag) = 0;
};

// How MPI reaches a collective's buffers.
enum class MpiBufferAccess {
  kDirect,  // MPI reads and writes them: host memory, or device memory with a CUDA-aware MPI
  kStaged,  // each call copies them through pinned host memory and back
};

// The access this build and this MPI need: kDirect where the execution space's memory is host
// memory; on GPU builds kDirect when the MPI says at run time that it is CUDA-aware
// (MPIX_Query_cuda_support), else kStaged. TRIDENT_MPI_CUDA_AWARE=1 or 0 overrides the MPI's
// answer (for an MPI that is CUDA-aware but cannot say so).
MpiBufferAccess mpi_buffer_access();

class StagingPool;

// MPI backend over a communicator it does not own (the grid owns and frees it).
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, MpiBufferAccess access = mpi_buffer_access());
  ~MpiCommunicator() override;
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  // "mpi", or "mpi (host-staged)" when every buffer goes through pinned host memory.
  const char* backend() const override;

  void allreduce_sum(CommBuffer buf) override;
  void allreduce_max(CommBuffer buf) override;
  Request iallreduce_sum(CommBuffer buf) override;
  void reduce_scatter_sum(CommBuffer send, CommBuffer recv) override;
  void reduce_scatter_sum(CommBuffer send, CommBuffer recv,
                          const std::vector<size_t>& counts) override;
  void allgather(CommBuffer send, CommBuffer recv) override;
  Request iallgather(CommBuffer send, CommBuffer recv) override;
  void broadcast(CommBuffer buf, int root) override;
  void alltoallv(CommBuffer send, const std::vector<size_t>& send_counts, CommBuffer recv,
                 const std::vector<size_t>& recv_counts) override;
  void send(CommBuffer buf, int peer, int tag) override;
  void recv(CommBuffer buf, int peer, int tag) override;
  Request isend(CommBuffer buf, int peer, int tag) override;
  Request irecv(CommBuffer buf, int peer, int tag) override;

 private:
  // The pool a call copies its buffers through, or null: every call's when access is staged; in a
  // GPU build also a 16-bit sum's, whose MPI_Op adds on the host.
  StagingPool* staging_for(const CommBuffer& buffer, bool sums) const;

  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
  MpiBufferAccess access_;
  std::unique_ptr<StagingPool> staging_;
};

}  // namespace trident
