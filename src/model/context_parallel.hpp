// Context parallelism: each sequence split over the cp ranks in 2 cp balanced causal chunks, and
// attention across the chunks, key/value chunks passed around a ring or all-gathered.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/comm.hpp"
#include "core/stored.hpp"
#include "core/timer.hpp"
#include "core/types.hpp"
#include "kernels/attention.hpp"
#include "kernels/context_split.hpp"
#include "model/context_options.hpp"

namespace trident {

using kernels::ContextSplit;

// The parts (kernels::AttentionPart) of this rank's queries against `source`'s key/value chunks
// (balanced; contiguous blocks: itself causally, an earlier rank's whole, a later rank's none),
// rows counted within each rank's T / cp: the diagonal step (source == rank: each chunk against
// itself, causal, then the late chunk against the early one), a lower step (source < rank: both
// chunks against the source's early chunk, every key visible) or an upper step (source > rank:
// the late chunk against both of the source's, every key visible). Each step is 2 chunk^2 score
// products, the diagonal's two causal halves included. The first part of each query row is the
// diagonal's, which starts its online softmax; every other part merges into it.
std::vector<kernels::AttentionPart> context_parts(const ContextSplit& split, int source);

// Elements of the buffers one context-parallel attention call takes, for B sequences of this
// rank's T / cp rows with NH query and KVH key/value heads of HS channels (the memory model sums
// the same numbers): key/value chunks in the storage format (the ring's two in flight, or the cp
// all-gathered) and backward's fp32 sums (dq; dk | dv partials and the one arriving on the ring,
// or every rank's before the reduce-scatter plus this rank's).
struct ContextAttentionElements {
  size_t kv = 0;    // storage format
  size_t sums = 0;  // fp32
};
ContextAttentionElements context_attention_elements(const ContextSplit& split, CpComm comm, int B,
                                                    int NH, int KVH, int HS);

// Attention of this rank's queries over the whole sequence, keys and values of the others' chunks
// arriving through `comm` (the cp group; null with cp = 1). Every rank of the group calls each
// method in the same order with the same shapes.
class ContextAttention {
 public:
  ContextAttention(Communicator* comm, int cp, int rank, CpComm how,
                   CpSplit cut = CpSplit::kBalanced);
  // Sequences of T x cp tokens of which this rank holds T.
  ContextSplit split(int T) const { return {cp_, rank_, T * cp_, cut_ == CpSplit::kBalanced}; }
  CpComm how() const { return how_; }
  // out [B*T/cp, NH HS] and lse from qkv [B*T/cp, (NH + 2 KVH) HS] (shape.T: the local T / cp
  // rows); `kv` holds context_attention_elements().kv elements in qkv's format, scratch the
  // attention scratch for shape.
  void forward(const Exec& exec, const StoredTensor& out, const View1& lse, const Vec& scratch,
               const StoredTensor& qkv, const kernels::AttentionShape& shape,
               const StoredTensor& kv, kernels::AttentionTiles tiles = {0, 0}) const;
  // dqkv (overwritten) from dout and forward's qkv, out and lse; kv as forward, sums
  // context_attention_elements().sums fp32 elements.
  void backward(const Exec& exec, const StoredTensor& dqkv, const Vec& scratch,
                const StoredTensor& dout, const StoredTensor& qkv, const StoredTensor& out,
                const View1& lse, const kernels::AttentionShape& shape, const StoredTensor& kv,
                const View1& sums, kernels::AttentionTiles tiles = {0, 0}) const;
  // Bytes this rank sent of keys, values and their gradients since construction.
  size_t bytes_sent() const { return bytes_sent_; }
  // Attributes the waits on the group (what the compute did not hide) to Phase::kCpComm; null
  // times nothing.
  void set_timer(PhaseTimer* timer) { timer_ = timer; }

 private:
  Communicator* comm_;
  int cp_, rank_;
  CpComm how_;
  CpSplit cut_;
  mutable size_t bytes_sent_ = 0;
  PhaseTimer* timer_ = nullptr;
};

}  // namespace trident
