// MPI backend of the collectives interface: every call checked, counts split under INT_MAX, and
// device buffers staged through pinned host memory where the MPI cannot read them.
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/comm.hpp"
#include "core/error.hpp"

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // OpenMPI's MPIX_Query_cuda_support
#endif

namespace trident {
namespace {

int count_of(size_t n) {
  if (n > static_cast<size_t>(INT_MAX))
    fatal("MPI collective", __FILE__, __LINE__, "message of " + std::to_string(n) + " elements",
          "split the buffer (bucket sizes above 2^31 elements are not supported)");
  return static_cast<int>(n);
}

// MPI has no 16-bit floating-point types: sum bf16 / fp16 bit patterns (MPI_UINT16_T) with
// user-defined operations that add in fp32 and round back, as a 16-bit NCCL reduction does.
template <Precision P>
void sum_16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_half(from_half(a[i], P) + from_half(b[i], P), P);
}

MPI_Op sum_op(Precision p) {
  // Created once, after MPI_Init (the first use); MPI_Finalize releases them.
  static const MPI_Op bf16 = [] {
    MPI_Op op;
    TRIDENT_MPI(MPI_Op_create(&sum_16<Precision::kBf16>, 1, &op));
    return op;
  }();
  static const MPI_Op fp16 = [] {
    MPI_Op op;
    TRIDENT_MPI(MPI_Op_create(&sum_16<Precision::kFp16>, 1, &op));
    return op;
  }();
  return p == Precision::kBf16 ? bf16 : fp16;
}

}  // namespace

// Host buffers reused across calls: each is lent to one call, or to one request until it
// completes, and one is allocated only when none free is big enough, so that steps after the
// first allocate nothing.
class StagingPool {
 public:
  // A borrowed buffer, given back when destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(StagingPool* pool, size_t slot) : pool_(pool), slot_(slot) {}
    Lease(Lease&& o) noexcept : pool_(o.pool_), slot_(o.slot_) { o.pool_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept {
      std::swap(pool_, o.pool_);
      std::swap(slot_, o.slot_);
      return *this;
    }
    ~Lease() {
      if (pool_) pool_->busy_[slot_] = false;
    }
    char* data() const { return pool_->buffers_[slot_].data(); }

   private:
    StagingPool* pool_ = nullptr;
    size_t slot_ = 0;
  };

  Lease borrow(size_t bytes) {
    size_t pick = buffers_.size();
    for (size_t i = 0; i < buffers_.size(); ++i)
      if (!busy_[i] && (pick == buffers_.size() || buffers_[i].extent(0) >= bytes))
        pick = i;  // the last free one that fits, else any free one (grown below)
    if (pick == buffers_.size()) {
      buffers_.emplace_back();
      busy_.push_back(false);
    }
    if (buffers_[pick].extent(0) < bytes)
      buffers_[pick] = Kokkos::View<char*, PinnedSpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpi_staging"), bytes);
    busy_[pick] = true;
    return Lease(this, pick);
  }

 private:
  std::vector<Kokkos::View<char*, PinnedSpace>> buffers_;
  std::vector<bool> busy_;
};

namespace {

// A buffer as MPI sees it: the buffer itself, or (staged) a leased host copy of it.
class MpiBuffer {
 public:
  // `copy_in`: the host copy starts as the buffer's contents, for MPI to read.
  MpiBuffer(StagingPool* pool, const CommBuffer& buffer, bool copy_in) : buffer_(buffer) {
    constexpr bool host_memory =
        Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
    if (!pool) {
      // A CUDA-aware MPI reads device memory outside Kokkos' stream: the kernels writing the
      // buffer (or still reading it, for a receive) must have finished.
      if (!host_memory) Kokkos::DefaultExecutionSpace().fence();
      return;
    }
    lease_ = pool->borrow(bytes());
    staged_ = true;
    if (copy_in)
      Kokkos::deep_copy(
          Kokkos::View<char*, PinnedSpace, Kokkos::MemoryUnmanaged>(lease_.data(), bytes()),
          Kokkos::View<const char*, MemSpace, Kokkos::MemoryUnmanaged>(
              static_cast<const char*>(buffer_.data()), bytes()));
  }
  void* data() const { return staged_ ? lease_.data() : buffer_.data(); }
  // Staged: what MPI wrote into the host copy, back into the buffer.
  void copy_out() const {
    if (!staged_) return;
    Kokkos::deep_copy(
        Kokkos::View<char*, MemSpace, Kokkos::MemoryUnmanaged>(static_cast<char*>(buffer_.data()),
                                                               bytes()),
        Kokkos::View<const char*, PinnedSpace, Kokkos::MemoryUnmanaged>(lease_.data(), bytes()));
  }

