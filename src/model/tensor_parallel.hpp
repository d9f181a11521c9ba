// The tensor-parallel group as a stage's layers see it: Megatron's f and g operators on token
// rows, which under sequence parallelism become an all-gather and a reduce-scatter.
#pragma once

#include <cstddef>

#include "comm/comm.hpp"
#include "core/stored.hpp"
#include "core/timer.hpp"
#include "core/types.hpp"

namespace trident {

class TensorParallel {
 public:
  // `comm` may be null when size is 1. Under sequence parallelism (Korthikanti et al. 2022)
  // each tp rank keeps only its block of the token rows of the tensors outside the
  // tensor-parallel regions; `width` is C.
  TensorParallel(Communicator* comm, int size, int rank, bool sequence_parallel, size_t width);

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool sequence_parallel() const { return sp_; }
  // The token rows of n this rank holds outside the tensor-parallel regions: n, or its 1/tp
  // block under sequence parallelism (rows [rank*n/tp, (rank+1)*n/tp)).
  int local_rows(int n) const { return sp_ ? n / size_ : n; }
  // Attributes tensor-parallel communication to Phase::kTpComm; null times nothing.
  void set_timer(PhaseTimer* timer) { timer_ = timer; }

  // All N rows of `rows` [local_rows(N), C]: itself, or under sequence parallelism every rank's
  // block gathered into `gathered` [N, C]. Returns the buffer with all rows. Tensors cross tp in
  // their storage format: 16-bit activations in 16 bits, as Megatron's bf16 collectives do.
  StoredTensor gather_rows(const StoredTensor& rows, int N, const StoredTensor& gathered);
  // The sum over tp of `partial` [N, C] (a row-parallel output or a column-parallel input
  // gradient): in place, or under sequence parallelism this rank's rows of it in `scattered`.
  // Returns the buffer with the sum (made in fp32 and rounded to the storage format).
  StoredTensor sum_rows(const StoredTensor& partial, int N, const StoredTensor& scattered);
  // Every rank's `part` (n fp32 elements each) laid end to end in rank order in `all`.
  void gather_f32(const View1& part, const View1& all, size_t n);
  void allreduce_sum(const View1& buf, size_t n);
  // The first n elements of t summed over tp, in place (in t's format, summed in fp32).
  void allreduce_sum(const StoredTensor& t, size_t n);
  void allreduce_max(const View1& buf, size_t n);

 private:
  Communicator* comm_;
  int size_, rank_;
  bool sp_;
  size_t width_;
  PhaseTimer* timer_ = nullptr;
};

}  // namespace trident
