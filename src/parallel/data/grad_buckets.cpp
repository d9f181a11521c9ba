// Bucketed, overlapped dp all-reduce of gradients.
#include "parallel/data/grad_buckets.hpp"

#include <algorithm>

#include "kernels/cast.hpp"

namespace trident {

GradBuckets::GradBuckets(View1 grads, size_t bucket_elems, Communicator* dp, Precision reduce,
                         MemoryLedger* ledger)
    : grads_(grads), dp_(dp), reduce_(reduce) {
  if (reduce_ != Precision::kFp32 && dp_->size() > 1)
    grads16_ = allocate_half(*ledger, MemCategory::kCommBuffers, "grads16", grads.extent(0));
  const int64_t n = static_cast<int64_t>(grads.extent(0));
  const int64_t b = static_cast<int64_t>(bucket_elems);
  for (int64_t end = n; end > 0; end -= b) {
    begin_.push_back(std::max<int64_t>(0, end - b));
    end_.push_back(end);
  }
  requests_.resize(begin_.size());
}

void GradBuckets::ready_from(int64_t offset) {
  if (!armed_ || dp_->size() == 1) return;
  // No fences: the communicator orders itself after the kernels that wrote the gradients.
  while (launched_ < begin_.size() && begin_[launched_] >= offset) {
    const int64_t b = begin_[launched_];
    const size_t n = static_cast<size_t>(end_[launched_] - b);
    if (reduce_ == Precision::kFp32) {
      requests_[launched_] = dp_->iallreduce_sum(window(grads_, b, n));
    } else {
      kernels::store_half(Exec(), grads16_, static_cast<size_t>(b), window(grads_, b, n), n,
                          reduce_);
      requests_[launched_] = dp_->iallreduce_sum(CommBuffer(window(grads16_, b, n), reduce_));
    }
    ++launched_;
  }
  // Without an asynchronous progress thread, MPI advances non-blocking collectives only when
  // called: test the ones in flight so they move while backward computes.
  for (size_t k = 0; k < launched_; ++k) requests_[k].test();
}

void GradBuckets::finish() {
  if (dp_->size() > 1) {
    armed_ = true;
    ready_from(0);
    for (Request& r : requests_) r.wait();
    if (reduce_ != Precision::kFp32) {
      kernels::load_half(Exec(), window(grads_, 0, grads_.extent(0)), grads16_, 0, grads_.extent(0),
                         reduce_);
    }
  }
  launched_ = 0;
  armed_ = false;
}

}  // namespace trident