 private:
  size_t bytes() const { return buffer_.count() * bytes_of(buffer_.format()); }
  CommBuffer buffer_;
  StagingPool::Lease lease_;
  bool staged_ = false;
};

// A non-blocking call and the buffers it uses: `outputs` are copied back once it completes, and
// every staged copy stays leased until then.
class MpiRequest final : public Request::Impl {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<MpiBuffer> inputs, outputs;
  void wait() override {
    TRIDENT_MPI(MPI_Wait(&request, MPI_STATUS_IGNORE));
    finish();
  }
  bool test() override {
    int done = 0;
    TRIDENT_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) finish();
    return done != 0;
  }

 private:
  void finish() {
    for (const MpiBuffer& b : outputs) b.copy_out();
    outputs.clear();
    inputs.clear();
  }
};

// fp32 as MPI_FLOAT; bf16 / fp16 bit patterns as MPI_UINT16_T (moved unchanged, summed by sum_op).
MPI_Datatype mpi_datatype_of(const CommBuffer& b) {
  return b.format() == Precision::kFp32 ? MPI_FLOAT : MPI_UINT16_T;
}

MPI_Op sum_of(const CommBuffer& b) {
  return b.format() == Precision::kFp32 ? MPI_SUM : sum_op(b.format());
}

void check_same_format(const CommBuffer& a, const CommBuffer& b, const char* call) {
  if (a.format() != b.format())
    fatal(call, __FILE__, __LINE__, "send and receive buffers of different formats",
          "convert one side first (kernels/cast.hpp)");
}

void check_counts(size_t parts, size_t part, size_t whole, const char* call) {
  if (parts * part != whole)
    fatal(call, __FILE__, __LINE__,
          std::to_string(whole) + " elements are not " + std::to_string(parts) + " parts of " +
              std::to_string(part),
          "size the whole buffer as ranks x the part");
}

}  // namespace

MpiBufferAccess mpi_buffer_access() {
  if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible)
    return MpiBufferAccess::kDirect;
  if (const char* forced = std::getenv("TRIDENT_MPI_CUDA_AWARE"); forced && *forced)
    return std::string(forced) == "1" ? MpiBufferAccess::kDirect : MpiBufferAccess::kStaged;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  if (MPIX_Query_cuda_support() == 1) return MpiBufferAccess::kDirect;
#endif
  return MpiBufferAccess::kStaged;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, MpiBufferAccess access)
    : comm_(comm), access_(access), staging_(std::make_unique<StagingPool>()) {
  TRIDENT_MPI(MPI_Comm_size(comm_, &size_));
  TRIDENT_MPI(MPI_Comm_rank(comm_, &rank_));
}

MpiCommunicator::~MpiCommunicator() = default;

const char* MpiCommunicator::backend() const {
  return access_ == MpiBufferAccess::kStaged ? "mpi (host-staged)" : "mpi";
}

StagingPool* MpiCommunicator::staging_for(const CommBuffer& buffer, bool sums) const {
  constexpr bool host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  const bool host_sum = sums && buffer.format() != Precision::kFp32 && !host_memory;
  return access_ == MpiBufferAccess::kStaged || host_sum ? staging_.get() : nullptr;
}

void MpiCommunicator::allreduce_sum(CommBuffer buf) {
  if (size_ == 1) return;
  const MpiBuffer b(staging_for(buf, true), buf, true);
  TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, b.data(), count_of(buf.count()), mpi_datatype_of(buf),
                            sum_of(buf), comm_));
  b.copy_out();
}

