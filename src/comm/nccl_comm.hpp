// NCCL backend of the collectives interface: one NCCL communicator and CUDA stream per grid axis.
#pragma once

#ifndef TRIDENT_HAVE_NCCL
#error "comm/nccl_comm.hpp needs a build with the NCCL backend (TRIDENT_HAVE_NCCL)"
#endif

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "comm/comm.hpp"

namespace trident {

// Every buffer must be device memory (a CUDA build of Kokkos); make_communicator() enforces it.
// Collectives run on the communicator's own stream, ordered against Kokkos' stream by events, with
// no fence: each call first makes its stream wait for the kernels Kokkos launched before it (the
// inputs are written). A blocking call then makes Kokkos' stream wait for the collective, so the
// kernels launched after it read its outputs, and so does anything that copies them to the host
// (a Kokkos deep_copy fences Kokkos' stream); the host does not wait. A non-blocking call returns
// a Request whose wait() blocks the host until the collective is done.
//
// NCCL has no tags: send/recv between two ranks match in issue order, and a send or receive
// blocks the GPU until its peer posts the matching call. Two neighbours that both isend before
// they recv therefore deadlock, which is why "auto" keeps the pipeline axis on MPI.
class NcclCommunicator final : public Communicator {
 public:
  // Collective over `comm` (not owned): rank 0 creates the unique id, MPI_Bcast shares it,
  // every rank joins with ncclCommInitRank on its current CUDA device.
  explicit NcclCommunicator(MPI_Comm comm);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  const char* backend() const override { return "nccl"; }

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
  void inputs_ready() const;  // stream_ waits for the kernels on Kokkos' stream so far
  void finish() const;        // Kokkos' stream waits for everything on stream_ so far
  Request pending() const;    // a Request that completes with the work now on stream_
  void check_peer(int peer, const char* call) const;
  void enqueue_allgather(const CommBuffer& send, const CommBuffer& recv) const;
  void enqueue_p2p(const CommBuffer& buf, int peer, bool sending) const;

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_written_ = nullptr, collective_done_ = nullptr;  // reused by every call
  int size_ = 1, rank_ = 0, device_ = -1;
};

}  // namespace trident
