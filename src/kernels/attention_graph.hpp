// Fused causal attention as a graph of cuDNN's backend operations, in plain C++: built here, held
// to the tiled attention by a host evaluator, and handed to cuDNN by kernels/cudnn_attention.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trident::kernels {

// cuDNN fuses attention (flash attention: no [T, T] tensor in memory) when an operation graph has
// the shape it knows: matmuls, pointwise operations, reductions and transposes over 4-D tensors
// [batch, head, row, column]. This file writes those graphs for trident's layout (packed qkv,
// kernels/attention.hpp) as data, so that everything but cuDNN's acceptance of them is tested on
// CPUs: evaluate_attention_graph runs a graph in double precision and a test compares it with the
// tiled attention, forward and backward, for multi-head and grouped-query attention.

// A tensor's element type: the run's 16-bit storage type (bf16 or fp16, given when the graph is
// handed to cuDNN), fp32, or the index and predicate types of the causal mask.
enum class GraphType { kStored, kFloat, kInt32, kBool };

struct GraphTensor {
  std::string name;
  int64_t uid = 0;
  std::array<int64_t, 4> dims{}, strides{};  // in elements
  GraphType type = GraphType::kFloat;
  bool is_virtual = true;  // only inside cuDNN's fused kernel; else memory the caller binds by uid
  bool by_value = false;   // a scalar passed by value at execution (dims and strides all 1)
  float value = 0.0f;      // the by-value scalar
};

// Operations, with cuDNN's meaning: y = x op b elementwise (b broadcast where its dimension is 1,
// or repeated in groups where it divides y's: a key/value head serves NH / KVH query heads);
// kSelect: y = t ? x : b; kGenIndex: y = the index along `axis`; reductions sum (or take the
// maximum) over the axes where y's dimension is 1 and over the groups where it divides x's;
// kMatmul: y = x b per [batch, head] on the last two axes; kReshape: y is x with dimensions and
// strides permuted (a transpose, no data moved); kIdentity: y = x (a copy into another layout
// and type).
enum class GraphOpKind {
  kMatmul,
  kReshape,
  kReduceAdd,
  kReduceMax,
  kMul,
  kAdd,
  kSub,
  kDiv,
  kExp,
  kLog,
  kCmpGe,
  kGenIndex,
  kSelect,
  kIdentity
};

struct GraphOp {
  GraphOpKind kind;
  int x = -1, b = -1, t = -1;  // indices into the graph's tensors; -1 where unused
  int y = -1;
  int axis = 0;  // kGenIndex
};

struct AttentionGraph {
  std::vector<GraphTensor> tensors;
  std::vector<GraphOp> ops;
  const GraphTensor& tensor(int64_t uid) const;  // throws when no tensor has `uid`
};

// The uids of the tensors a caller binds to memory (or, for by-value scalars, to a host float).
enum AttentionUid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidOut,
  kUidStats,  // each query row's log-sum-exp: trident's lse, [B, NH, T, 1]
  kUidDout,
  kUidDq,
  kUidDk,
  kUidDv,
  kUidRowDot,  // backward's dout . out per query row, [B, NH, T, 1] fp32 the caller provides
  kUidScale,   // by value: 1 / sqrt(HS)
  kUidMaskValue,
  kUidOne,     // by value: 1
  kUidDqSums,  // backward's fp32 sums of dq, [B, NH, T, HS] dense, the caller provides (zeroed)
  kFirstVirtualUid = 100
};

// One attention call's shape: B sequences of T tokens, NH query heads and KVH key/value heads of
// HS channels; the leading dimensions (elements between rows) of qkv, out, dout and dqkv. q of
// head h is bound at qkv + h HS columns through the strides, so the caller binds kUidQ to qkv,
// kUidK to qkv + NH HS, kUidV to qkv + (NH + KVH) HS, and likewise dq, dk and dv in dqkv.
struct AttentionGraphShape {
  int B, T, NH, KVH, HS;
  int64_t ld_qkv, ld_out, ld_dout, ld_dqkv;
};

// out and stats from q, k and v; the causal mask from generated row and column indices.
AttentionGraph attention_forward_graph(const AttentionGraphShape& s);
// dq, dk and dv (and the row dots) from q, k, v, out, dout and stats.
AttentionGraph attention_backward_graph(const AttentionGraphShape& s);

// Runs `graph` on the host in double precision, reading each input and writing each output that
// is neither virtual nor by value through its strides at memory[uid] (stored values as fp32).
void evaluate_attention_graph(const AttentionGraph& graph, const std::map<int64_t, float*>& memory);

}  // namespace trident::kernels
