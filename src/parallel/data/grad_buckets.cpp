// Bucketed, overlapped dp all-reduce of gradients.
#include "parallel/data/grad_buckets.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/cast.hpp"

namespace trident {

GradBuckets::GradBuckets(View1 grads, size_t bucket_elems, Communicator* dp, Precision reduce,
                         MemoryLedger* ledger, const std::vector<Segment>& expert_ranges,
                         Communicator* expert_dp)
    : grads_(grads), dp_(dp), reduce_(reduce) {
  const int64_t n = static_cast<int64_t>(grads.extent(0));
  const int64_t b = static_cast<int64_t>(bucket_elems);
  // Regions of one group each, from the end of the buffer; each tiled from its end.
  if (!expert_ranges.empty() && !expert_dp)
    throw std::logic_error("GradBuckets: expert ranges need the experts' replica group");
  std::vector<Segment> experts = expert_ranges;
  std::sort(experts.begin(), experts.end(),
            [](const Segment& x, const Segment& y) { return x.begin > y.begin; });
  auto tile = [&](int64_t begin, int64_t end, Communicator* comm) {
    for (int64_t last = end; last > begin; last -= b) {
      begin_.push_back(std::max<int64_t>(begin, last - b));
      end_.push_back(last);
      comm_.push_back(comm);
      communicates_ = communicates_ || comm->size() > 1;
    }
  };
  int64_t end = n;
  for (const Segment& e : experts) {
    tile(e.end, end, dp);
    tile(e.begin, e.end, expert_dp);
    end = e.begin;
  }
  tile(0, end, dp);
  if (reduce_ != Precision::kFp32 && communicates_)
    grads16_ = allocate_half(*ledger, MemCategory::kCommBuffers, "grads16", grads.extent(0));
  requests_.resize(begin_.size());
}

void GradBuckets::ready_from(int64_t offset) {
  if (!armed_ || !communicates_) return;
  // No fences: the communicator orders itself after the kernels that wrote the gradients.
  while (launched_ < begin_.size() && begin_[launched_] >= offset) {
    const int64_t b = begin_[launched_];
    const size_t n = static_cast<size_t>(end_[launched_] - b);
    Communicator* comm = comm_[launched_];
    if (comm->size() == 1) {
      // nothing to sum: a group of one
    } else if (reduce_ == Precision::kFp32) {
      requests_[launched_] = comm->iallreduce_sum(window(grads_, b, n));
    } else {
      kernels::store_half(Exec(), grads16_, static_cast<size_t>(b), window(grads_, b, n), n,
                          reduce_);
      requests_[launched_] = comm->iallreduce_sum(CommBuffer(window(grads16_, b, n), reduce_));
    }
    ++launched_;
  }
  // Without an asynchronous progress thread, MPI advances non-blocking collectives only when
  // called: test the ones in flight so they move while backward computes.
  for (size_t k = 0; k < launched_; ++k) requests_[k].test();
}

void GradBuckets::finish() {
  if (communicates_) {
    armed_ = true;
    ready_from(0);
    for (Request& r : requests_) r.wait();
    if (reduce_ != Precision::kFp32)
      for (size_t k = 0; k < begin_.size(); ++k) {
        if (comm_[k]->size() == 1) continue;
        const size_t first = static_cast<size_t>(begin_[k]),
                     n = static_cast<size_t>(end_[k]) - first;
        kernels::load_half(Exec(), window(grads_, first, n), grads16_, first, n, reduce_);
      }
  }
  launched_ = 0;
  armed_ = false;
}

}  // namespace trident
