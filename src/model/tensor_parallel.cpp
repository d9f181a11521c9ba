// Megatron's f and g operators over the tensor-parallel group, on tensors in the storage format.
#include "model/tensor_parallel.hpp"

namespace trident {

TensorParallel::TensorParallel(Communicator* comm, int size, int rank, bool sequence_parallel,
                               size_t width)
    : comm_(comm), size_(size), rank_(rank), sp_(sequence_parallel && size > 1), width_(width) {}

// No fences before a collective: communicators order themselves against the kernels launched
// before them (NCCL by events on Kokkos' stream, MPI by a fence or a staging copy), and kernels
// after them run on the same stream.
void TensorParallel::allreduce_sum(const View1& buf, size_t n) {
  if (size_ == 1) return;
  ScopedPhase phase(timer_, Phase::kTpComm);
  comm_->allreduce_sum(window(buf, 0, n));
}

void TensorParallel::allreduce_sum(const StoredTensor& t, size_t n) {
  if (size_ == 1) return;
  ScopedPhase phase(timer_, Phase::kTpComm);
  comm_->allreduce_sum(CommBuffer(t).window(0, n));
}

void TensorParallel::gather_f32(const View1& part, const View1& all, size_t n) {
  if (size_ == 1) {
    Kokkos::deep_copy(window(all, 0, n), window(part, 0, n));
    return;
  }
  ScopedPhase phase(timer_, Phase::kTpComm);
  comm_->allgather(window(part, 0, n), window(all, 0, n * size_));
}

void TensorParallel::allreduce_max(const View1& buf, size_t n) {
  if (size_ == 1) return;
  ScopedPhase phase(timer_, Phase::kTpComm);
  comm_->allreduce_max(window(buf, 0, n));
}

StoredTensor TensorParallel::sum_rows(const StoredTensor& partial, int N,
                                      const StoredTensor& scattered) {
  if (size_ == 1) return partial;
  const size_t NC = static_cast<size_t>(N) * width_, part = NC / size_;
  ScopedPhase phase(timer_, Phase::kTpComm);
  if (!sp_) {
    comm_->allreduce_sum(CommBuffer(partial).window(0, NC));
    return partial;
  }
  comm_->reduce_scatter_sum(CommBuffer(partial).window(0, NC),
                            CommBuffer(scattered).window(0, part));
  return scattered;
}

StoredTensor TensorParallel::gather_rows(const StoredTensor& rows, int N,
                                         const StoredTensor& gathered) {
  if (!sp_) return rows;
  const size_t NC = static_cast<size_t>(N) * width_, part = NC / size_;
  ScopedPhase phase(timer_, Phase::kTpComm);
  comm_->allgather(CommBuffer(rows).window(0, part), CommBuffer(gathered).window(0, NC));
  return gathered;
}

}  // namespace trident
