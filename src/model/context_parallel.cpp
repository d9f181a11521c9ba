// Context parallelism: the balanced chunks' attention parts, and the ring and all-gather that
// bring every rank's keys and values to every rank's queries.
#include "model/context_parallel.hpp"

#include <stdexcept>
#include <string>

#include "kernels/cast.hpp"
#include "kernels/elements.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/rope.hpp"

namespace trident {

using kernels::AttentionPart;
using kernels::mat_of;
using kernels::MatOf;

std::vector<AttentionPart> context_parts(const ContextSplit& split, int source) {
  const int c = split.chunk(), r = split.rank, n = split.local();
  if (!split.balanced) {  // one block each: causal against itself, whole against earlier ones
    if (source == r) return {{0, n, 0, n, 0, false}};
    if (source < r) return {{0, n, 0, n, n, true}};
    return {};
  }
  if (source == r)  // each chunk against itself (causal), then the late chunk against the early
    return {{0, c, 0, c, 0, false}, {c, c, c, c, 0, false}, {c, c, 0, c, split.local(), true}};
  if (source < r)  // both chunks come after the source's early chunk and before its late one
    return {{0, 2 * c, 0, c, c, true}};
  // source > r: only the late chunk comes after either of the source's chunks
  return {{c, c, 0, 2 * c, 2 * c, true}};
}

ContextAttentionElements context_attention_elements(const ContextSplit& split, CpComm comm, int B,
                                                    int NH, int KVH, int HS) {
  const size_t rows = static_cast<size_t>(B) * split.local();
  const size_t q = rows * NH * HS, kv = rows * 2 * KVH * HS;
  if (comm == CpComm::kRing) return {2 * kv, q + 3 * kv};
  return {split.cp * kv, q + (split.cp + 1) * kv};
}

namespace {

constexpr int kTagKeyValues = 7101;
constexpr int kTagKeyValueGrads = 7102;

// The k | v columns of qkv copied into `kv` (a chunk's keys and values, as they travel).
template <class E>
void copy_key_values(const Exec& exec, const MatOf<E>& kv, const MatOf<E>& qkv,
                     const kernels::AttentionShape& s) {
  kernels::copy_columns<E>(exec, kv, 0, qkv, s.NH * s.HS, 2 * s.kv_heads() * s.HS);
}

// A rank's T / cp rows must be two whole chunks.
void check_chunks(const ContextSplit& split) {
  if (split.T % (2 * split.cp) != 0)
    throw std::logic_error("ContextAttention: " + std::to_string(split.T) +
                           " tokens do not cut into 2 cp = " + std::to_string(2 * split.cp) +
                           " chunks");
}

}  // namespace

ContextAttention::ContextAttention(Communicator* comm, int cp, int rank, CpComm how, CpSplit cut)
    : comm_(comm), cp_(cp), rank_(rank), how_(how), cut_(cut) {
  if (cp > 1 && (comm == nullptr || comm->size() != cp || comm->rank() != rank))
    throw std::logic_error("ContextAttention: the communicator is not the cp group");
}

void ContextAttention::forward(const Exec& exec, const StoredTensor& out, const View1& lse,
                               const Vec& scratch, const StoredTensor& qkv,
                               const kernels::AttentionShape& shape, const StoredTensor& kv,
                               kernels::AttentionTiles tiles) const {
  const int cp = cp_, r = rank_, next = (r + 1) % cp, prev = (r + cp - 1) % cp;
  const ContextSplit chunks = split(shape.T);
  check_chunks(chunks);
  const size_t N = static_cast<size_t>(shape.B) * shape.T;
  const int KVW = 2 * shape.kv_heads() * shape.HS;
  const size_t n_kv = N * KVW;
  kernels::with_elements(qkv.format, [&](auto e) {
    using E = decltype(e);
    const MatOf<E> packed = mat_of<E>(qkv, N, (shape.NH * shape.HS) + KVW);
    const MatOf<E> o = mat_of<E>(out, N, static_cast<size_t>(shape.NH) * shape.HS);
    auto slot = [&](int i) { return kv.window(i * n_kv, n_kv); };
    auto attend = [&](const StoredTensor& chunk, int source) {
      for (const AttentionPart& part : context_parts(chunks, source))
        kernels::attention_forward_part<E>(exec, o, lse, scratch, packed, mat_of<E>(chunk, N, KVW),
                                           shape, part, tiles);
    };
    if (how_ == CpComm::kAllgather) {
      copy_key_values<E>(exec, mat_of<E>(slot(r), N, KVW), packed, shape);
      exec.fence();
      if (cp > 1) {
        ScopedPhase phase(timer_, Phase::kCpComm);
        comm_->allgather(CommBuffer(slot(r)), CommBuffer(kv));
      }
      bytes_sent_ += (cp - 1) * n_kv * bytes_of(qkv.format);
      for (int i = 0; i < cp; ++i) attend(slot((r + cp - i) % cp), (r + cp - i) % cp);
      return;
    }
    copy_key_values<E>(exec, mat_of<E>(slot(0), N, KVW), packed, shape);
    for (int i = 0; i < cp; ++i) {
      const StoredTensor held = slot(i % 2), arriving = slot((i + 1) % 2);
      Request sent, received;
      exec.fence();  // held is complete, and nothing reads arriving any more
      if (i + 1 < cp) {
        received = comm_->irecv(CommBuffer(arriving), prev, kTagKeyValues);
        sent = comm_->isend(CommBuffer(held), next, kTagKeyValues);
        bytes_sent_ += n_kv * bytes_of(qkv.format);
      }
      attend(held, (r + cp - i) % cp);
      ScopedPhase phase(timer_, Phase::kCpComm);
      sent.wait();
      received.wait();
    }
  });
}

void ContextAttention::backward(const Exec& exec, const StoredTensor& dqkv, const Vec& scratch,
                                const StoredTensor& dout, const StoredTensor& qkv,
                                const StoredTensor& out, const View1& lse,
                                const kernels::AttentionShape& shape, const StoredTensor& kv,
                                const View1& sums, kernels::AttentionTiles tiles) const {
  const int cp = cp_, r = rank_, next = (r + 1) % cp, prev = (r + cp - 1) % cp;
  const ContextSplit chunks = split(shape.T);
  check_chunks(chunks);
  const size_t N = static_cast<size_t>(shape.B) * shape.T;
  const int C = shape.NH * shape.HS, KVW = 2 * shape.kv_heads() * shape.HS;
  const size_t n_kv = N * KVW, n_q = N * C;
  // sums: dq [N, C], then the key/value gradients: partial sums (ring: two alternating, and the
  // one arriving; all-gather: one per source rank, and this rank's total).
  const View1 dq(sums.data(), n_q);
  auto grads = [&](int i) { return View1(sums.data() + n_q + i * n_kv, n_kv); };
  kernels::with_elements(qkv.format, [&](auto e) {
    using E = decltype(e);
    const MatOf<E> packed = mat_of<E>(qkv, N, C + KVW), d = mat_of<E>(dqkv, N, C + KVW);
    const MatOf<E> o = mat_of<E>(out, N, C), g = mat_of<E>(dout, N, C);
    auto slot = [&](int i) { return kv.window(i * n_kv, n_kv); };
    auto attend = [&](const StoredTensor& chunk, int source, const View1& dkv) {
      const kernels::AttentionGradSums to{dq.data(), C, dkv.data(), KVW};
      for (const AttentionPart& part : context_parts(chunks, source))
        kernels::attention_backward_part<E>(exec, to, scratch, g, packed, mat_of<E>(chunk, N, KVW),
                                            o, lse, shape, part, tiles);
    };
    Kokkos::deep_copy(exec, dq, 0.0f);
    View1 own;  // this rank's key/value gradients, summed over every rank's queries
    if (how_ == CpComm::kAllgather) {
      copy_key_values<E>(exec, mat_of<E>(slot(r), N, KVW), packed, shape);
      const View1 every(sums.data() + n_q, cp * n_kv);
      own = grads(cp);
      Kokkos::deep_copy(exec, every, 0.0f);
      exec.fence();
      if (cp > 1) {
        ScopedPhase phase(timer_, Phase::kCpComm);
        comm_->allgather(CommBuffer(slot(r)), CommBuffer(kv));
      }
      for (int i = 0; i < cp; ++i) {
        const int source = (r + cp - i) % cp;
        attend(slot(source), source, grads(source));
      }
      exec.fence();
      if (cp > 1) {
        ScopedPhase phase(timer_, Phase::kCpComm);
        comm_->reduce_scatter_sum(CommBuffer(every), CommBuffer(own));
      } else {
        Kokkos::deep_copy(exec, own, grads(0));
      }
      bytes_sent_ += (cp - 1) * n_kv * (bytes_of(qkv.format) + sizeof(float));
    } else {
      copy_key_values<E>(exec, mat_of<E>(slot(0), N, KVW), packed, shape);
      const View1 arriving_grads = grads(2);
      Request grads_sent[2];
      for (int i = 0; i < cp; ++i) {
        const StoredTensor held = slot(i % 2), arriving = slot((i + 1) % 2);
        const View1 partial = grads(i % 2);
        Request sent, received, grads_received;
        {
          ScopedPhase phase(timer_, Phase::kCpComm);
          grads_sent[i % 2].wait();  // partial's previous sums have left
        }
        exec.fence();
        if (i + 1 < cp) {
          received = comm_->irecv(CommBuffer(arriving), prev, kTagKeyValues);
          sent = comm_->isend(CommBuffer(held), next, kTagKeyValues);
          bytes_sent_ += n_kv * bytes_of(qkv.format);
        }
        // The held chunk's gradients from the ranks before this one on the ring.
        if (i > 0)
          grads_received = comm_->irecv(CommBuffer(arriving_grads), prev, kTagKeyValueGrads);
        Kokkos::deep_copy(exec, partial, 0.0f);
        attend(held, (r + cp - i) % cp, partial);
        if (i > 0) {
          {
            ScopedPhase phase(timer_, Phase::kCpComm);
            grads_received.wait();
          }
          kernels::add_values(exec, partial, arriving_grads);
        }
        if (cp > 1) {
          exec.fence();
          grads_sent[i % 2] = comm_->isend(CommBuffer(partial), next, kTagKeyValueGrads);
          bytes_sent_ += n_kv * sizeof(float);
        }
        ScopedPhase phase(timer_, Phase::kCpComm);
        sent.wait();
        received.wait();
      }
      own = cp > 1 ? arriving_grads : grads(0);
      ScopedPhase phase(timer_, Phase::kCpComm);
      if (cp > 1) comm_->recv(CommBuffer(own), prev, kTagKeyValueGrads);
      for (Request& request : grads_sent) request.wait();
    }
    kernels::store_columns<E>(exec, d, 0, ConstMat(dq.data(), N, C), C);
    kernels::store_columns<E>(exec, d, C, ConstMat(own.data(), N, KVW), KVW);
  });
}

}  // namespace trident
