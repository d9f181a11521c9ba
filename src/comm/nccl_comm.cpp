// NCCL backend of the collectives interface: per-axis communicator from an MPI-broadcast id,
// collectives on an owned CUDA stream ordered against Kokkos' by events, every call checked.
#include "comm/nccl_comm.hpp"

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <string>

#include "core/error.hpp"

namespace trident {
namespace {

constexpr const char* kNcclDebugHint = "rerun with NCCL_DEBUG=INFO for NCCL's own account";

std::string cuda_hint(cudaError_t rc) {
  switch (rc) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return "no usable GPU or driver on this node: the NCCL backend needs one GPU per rank; "
             "check CUDA_VISIBLE_DEVICES, or set parallel.backend_tp/dp/pp = 'mpi'";
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory: lower train.micro_batch_size or add pipeline stages";
    case cudaErrorIllegalAddress:
    case cudaErrorInvalidValue:
      return "a buffer is not device memory or is too short: collectives over NCCL need Views "
             "in the CUDA execution space's memory";
    default:
      return "";
  }
}

std::string nccl_hint(ncclResult_t rc) {
  switch (rc) {
    case ncclUnhandledCudaError:
      return std::string(
                 "a CUDA call inside NCCL failed: each rank needs its own visible GPU "
                 "(two ranks on one GPU cannot share a communicator); ") +
             kNcclDebugHint;
    case ncclSystemError:
      return std::string(
                 "a system call failed (sockets, shared memory: check /dev/shm is "
                 "large enough in containers); ") +
             kNcclDebugHint;
    case ncclInvalidArgument:
      return "a buffer is not device memory, or a count, peer or root is out of range";
    case ncclInvalidUsage:
      return std::string(
                 "ranks issued collectives in different orders, or a host pointer was "
                 "passed; ") +
             kNcclDebugHint;
    case ncclRemoteError:
      return "a peer rank failed or the network connection to it was lost";
    default:
      return kNcclDebugHint;
  }
}

void check_cuda(cudaError_t rc, const char* call, const char* file, int line) {
  if (rc == cudaSuccess) return;
  fatal(call, file, line, std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc),
        cuda_hint(rc));
}

void check_nccl(ncclResult_t rc, ncclComm_t comm, const char* call, const char* file, int line) {
  if (rc == ncclSuccess) return;
  std::string detail = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last && *last) detail += std::string(" (") + last + ")";
  fatal(call, file, line, detail, nccl_hint(rc));
}

// Destructors must not abort a job that is already unwinding: report and carry on.
void warn_cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess)
    std::fprintf(stderr, "trident: warning: %s failed during shutdown: %s\n", call,
                 cudaGetErrorString(rc));
}

void warn_nccl(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess)
    std::fprintf(stderr, "trident: warning: %s failed during shutdown: %s\n", call,
                 ncclGetErrorString(rc));
}