void MpiCommunicator::allreduce_max(CommBuffer buf) {
  if (size_ == 1) return;
  if (buf.format() != Precision::kFp32)
    fatal("MPI_Allreduce(MPI_MAX)", __FILE__, __LINE__, "a 16-bit buffer",
          "the maximum is taken over fp32 values only");
  const MpiBuffer b(staging_for(buf, false), buf, true);
  TRIDENT_MPI(
      MPI_Allreduce(MPI_IN_PLACE, b.data(), count_of(buf.count()), MPI_FLOAT, MPI_MAX, comm_));
  b.copy_out();
}

Request MpiCommunicator::iallreduce_sum(CommBuffer buf) {
  if (size_ == 1) return Request();
  auto r = std::make_unique<MpiRequest>();
  r->outputs.emplace_back(staging_for(buf, true), buf, true);
  TRIDENT_MPI(MPI_Iallreduce(MPI_IN_PLACE, r->outputs[0].data(), count_of(buf.count()),
                             mpi_datatype_of(buf), sum_of(buf), comm_, &r->request));
  return Request(std::move(r));
}

void MpiCommunicator::reduce_scatter_sum(CommBuffer send, CommBuffer recv) {
  check_same_format(send, recv, "MPI_Reduce_scatter_block");
  check_counts(static_cast<size_t>(size_), recv.count(), send.count(), "MPI_Reduce_scatter_block");
  const MpiBuffer in(staging_for(send, true), send, true),
      out(staging_for(recv, true), recv, false);
  TRIDENT_MPI(MPI_Reduce_scatter_block(in.data(), out.data(), count_of(recv.count()),
                                       mpi_datatype_of(recv), sum_of(recv), comm_));
  out.copy_out();
}

void MpiCommunicator::reduce_scatter_sum(CommBuffer send, CommBuffer recv,
                                         const std::vector<size_t>& counts) {
  check_same_format(send, recv, "MPI_Reduce_scatter");
  size_t whole = 0;
  for (size_t c : counts) whole += c;
  if (counts.size() != static_cast<size_t>(size_) || whole != send.count() ||
      counts[rank_] != recv.count())
    fatal("MPI_Reduce_scatter", __FILE__, __LINE__,
          "send of " + std::to_string(send.count()) + " and recv of " +
              std::to_string(recv.count()) + " elements against the counts given",
          "give one count per rank, summing to the send buffer, this rank's the recv buffer's");
  std::vector<int> parts(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) parts[r] = count_of(counts[r]);
  count_of(whole);
  const MpiBuffer in(staging_for(send, true), send, true),
      out(staging_for(recv, true), recv, false);
  TRIDENT_MPI(MPI_Reduce_scatter(in.data(), out.data(), parts.data(), mpi_datatype_of(recv),
                                 sum_of(recv), comm_));
  out.copy_out();
}

namespace {

// All-gather, blocking (request null) or not. In place when this rank's part already sits at
// its slot of recv (as NCCL allows); the staged whole then carries it in.
void gather_all(MPI_Comm comm, int size, int rank, StagingPool* staging, const CommBuffer& send,
                const CommBuffer& recv, MpiRequest* request) {
  check_same_format(send, recv, "MPI_Allgather");
  check_counts(static_cast<size_t>(size), send.count(), recv.count(), "MPI_Allgather");
  const bool in_place =
      send.data() == recv.window(static_cast<size_t>(rank) * send.count(), 0).data();
  MpiRequest blocking;
  MpiRequest& r = request ? *request : blocking;
  r.outputs.emplace_back(staging, recv, in_place);
  if (!in_place) r.inputs.emplace_back(staging, send, true);
  const void* src = in_place ? MPI_IN_PLACE : r.inputs[0].data();
  const int count = count_of(send.count());
  const MPI_Datatype type = mpi_datatype_of(send);
  if (request) {
    TRIDENT_MPI(
        MPI_Iallgather(src, count, type, r.outputs[0].data(), count, type, comm, &r.request));
  } else {
    TRIDENT_MPI(MPI_Allgather(src, count, type, r.outputs[0].data(), count, type, comm));
    blocking.wait();  // completes at once (null request): copies the staged result out
  }
}

}  // namespace

void MpiCommunicator::allgather(CommBuffer send, CommBuffer recv) {
  gather_all(comm_, size_, rank_, staging_for(send, false), send, recv, nullptr);
}

