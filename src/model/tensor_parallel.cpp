// Megatron's f and g operators over the tensor-parallel group, in the storage format.
#include "model/tensor_parallel.hpp"

#include "kernels/cast.hpp"

namespace trident {

using kernels::load_half;
using kernels::store_half;

TensorParallel::TensorParallel(Communicator* comm, int size, int rank, bool sequence_parallel,
                               Precision storage, size_t rows, size_t width, BufferList& buffers)
    : comm_(comm),
      size_(size),
      rank_(rank),
      sp_(sequence_parallel && size > 1),
      storage_(storage),
      width_(width) {
  if (storage_ != Precision::kFp32 && size_ > 1) {
    tp16_ = buffers.f16("tp16", MemCategory::kCommBuffers, rows * width);
    if (sp_) tp16_rows_ = buffers.f16("tp16_rows", MemCategory::kCommBuffers, rows / size_ * width);
  }
}

// No fences before a collective: communicators order themselves against the kernels launched
// before them (NCCL by events on Kokkos' stream, MPI by a fence or a staging copy), and kernels
// after them run on the same stream.
void TensorParallel::allreduce_sum(const View1& buf, size_t n) {
  if (size_ == 1) return;
  ScopedPhase phase(timer_, Phase::kTpComm);
  comm_->allreduce_sum(window(buf, 0, n));
}

void TensorParallel::allreduce_max(const View1& buf, size_t n) {
  if (size_ == 1) return;
  ScopedPhase phase(timer_, Phase::kTpComm);
  comm_->allreduce_max(window(buf, 0, n));
}

// Under 16-bit storage the activations and their gradients cross tp in 16 bits, as Megatron's
// bf16 collectives do: half the bytes. A gathered tensor is already 16-bit valued (exact); a
// partial sum is rounded before the sum, which the collective makes in fp32 and rounds.
View1 TensorParallel::sum_rows(const View1& partial, int N, const View1& scattered) {
  const size_t NC = static_cast<size_t>(N) * width_, part = NC / size_;
  if (size_ == 1) return partial;
  ScopedPhase phase(timer_, Phase::kTpComm);
  const bool half = storage_ != Precision::kFp32;
  if (!half && !sp_) {
    comm_->allreduce_sum(window(partial, 0, NC));
    return partial;
  }
  if (!half) {
    comm_->reduce_scatter_sum(window(partial, 0, NC), window(scattered, 0, part));
    return scattered;
  }
  store_half(exec_, tp16_, 0, window(partial, 0, NC), NC, storage_);
  if (!sp_) {
    comm_->allreduce_sum(CommBuffer(window(tp16_, 0, NC), storage_));
    load_half(exec_, window(partial, 0, NC), tp16_, 0, NC, storage_);
    return partial;
  }
  comm_->reduce_scatter_sum(CommBuffer(window(tp16_, 0, NC), storage_),
                            CommBuffer(window(tp16_rows_, 0, part), storage_));
  load_half(exec_, window(scattered, 0, part), tp16_rows_, 0, part, storage_);
  return scattered;
}

View1 TensorParallel::gather_rows(const View1& rows, int N, const View1& gathered) {
  if (!sp_) return rows;
  const size_t NC = static_cast<size_t>(N) * width_, part = NC / size_;
  ScopedPhase phase(timer_, Phase::kTpComm);
  if (storage_ == Precision::kFp32) {
    comm_->allgather(window(rows, 0, part), window(gathered, 0, NC));
    return gathered;
  }
  store_half(exec_, tp16_rows_, 0, window(rows, 0, part), part, storage_);
  comm_->allgather(CommBuffer(window(tp16_rows_, 0, part), storage_),
                   CommBuffer(window(tp16_, 0, NC), storage_));
  load_half(exec_, window(gathered, 0, NC), tp16_, 0, NC, storage_);
  return gathered;
}

}  // namespace trident