// Completes when the work enqueued on a stream before it was created has finished.
class NcclRequest final : public Request::Impl {
 public:
  explicit NcclRequest(cudaStream_t stream) {
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate",
               __FILE__, __LINE__);
    check_cuda(cudaEventRecord(event_, stream), "cudaEventRecord", __FILE__, __LINE__);
  }
  ~NcclRequest() override { warn_cuda(cudaEventDestroy(event_), "cudaEventDestroy"); }
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;
  void wait() override {
    check_cuda(cudaEventSynchronize(event_), "cudaEventSynchronize", __FILE__, __LINE__);
  }
  bool test() override {
    const cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    check_cuda(rc, "cudaEventQuery", __FILE__, __LINE__);
    return true;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

#define TRIDENT_CUDA(call) check_cuda((call), #call, __FILE__, __LINE__)
#define TRIDENT_NCCL(call) check_nccl((call), comm_, #call, __FILE__, __LINE__)

NcclCommunicator::NcclCommunicator(MPI_Comm comm) {
  TRIDENT_MPI(MPI_Comm_size(comm, &size_));
  TRIDENT_MPI(MPI_Comm_rank(comm, &rank_));
  TRIDENT_CUDA(cudaGetDevice(&device_));
  ncclUniqueId id{};
  if (rank_ == 0) TRIDENT_NCCL(ncclGetUniqueId(&id));
  TRIDENT_MPI(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, comm));
  TRIDENT_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TRIDENT_CUDA(cudaEventCreateWithFlags(&inputs_written_, cudaEventDisableTiming));
  TRIDENT_CUDA(cudaEventCreateWithFlags(&collective_done_, cudaEventDisableTiming));
  const ncclResult_t rc = ncclCommInitRank(&comm_, size_, id, rank_);
  if (rc != ncclSuccess) {
    const char* last = ncclGetLastError(nullptr);
    fatal("ncclCommInitRank(&comm_, size_, id, rank_)", __FILE__, __LINE__,
          std::string(ncclGetErrorString(rc)) + " (rank " + std::to_string(rank_) + " of " +
              std::to_string(size_) + " on CUDA device " + std::to_string(device_) + ": " +
              (last ? last : "") + ")",
          "every rank of an NCCL communicator needs its own GPU: run one rank per GPU and let "
          "Kokkos map ranks to devices; " +
              nccl_hint(rc));
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (stream_) warn_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  if (comm_) {
    warn_nccl(ncclCommFinalize(comm_), "ncclCommFinalize");
    warn_nccl(ncclCommDestroy(comm_), "ncclCommDestroy");
  }
  if (stream_) warn_cuda(cudaStreamDestroy(stream_), "cudaStreamDestroy");
  for (cudaEvent_t event : {inputs_written_, collective_done_})
    if (event) warn_cuda(cudaEventDestroy(event), "cudaEventDestroy");
}

namespace {

// The stream Kokkos launches its kernels on: the default execution space's (a CUDA build; the
// NCCL backend is never used in a host build, where this is the legacy default stream).
cudaStream_t kokkos_stream() {
#if defined(KOKKOS_ENABLE_CUDA)
  return Kokkos::DefaultExecutionSpace().cuda_stream();
#else
  return nullptr;
#endif
}

}  // namespace

void NcclCommunicator::inputs_ready() const {
  TRIDENT_CUDA(cudaEventRecord(inputs_written_, kokkos_stream()));
  TRIDENT_CUDA(cudaStreamWaitEvent(stream_, inputs_written_, 0));
}

void NcclCommunicator::finish() const {
  TRIDENT_CUDA(cudaEventRecord(collective_done_, stream_));
  TRIDENT_CUDA(cudaStreamWaitEvent(kokkos_stream(), collective_done_, 0));
}

Request NcclCommunicator::pending() const {
  return Request(std::make_unique<NcclRequest>(stream_));
}

void NcclCommunicator::check_peer(int peer, const char* call) const {
  if (peer < 0 || peer >= size_ || peer == rank_)
    fatal(call, __FILE__, __LINE__,
          "peer " + std::to_string(peer) + " on a communicator of " + std::to_string(size_) +
              " ranks (this rank is " + std::to_string(rank_) + ")",
          "point-to-point peers must be other ranks of the same axis");
}

namespace {

ncclDataType_t nccl_datatype_of(const CommBuffer& b) {
  switch (b.format()) {
    case Precision::kBf16:
      return ncclBfloat16;
    case Precision::kFp16:
      return ncclFloat16;
    case Precision::kFp32:
      break;
  }
  return ncclFloat;
}

}  // namespace

void NcclCommunicator::allreduce_sum(CommBuffer buf) {
  if (size_ == 1 || buf.count() == 0) return;
  inputs_ready();
  TRIDENT_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.count(), nccl_datatype_of(buf), ncclSum,
                             comm_, stream_));
  finish();
}

void NcclCommunicator::allreduce_max(CommBuffer buf) {
  if (size_ == 1 || buf.count() == 0) return;
  if (buf.format() != Precision::kFp32)
    fatal("ncclAllReduce(ncclMax)", __FILE__, __LINE__, "a 16-bit buffer",
          "the maximum is taken over fp32 values only");
  inputs_ready();
  TRIDENT_NCCL(
      ncclAllReduce(buf.data(), buf.data(), buf.count(), ncclFloat, ncclMax, comm_, stream_));
  finish();
}

Request NcclCommunicator::iallreduce_sum(CommBuffer buf) {
  if (size_ == 1 || buf.count() == 0) return Request();
  inputs_ready();
  TRIDENT_NCCL(ncclAllReduce(buf.data(), buf.data(), buf.count(), nccl_datatype_of(buf), ncclSum,
                             comm_, stream_));
  return pending();
}

void NcclCommunicator::reduce_scatter_sum(CommBuffer send, CommBuffer recv) {
  if (send.format() != recv.format() || send.count() != recv.count() * size_)
    fatal("ncclReduceScatter", __FILE__, __LINE__, "send is not ranks x recv of one format",
          "size the send buffer as ranks x the part");
  inputs_ready();
  TRIDENT_NCCL(ncclReduceScatter(send.data(), recv.data(), recv.count(), nccl_datatype_of(recv),
                                 ncclSum, comm_, stream_));
  finish();
}

// NCCL has no uneven reduce-scatter: one reduce per rank with a part, to that rank, grouped into
// one launch.
void NcclCommunicator::reduce_scatter_sum(CommBuffer send, CommBuffer recv,
                                          const std::vector<size_t>& counts) {
  size_t whole = 0;
  for (size_t c : counts) whole += c;
  if (send.format() != recv.format() || counts.size() != static_cast<size_t>(size_) ||
      whole != send.count() || counts[rank_] != recv.count())
    fatal("ncclReduce", __FILE__, __LINE__, "send and recv do not match the counts given",
          "give one count per rank, summing to the send buffer, this rank's the recv buffer's");
  inputs_ready();
  TRIDENT_NCCL(ncclGroupStart());
  size_t first = 0;
  for (int r = 0; r < size_; ++r) {
    if (counts[r] > 0)
      TRIDENT_NCCL(ncclReduce(send.window(first, counts[r]).data(),
                              r == rank_ ? recv.data() : nullptr, counts[r], nccl_datatype_of(recv),
                              ncclSum, r, comm_, stream_));
    first += counts[r];
  }
  TRIDENT_NCCL(ncclGroupEnd());
  finish();
}