Request MpiCommunicator::iallgather(CommBuffer send, CommBuffer recv) {
  auto r = std::make_unique<MpiRequest>();
  gather_all(comm_, size_, rank_, staging_for(send, false), send, recv, r.get());
  return Request(std::move(r));
}

void MpiCommunicator::broadcast(CommBuffer buf, int root) {
  if (size_ == 1) return;
  const MpiBuffer b(staging_for(buf, false), buf, rank_ == root);
  TRIDENT_MPI(MPI_Bcast(b.data(), count_of(buf.count()), mpi_datatype_of(buf), root, comm_));
  if (rank_ != root) b.copy_out();
}

namespace {

// MPI's int counts and displacements of parts laid end to end; the total must fit the buffer.
std::vector<int> displacements_of(const std::vector<int>& counts, size_t buffer, const char* what) {
  std::vector<int> out(counts.size());
  size_t first = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    out[r] = count_of(first);
    first += static_cast<size_t>(counts[r]);
  }
  if (first > buffer)
    fatal("MPI_Alltoallv", __FILE__, __LINE__,
          std::string(what) + " counts of " + std::to_string(first) +
              " elements against a buffer of " + std::to_string(buffer),
          "size the buffer to hold every part");
  return out;
}

}  // namespace

void MpiCommunicator::alltoallv(CommBuffer send, const std::vector<size_t>& send_counts,
                                CommBuffer recv, const std::vector<size_t>& recv_counts) {
  check_same_format(send, recv, "MPI_Alltoallv");
  if (send_counts.size() != static_cast<size_t>(size_) ||
      recv_counts.size() != static_cast<size_t>(size_))
    fatal("MPI_Alltoallv", __FILE__, __LINE__, "counts not one per rank",
          "give one send and one receive count per rank");
  std::vector<int> sends(size_), recvs(size_);
  for (int r = 0; r < size_; ++r) {
    sends[r] = count_of(send_counts[r]);
    recvs[r] = count_of(recv_counts[r]);
  }
  const std::vector<int> send_at = displacements_of(sends, send.count(), "send");
  const std::vector<int> recv_at = displacements_of(recvs, recv.count(), "receive");
  // Staging moves only the parts: the rest of recv keeps its contents.
  size_t sent = 0, received = 0;
  for (int r = 0; r < size_; ++r) sent += send_counts[r], received += recv_counts[r];
  const CommBuffer send_parts = send.window(0, sent), recv_parts = recv.window(0, received);
  const MpiBuffer in(staging_for(send_parts, false), send_parts, true),
      out(staging_for(recv_parts, false), recv_parts, false);
  const MPI_Datatype type = mpi_datatype_of(send);
  TRIDENT_MPI(MPI_Alltoallv(in.data(), sends.data(), send_at.data(), type, out.data(), recvs.data(),
                            recv_at.data(), type, comm_));
  out.copy_out();
}

void MpiCommunicator::send(CommBuffer buf, int peer, int tag) {
  const MpiBuffer b(staging_for(buf, false), buf, true);
  TRIDENT_MPI(MPI_Send(b.data(), count_of(buf.count()), mpi_datatype_of(buf), peer, tag, comm_));
}

void MpiCommunicator::recv(CommBuffer buf, int peer, int tag) {
  const MpiBuffer b(staging_for(buf, false), buf, false);
  TRIDENT_MPI(MPI_Recv(b.data(), count_of(buf.count()), mpi_datatype_of(buf), peer, tag, comm_,
                       MPI_STATUS_IGNORE));
  b.copy_out();
}

Request MpiCommunicator::isend(CommBuffer buf, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>();
  r->inputs.emplace_back(staging_for(buf, false), buf, true);
  TRIDENT_MPI(MPI_Isend(r->inputs[0].data(), count_of(buf.count()), mpi_datatype_of(buf), peer, tag,
                        comm_, &r->request));
  return Request(std::move(r));
}

Request MpiCommunicator::irecv(CommBuffer buf, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>();
  r->outputs.emplace_back(staging_for(buf, false), buf, false);
  TRIDENT_MPI(MPI_Irecv(r->outputs[0].data(), count_of(buf.count()), mpi_datatype_of(buf), peer,
                        tag, comm_, &r->request));
  return Request(std::move(r));
}

}  // namespace trident
