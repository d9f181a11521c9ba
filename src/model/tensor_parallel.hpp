// The tensor-parallel group as a stage's layers see it: Megatron's f and g operators on token
// rows, which under sequence parallelism become an all-gather and a reduce-scatter.
#pragma once

#include <cstddef>

#include "comm/comm.hpp"
#include "core/buffer_list.hpp"
#include "core/stored.hpp"
#include "core/timer.hpp"
#include "core/types.hpp"

namespace trident {

class TensorParallel {
 public:
  // `comm` may be null when size is 1. Under sequence parallelism (Korthikanti et al. 2022)
  // each tp rank keeps only its block of the token rows of the tensors outside the
  // tensor-parallel regions; `rows` is the most rows a micro-batch has (B*T), `width` C.
  TensorParallel(Communicator* comm, int size, int rank, bool sequence_parallel, Precision storage,
                 size_t rows, size_t width, BufferList& buffers);

  int rank() const { return rank_; }
  bool sequence_parallel() const { return sp_; }
  // The token rows of n this rank holds outside the tensor-parallel regions: n, or its 1/tp
  // block under sequence parallelism (rows [rank*n/tp, (rank+1)*n/tp)).
  int local_rows(int n) const { return sp_ ? n / size_ : n; }
  // Attributes tensor-parallel communication to Phase::kTpComm; null times nothing.
  void set_timer(PhaseTimer* timer) { timer_ = timer; }

  // All N rows of `rows` [local_rows(N), C]: itself, or under sequence parallelism every rank's
  // block gathered into `gathered` [N, C]. Returns the buffer with all rows.
  View1 gather_rows(const View1& rows, int N, const View1& gathered);
  // The sum over tp of `partial` [N, C] (a row-parallel output or a column-parallel input
  // gradient): in place, or under sequence parallelism this rank's rows of it in `scattered`.
  // Returns the buffer with the sum.
  View1 sum_rows(const View1& partial, int N, const View1& scattered);
  void allreduce_sum(const View1& buf, size_t n);
  void allreduce_max(const View1& buf, size_t n);

 private:
  Communicator* comm_;
  int size_, rank_;
  bool sp_;
  Precision storage_;
  size_t width_;
  PhaseTimer* timer_ = nullptr;
  Exec exec_;
  // 16-bit storage with tp > 1: what sum_rows and gather_rows send, [N,C] and [N/tp,C] (SP).
  HalfView1 tp16_, tp16_rows_;
};

}  // namespace trident
