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

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  TRIDENT_MPI(MPI_Comm_size(comm_, &size_));
  TRIDENT_MPI(MPI_Comm_rank(comm_, &rank_));
}

void MpiCommunicator::allreduce_sum(float* buf, size_t n) {
  if (size_ == 1) return;
  TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, count_of(n), MPI_FLOAT, MPI_SUM, comm_));
}

void MpiCommunicator::allreduce_max(float* buf, size_t n) {
  if (size_ == 1) return;
  TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, count_of(n), MPI_FLOAT, MPI_MAX, comm_));
}

void MpiCommunicator::allreduce_sum(double* buf, size_t n) {
  if (size_ == 1) return;
  TRIDENT_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, count_of(n), MPI_DOUBLE, MPI_SUM, comm_));
}

Request MpiCommunicator::iallreduce_sum(float* buf, size_t n) {
  if (size_ == 1) return Request();
  auto r = std::make_unique<MpiRequest>();
  TRIDENT_MPI(
      MPI_Iallreduce(MPI_IN_PLACE, buf, count_of(n), MPI_FLOAT, MPI_SUM, comm_, &r->request));
  return Request(std::move(r));
}

void MpiCommunicator::reduce_scatter_sum(const float* send, float* recv, size_t recv_count) {
  TRIDENT_MPI(
      MPI_Reduce_scatter_block(send, recv, count_of(recv_count), MPI_FLOAT, MPI_SUM, comm_));
}

namespace {

// All-gather of `count` elements of `type` per rank, blocking (request null) or not. In place
// when this rank's part already sits at its slot of recv (as NCCL allows).
template <class T>
void gather_all(MPI_Comm comm, int rank, const T* send, T* recv, size_t count, MPI_Datatype type,
                MPI_Request* request) {
  const void* src = send == recv + static_cast<size_t>(rank) * count ? MPI_IN_PLACE : send;
  if (request)
    TRIDENT_MPI(
        MPI_Iallgather(src, count_of(count), type, recv, count_of(count), type, comm, request));
  else
    TRIDENT_MPI(MPI_Allgather(src, count_of(count), type, recv, count_of(count), type, comm));
}

}  // namespace

void MpiCommunicator::allgather(const float* send, float* recv, size_t send_count) {
  gather_all(comm_, rank_, send, recv, send_count, MPI_FLOAT, nullptr);
}

Request MpiCommunicator::iallgather(const float* send, float* recv, size_t send_count) {
  auto r = std::make_unique<MpiRequest>();
  gather_all(comm_, rank_, send, recv, send_count, MPI_FLOAT, &r->request);
  return Request(std::move(r));
}

void MpiCommunicator::allgather_16(const uint16_t* send, uint16_t* recv, size_t send_count) {
  gather_all(comm_, rank_, send, recv, send_count, MPI_UINT16_T, nullptr);
}

Request MpiCommunicator::iallgather_16(const uint16_t* send, uint16_t* recv, size_t send_count) {
  auto r = std::make_unique<MpiRequest>();
  gather_all(comm_, rank_, send, recv, send_count, MPI_UINT16_T, &r->request);
  return Request(std::move(r));
}

Request MpiCommunicator::iallreduce_sum_16(uint16_t* buf, size_t n, Precision p) {
  auto r = std::make_unique<MpiRequest>();
  TRIDENT_MPI(
      MPI_Iallreduce(MPI_IN_PLACE, buf, count_of(n), MPI_UINT16_T, sum_op(p), comm_, &r->request));
  return Request(std::move(r));
}

void MpiCommunicator::reduce_scatter_sum_16(const uint16_t* send, uint16_t* recv, size_t recv_count,
                                            Precision p) {
  TRIDENT_MPI(
      MPI_Reduce_scatter_block(send, recv, count_of(recv_count), MPI_UINT16_T, sum_op(p), comm_));
}

void MpiCommunicator::broadcast(float* buf, size_t n, int root) {
  if (size_ == 1) return;
  TRIDENT_MPI(MPI_Bcast(buf, count_of(n), MPI_FLOAT, root, comm_));
}

void MpiCommunicator::send(const float* buf, size_t n, int peer, int tag) {
  TRIDENT_MPI(MPI_Send(buf, count_of(n), MPI_FLOAT, peer, tag, comm_));
}

void MpiCommunicator::recv(float* buf, size_t n, int peer, int tag) {
  TRIDENT_MPI(MPI_Recv(buf, count_of(n), MPI_FLOAT, peer, tag, comm_, MPI_STATUS_IGNORE));
}

Request MpiCommunicator::isend(const float* buf, size_t n, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>();
  TRIDENT_MPI(MPI_Isend(buf, count_of(n), MPI_FLOAT, peer, tag, comm_, &r->request));
  return Request(std::move(r));
}

Request MpiCommunicator::irecv(float* buf, size_t n, int peer, int tag) {
  auto r = std::make_unique<MpiRequest>();
  TRIDENT_MPI(MPI_Irecv(buf, count_of(n), MPI_FLOAT, peer, tag, comm_, &r->request));
  return Request(std::move(r));
}

}  // namespace trident
