// The expert-parallel group as an MoE layer sees it: the ranks that split a layer's experts and
// exchange token rows with one another, all-to-all, on the way to the experts and back.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "comm/comm.hpp"
#include "comm/host_comm.hpp"
#include "core/stored.hpp"
#include "core/timer.hpp"

namespace trident {

// What a stage builds its expert-parallel group from: the communicator the rows travel on and the
// MPI communicator the row counts travel on (both null with one expert-parallel rank).
struct ExpertComms {
  Communicator* rows = nullptr;
  MPI_Comm counts = MPI_COMM_NULL;
};

class ExpertParallel {
 public:
  // `rows` carries the token rows, `counts` (MPI) the row counts; both unused (and may be null)
  // when size is 1. Every rank of the group runs the same MoE layers in the same order (they are
  // data-parallel replicas of one stage), so each exchange is matched.
  ExpertParallel(Communicator* rows, MPI_Comm counts, int size, int rank);

  int size() const { return size_; }
  int rank() const { return rank_; }
  // Attributes the exchanges to Phase::kEpComm; null times nothing.
  void set_timer(PhaseTimer* timer) { timer_ = timer; }

  // `sending[r * local + e]`: the rows this rank sends to expert e of rank r (each rank holds
  // `local` experts). Returns `arriving[s * local + e]`: the rows rank s sends to this rank's
  // expert e.
  std::vector<int> exchange_counts(const std::vector<int>& sending) const;
  // Rows of `width` elements: send holds send_rows[r] rows for each rank r in rank order, recv
  // gets recv_rows[s] from each rank s in rank order. Tensors travel in their storage format.
  void exchange_rows(const StoredTensor& send, const std::vector<int>& send_rows,
                     const StoredTensor& recv, const std::vector<int>& recv_rows, int width) const;

 private:
  Communicator* rows_;
  std::unique_ptr<HostCollectives> counts_;  // null when size is 1
  int size_, rank_;
  PhaseTimer* timer_ = nullptr;
};

}  // namespace trident
