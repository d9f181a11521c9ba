// The all-to-all exchanges of expert parallelism: row counts over MPI, rows over the backend.
#include "model/expert_parallel.hpp"

#include <memory>
#include <stdexcept>

namespace trident {

ExpertParallel::ExpertParallel(Communicator* rows, MPI_Comm counts, int size, int rank)
    : rows_(rows), size_(size), rank_(rank) {
  if (size_ > 1 && (!rows_ || counts == MPI_COMM_NULL || rows_->size() != size_))
    throw std::logic_error("ExpertParallel: a group of several ranks needs its communicators");
  if (size_ > 1) counts_ = std::make_unique<HostCollectives>(counts);
}

std::vector<int> ExpertParallel::exchange_counts(const std::vector<int>& sending) const {
  if (size_ == 1) return sending;
  ScopedPhase phase(timer_, Phase::kEpComm);
  return counts_->alltoall(sending);
}

void ExpertParallel::exchange_rows(const StoredTensor& send, const std::vector<int>& send_rows,
                                   const StoredTensor& recv, const std::vector<int>& recv_rows,
                                   int width) const {
  std::vector<size_t> sends(size_), recvs(size_);
  for (int r = 0; r < size_; ++r) {
    sends[r] = static_cast<size_t>(send_rows[r]) * width;
    recvs[r] = static_cast<size_t>(recv_rows[r]) * width;
  }
  ScopedPhase phase(timer_, Phase::kEpComm);
  rows_->alltoallv(CommBuffer(send), sends, CommBuffer(recv), recvs);
}

}  // namespace trident