void NcclCommunicator::allgather(CommBuffer send, CommBuffer recv) {
  enqueue_allgather(send, recv);
  finish();
}

Request NcclCommunicator::iallgather(CommBuffer send, CommBuffer recv) {
  enqueue_allgather(send, recv);
  return pending();
}

void NcclCommunicator::enqueue_allgather(const CommBuffer& send, const CommBuffer& recv) const {
  if (send.format() != recv.format() || recv.count() != send.count() * size_)
    fatal("ncclAllGather", __FILE__, __LINE__, "recv is not ranks x send of one format",
          "size the receive buffer as ranks x the part");
  inputs_ready();
  // A gather moves bits without arithmetic: bf16 and fp16 travel as their own 16-bit types.
  TRIDENT_NCCL(ncclAllGather(send.data(), recv.data(), send.count(), nccl_datatype_of(send), comm_,
                             stream_));
}

void NcclCommunicator::broadcast(CommBuffer buf, int root) {
  if (size_ == 1 || buf.count() == 0) return;
  inputs_ready();
  TRIDENT_NCCL(ncclBroadcast(buf.data(), buf.data(), buf.count(), nccl_datatype_of(buf), root,
                             comm_, stream_));
  finish();
}

// One group of a send and a receive per peer (NCCL has no all-to-all-v of its own).
void NcclCommunicator::alltoallv(CommBuffer send, const std::vector<size_t>& send_counts,
                                 CommBuffer recv, const std::vector<size_t>& recv_counts) {
  size_t sent = 0, received = 0;
  for (size_t c : send_counts) sent += c;
  for (size_t c : recv_counts) received += c;
  if (send.format() != recv.format() || send_counts.size() != static_cast<size_t>(size_) ||
      recv_counts.size() != static_cast<size_t>(size_) || sent > send.count() ||
      received > recv.count())
    fatal("ncclSend/ncclRecv all-to-all", __FILE__, __LINE__,
          "counts not one per rank, past the buffers, or buffers of two formats",
          "give one send and one receive count per rank within the buffers");
  inputs_ready();
  const ncclDataType_t type = nccl_datatype_of(send);
  TRIDENT_NCCL(ncclGroupStart());
  size_t send_at = 0, recv_at = 0;
  for (int r = 0; r < size_; ++r) {
    if (send_counts[r] > 0)
      TRIDENT_NCCL(ncclSend(send.window(send_at, send_counts[r]).data(), send_counts[r], type, r,
                            comm_, stream_));
    if (recv_counts[r] > 0)
      TRIDENT_NCCL(ncclRecv(recv.window(recv_at, recv_counts[r]).data(), recv_counts[r], type, r,
                            comm_, stream_));
    send_at += send_counts[r];
    recv_at += recv_counts[r];
  }
  TRIDENT_NCCL(ncclGroupEnd());
  finish();
}

// Each p2p call is its own group, as NCCL recommends for a single send or receive; tags are
// ignored (NCCL matches a pair's operations in issue order).
void NcclCommunicator::send(CommBuffer buf, int peer, int /*tag*/) {
  enqueue_p2p(buf, peer, true);
  finish();
}

void NcclCommunicator::recv(CommBuffer buf, int peer, int /*tag*/) {
  enqueue_p2p(buf, peer, false);
  finish();
}

Request NcclCommunicator::isend(CommBuffer buf, int peer, int /*tag*/) {
  enqueue_p2p(buf, peer, true);
  return pending();
}

Request NcclCommunicator::irecv(CommBuffer buf, int peer, int /*tag*/) {
  enqueue_p2p(buf, peer, false);
  return pending();
}

void NcclCommunicator::enqueue_p2p(const CommBuffer& buf, int peer, bool sending) const {
  check_peer(peer, sending ? "ncclSend" : "ncclRecv");
  inputs_ready();  // a send's data is written; a receive's buffer is no longer read by a kernel
  TRIDENT_NCCL(ncclGroupStart());
  if (sending)
    TRIDENT_NCCL(ncclSend(buf.data(), buf.count(), nccl_datatype_of(buf), peer, comm_, stream_));
  else
    TRIDENT_NCCL(ncclRecv(buf.data(), buf.count(), nccl_datatype_of(buf), peer, comm_, stream_));
  TRIDENT_NCCL(ncclGroupEnd());
}

}  // namespace trident
