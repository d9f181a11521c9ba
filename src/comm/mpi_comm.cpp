// MPI backend of the collectives interface: every call checked, counts split under INT_MAX.
#include <climits>

#include "comm/comm.hpp"
#include "core/error.hpp"

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

class MpiRequest final : public Request::Impl {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  void wait() override { TRIDENT_MPI(MPI_Wait(&request, MPI_STATUS_IGNORE)); }
  bool test() override {
    int done = 0;
    TRIDENT_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }
};

// fp32 as MPI_FLOAT; bf16 / fp16 bit patterns as MPI_UINT16_T (moved unchanged, summed by sum_op).
MPI_Datatype datatype_of(const CommBuffer& b) {
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

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  TRIDENT_MPI(MPI_Comm_size(comm_, &size_));
  TRIDENT_MPI(MPI_Comm_rank(comm_, &rank_));
}

void MpiCommunicator::allreduce_sum(CommBuffer buf) {
  if (size_ == 1) return;
  TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, buf.data(), count_of(buf.count()), datatype_of(buf),
                            sum_of(buf), comm_));
}

void MpiCommunicator::allreduce_max(CommBuffer buf) {
  if (size_ == 1) return;
  if (buf.format() != Precision::kFp32)
    fatal("MPI_Allreduce(MPI_MAX)", __FILE__, __LINE__, "a 16-bit buffer",
          "the maximum is taken over fp32 values only");
  TRIDENT_MPI(
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count_of(buf.count()), MPI_FLOAT, MPI_MAX, comm_));
}

Request MpiCommunicator::iallreduce_sum(CommBuffer buf) {
  if (size_ == 1) return Request();
  auto r = std::make_unique<MpiRequest>();
  TRIDENT_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf.data(), count_of(buf.count()), datatype_of(buf),
                             sum_of(buf), comm_, &r->request));
  return Request(std::move(r));
}

void MpiCommunicator::reduce_scatter_sum(CommBuffer send, CommBuffer recv) {
  check_same_format(send, recv, "MPI_Reduce_scatter_block");
  check_counts(static_cast<size_t>(size_), recv.count(), send.count(), "MPI_Reduce_scatter_block");
  TRIDENT_MPI(MPI_Reduce_scatter_block(send.data(), recv.data(), count_of(recv.count()),
                                       datatype_of(recv), sum_of(recv), comm_));
}

namespace {

// All-gather, blocking (request null) or not. In place when this rank's part already sits at
// its slot of recv (as NCCL allows).
void gather_all(MPI_Comm comm, int size, int rank, const CommBuffer& send, const CommBuffer& recv,
                MPI_Request* request) {
  check_same_format(send, recv, "MPI_Allgather");
  check_counts(static_cast<size_t>(size), send.count(), recv.count(), "MPI_Allgather");
  const void* src = send.data() == recv.window(static_cast<size_t>(rank) * send.count(), 0).data()
                        ? MPI_IN_PLACE
                        : send.data();
  const int count = count_of(send.count());
  const MPI_Datatype type = datatype_of(send);
  if (request)
    TRIDENT_MPI(MPI_Iallgather(src, count, type, recv.data(), count, type, comm, request));
  else
    TRIDENT_MPI(MPI_Allgather(src, count, type, recv.data(), count, type, comm));
}

}  // namespace

void MpiCommunicator::allgather(CommBuffer send, CommBuffer recv) {
  gather_all(comm_, size_, rank_, send, recv, nullptr);
}

Request MpiCommunicator::iallgather(CommBuffer send, CommBuffer recv) {
  auto r = std::make_unique<MpiRequest>();
  gather_all(comm_, size_, rank_, send, recv, &r->request);
  return Request(std::move(r));
}

void MpiCommunicator::broadcast(CommBuffer buf, int root) {
  if (size_ == 1) return;
  TRIDENT_MPI(MPI_Bcast(buf.data(), count_of(buf.count()), datatype_of(buf), root, comm_));
}

void MpiCommunicator::send(CommBuffer buf, int peer, int tag) {
  TRIDENT_MPI(MPI_Send(buf.data(), count_of(buf.count()), datatype_of(buf), peer, tag, comm_));
}

void MpiCommunicator::recv(CommBuffer buf, int peer, int tag) {
  TRIDENT_MPI(MPI_Recv(buf.data(), count_of(buf.count()), datatype_of(buf), peer, tag, comm_,
                       MPI_STATUS_IGNORE));
}

Request MpiCommunicator::isend(CommBuffer buf, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>();
  TRIDENT_MPI(MPI_Isend(buf.data(), count_of(buf.count()), datatype_of(buf), peer, tag, comm_,
                        &r->request));
  return Request(std::move(r));
}

Request MpiCommunicator::irecv(CommBuffer buf, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>();
  TRIDENT_MPI(MPI_Irecv(buf.data(), count_of(buf.count()), datatype_of(buf), peer, tag, comm_,
                        &r->request));
  return Request(std::move(r));
}

}  // namespace trident
