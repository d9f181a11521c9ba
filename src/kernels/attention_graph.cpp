// Fused causal attention's cuDNN operation graphs, written as data, and their host evaluator.
#include "kernels/attention_graph.hpp"

#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace trident::kernels {

using Dims = std::array<int64_t, 4>;

const GraphTensor& AttentionGraph::tensor(int64_t uid) const {
  for (const GraphTensor& t : tensors)
    if (t.uid == uid) return t;
  throw std::logic_error("attention graph: no tensor with uid " + std::to_string(uid));
}

namespace {

Dims dense_strides(const Dims& dims) {
  Dims strides{};
  int64_t step = 1;
  for (int a = 3; a >= 0; --a) {
    strides[a] = step;
    step *= dims[a];
  }
  return strides;
}

// The last two axes swapped: a transpose's dimensions and strides over the same memory.
GraphTensor transposed(const GraphTensor& t) {
  GraphTensor out = t;
  std::swap(out.dims[2], out.dims[3]);
  std::swap(out.strides[2], out.strides[3]);
  return out;
}

// Appends tensors and operations; virtual tensors get fresh uids and dense strides.
class GraphWriter {
 public:
  explicit GraphWriter(AttentionGraph& graph) : graph_(graph) {}

  int bound(std::string name, int64_t uid, Dims dims, Dims strides, GraphType type) {
    GraphTensor t;
    t.name = std::move(name);
    t.uid = uid;
    t.dims = dims;
    t.strides = strides;
    t.type = type;
    t.is_virtual = false;
    return add(std::move(t));
  }
  int scalar(std::string name, int64_t uid, float value) {
    GraphTensor t;
    t.name = std::move(name);
    t.uid = uid;
    t.dims = t.strides = Dims{1, 1, 1, 1};
    t.is_virtual = false;
    t.by_value = true;
    t.value = value;
    return add(std::move(t));
  }
  int temporary(std::string name, Dims dims, GraphType type = GraphType::kFloat) {
    GraphTensor t;
    t.name = std::move(name);
    t.uid = next_uid_++;
    t.dims = dims;
    t.strides = dense_strides(dims);
    t.type = type;
    return add(std::move(t));
  }
  // The transpose of tensor x's last two axes, as a reshape into a virtual tensor of `type`.
  int transpose(int x, std::string name, GraphType type) {
    GraphTensor t = transposed(graph_.tensors[x]);
    t.name = std::move(name);
    t.type = type;
    t.uid = next_uid_++;
    t.is_virtual = true;
    const int y = add(std::move(t));
    graph_.ops.push_back({GraphOpKind::kReshape, x, -1, -1, y, 0});
    return y;
  }
  int op(GraphOpKind kind, int x, int b, int y, int t = -1, int axis = 0) {
    graph_.ops.push_back({kind, x, b, t, y, axis});
    return y;
  }
  const GraphTensor& operator[](int i) const { return graph_.tensors[i]; }

 private:
  int add(GraphTensor t) {
    graph_.tensors.push_back(std::move(t));
    return static_cast<int>(graph_.tensors.size()) - 1;
  }
  AttentionGraph& graph_;
  int64_t next_uid_ = kFirstVirtualUid;
};

// A head-major view [B, heads, T, HS] of `heads` heads of HS columns in rows of `ld` elements.
Dims head_strides(const AttentionGraphShape& s, int64_t ld) {
  return {static_cast<int64_t>(s.T) * ld, s.HS, ld, 1};
}
// The same heads transposed, [B, heads, HS, T]: how cuDNN takes k in q k^T (and v in dout v^T).
Dims transposed_head_strides(const AttentionGraphShape& s, int64_t ld) {
  return {static_cast<int64_t>(s.T) * ld, s.HS, 1, ld};
}
Dims transposed_heads_dims(const AttentionGraphShape& s, int heads) {
  return {s.B, heads, s.HS, s.T};
}
Dims heads_dims(const AttentionGraphShape& s, int heads) {
  return {s.B, heads, s.T, s.HS};
}
Dims row_dims(const AttentionGraphShape& s) {
  return {s.B, s.NH, s.T, 1};
}
Dims score_dims(const AttentionGraphShape& s) {
  return {s.B, s.NH, s.T, s.T};
}

void check_shape(const AttentionGraphShape& s) {
  if (s.B < 1 || s.T < 1 || s.NH < 1 || s.KVH < 1 || s.HS < 1 || s.NH % s.KVH != 0)
    throw std::invalid_argument(
        "attention graph: B, T, NH, KVH and HS must be positive and KVH "
        "must divide NH");
}

// Causal, scaled scores q k^T / sqrt(HS), masked above the diagonal: what forward and backward
// share. The masked scores' tensor, and the scale's (one tensor per uid in a graph).
struct MaskedScores {
  int scores, scale;
};
MaskedScores masked_scores(GraphWriter& w, const AttentionGraphShape& s, int q, int kt) {
  const int scores = w.op(GraphOpKind::kMatmul, q, kt, w.temporary("scores", score_dims(s)));
  const int scale = w.scalar("scale", kUidScale, 1.0f / std::sqrt(static_cast<float>(s.HS)));
  const int scaled =
      w.op(GraphOpKind::kMul, scores, scale, w.temporary("scaled_scores", score_dims(s)));
  const int row = w.op(GraphOpKind::kGenIndex, scaled, -1,
                       w.temporary("row_index", score_dims(s), GraphType::kInt32), -1, 2);
  const int col = w.op(GraphOpKind::kGenIndex, scaled, -1,
                       w.temporary("column_index", score_dims(s), GraphType::kInt32), -1, 3);
  const int keep =
      w.op(GraphOpKind::kCmpGe, row, col, w.temporary("causal", score_dims(s), GraphType::kBool));
  const int masked_value =
      w.scalar("mask_value", kUidMaskValue, std::numeric_limits<float>::lowest());
  return {w.op(GraphOpKind::kSelect, scaled, masked_value,
               w.temporary("masked_scores", score_dims(s)), keep),
          scale};
}

// y = x b into key/value heads' tensor y: directly without groups, else per query head and then
// summed over each group of NH / KVH heads (GQA: a key/value head's gradient sums those of the
// query heads it serves).
void matmul_into_kv_heads(GraphWriter& w, const AttentionGraphShape& s, int x, int b, int y,
                          const std::string& name) {
  if (s.NH == s.KVH) {
    w.op(GraphOpKind::kMatmul, x, b, y);
    return;
  }
  const int per_query_head =
      w.temporary(name + "_per_query_head", heads_dims(s, s.NH), GraphType::kStored);
  w.op(GraphOpKind::kReduceAdd, w.op(GraphOpKind::kMatmul, x, b, per_query_head), -1, y);
}

}  // namespace

AttentionGraph attention_forward_graph(const AttentionGraphShape& s) {
  check_shape(s);
  AttentionGraph graph;
  GraphWriter w(graph);
  const int q =
      w.bound("q", kUidQ, heads_dims(s, s.NH), head_strides(s, s.ld_qkv), GraphType::kStored);
  // cuDNN takes k as k^T: the same memory through transposed strides.
  const int kt = w.bound("k_transposed", kUidK, transposed_heads_dims(s, s.KVH),
                         transposed_head_strides(s, s.ld_qkv), GraphType::kStored);
  const int v =
      w.bound("v", kUidV, heads_dims(s, s.KVH), head_strides(s, s.ld_qkv), GraphType::kStored);
  const int masked = masked_scores(w, s, q, kt).scores;
  // The softmax with its statistics, as cuDNN's flash attention recognises it.
  const int row_max = w.op(GraphOpKind::kReduceMax, masked, -1, w.temporary("max", row_dims(s)));
  const int shifted =
      w.op(GraphOpKind::kSub, masked, row_max, w.temporary("shifted", score_dims(s)));
  const int exps = w.op(GraphOpKind::kExp, shifted, -1, w.temporary("exp", score_dims(s)));
  const int sums = w.op(GraphOpKind::kReduceAdd, exps, -1, w.temporary("sum", row_dims(s)));
  const int log_sums = w.op(GraphOpKind::kLog, sums, -1, w.temporary("log_sum", row_dims(s)));
  const int stats =
      w.bound("stats", kUidStats, row_dims(s), dense_strides(row_dims(s)), GraphType::kFloat);
  w.op(GraphOpKind::kAdd, row_max, log_sums, stats);
  // p in the storage type: what cuDNN's fused kernel multiplies v by.
  const int probs =
      w.op(GraphOpKind::kDiv, exps, sums, w.temporary("probs", score_dims(s), GraphType::kStored));
  const int out =
      w.bound("out", kUidOut, heads_dims(s, s.NH), head_strides(s, s.ld_out), GraphType::kStored);
  w.op(GraphOpKind::kMatmul, probs, v, out);
  return graph;
}

AttentionGraph attention_backward_graph(const AttentionGraphShape& s) {
  check_shape(s);
  AttentionGraph graph;
  GraphWriter w(graph);
  const Dims q_dims = heads_dims(s, s.NH), kv_dims = heads_dims(s, s.KVH);
  const int q = w.bound("q", kUidQ, q_dims, head_strides(s, s.ld_qkv), GraphType::kStored);
  const int kt = w.bound("k_transposed", kUidK, transposed_heads_dims(s, s.KVH),
                         transposed_head_strides(s, s.ld_qkv), GraphType::kStored);
  const int vt = w.bound("v_transposed", kUidV, transposed_heads_dims(s, s.KVH),
                         transposed_head_strides(s, s.ld_qkv), GraphType::kStored);
  const int out = w.bound("out", kUidOut, q_dims, head_strides(s, s.ld_out), GraphType::kStored);
  const int dout =
      w.bound("dout", kUidDout, q_dims, head_strides(s, s.ld_dout), GraphType::kStored);
  const int stats =
      w.bound("stats", kUidStats, row_dims(s), dense_strides(row_dims(s)), GraphType::kFloat);
  // dout . out per query row: the softmax's backward subtracts it from every dp of the row.
  // cuDNN's pattern multiplies the sums by one (a dropout scale where there is dropout).
  const int products = w.op(GraphOpKind::kMul, dout, out, w.temporary("dout_out", q_dims));
  const int sums =
      w.op(GraphOpKind::kReduceAdd, products, -1, w.temporary("row_sums", row_dims(s)));
  const int row_dot =
      w.bound("row_dot", kUidRowDot, row_dims(s), dense_strides(row_dims(s)), GraphType::kFloat);
  w.op(GraphOpKind::kMul, sums, w.scalar("one", kUidOne, 1.0f), row_dot);
  // The probabilities again, from the scores and forward's log-sum-exp.
  const MaskedScores masked = masked_scores(w, s, q, kt);
  const int shifted =
      w.op(GraphOpKind::kSub, masked.scores, stats, w.temporary("shifted", score_dims(s)));
  const int probs = w.op(GraphOpKind::kExp, shifted, -1, w.temporary("probs", score_dims(s)));
  // dv = p^T dout (summed over a group's query heads).
  const int dv = w.bound("dv", kUidDv, kv_dims, head_strides(s, s.ld_dqkv), GraphType::kStored);
  matmul_into_kv_heads(w, s, w.transpose(probs, "probs_transposed", GraphType::kStored), dout, dv,
                       "dv");
  // ds = p (dp - dout . out) / sqrt(HS), dp = dout v^T.
  const int dp = w.op(GraphOpKind::kMatmul, dout, vt, w.temporary("dp", score_dims(s)));
  const int centred =
      w.op(GraphOpKind::kSub, dp, row_dot, w.temporary("dp_centred", score_dims(s)));
  const int dscores =
      w.op(GraphOpKind::kMul, centred, probs, w.temporary("dscores", score_dims(s)));
  const int ds = w.op(GraphOpKind::kMul, dscores, masked.scale, w.temporary("ds", score_dims(s)));
  // dq = ds k, summed in fp32 memory the caller provides (how cuDNN's backward is told to use its
  // workspace-saving kernel) and copied into dq; dk = ds^T q (summed over a group's query heads).
  const int k = w.transpose(kt, "k", GraphType::kStored);
  const int dq_sums =
      w.bound("dq_sums", kUidDqSums, q_dims, dense_strides(q_dims), GraphType::kFloat);
  w.op(GraphOpKind::kMatmul, ds, k, dq_sums);
  const int dq = w.bound("dq", kUidDq, q_dims, head_strides(s, s.ld_dqkv), GraphType::kStored);
  w.op(GraphOpKind::kIdentity, dq_sums, -1, dq);
  const int dk = w.bound("dk", kUidDk, kv_dims, head_strides(s, s.ld_dqkv), GraphType::kStored);
  matmul_into_kv_heads(w, s, w.transpose(ds, "ds_transposed", GraphType::kStored), q, dk, "dk");
  return graph;
}

namespace {

// A tensor's values in the evaluator: dense, row-major over its dimensions.
struct Values {
  Dims dims{};
  std::vector<double> data;
  double& at(const Dims& i) {
    return data[((i[0] * dims[1] + i[1]) * dims[2] + i[2]) * dims[3] + i[3]];
  }
};

template <class Visit>
void for_each_index(const Dims& dims, Visit visit) {
  Dims i{};
  for (i[0] = 0; i[0] < dims[0]; ++i[0])
    for (i[1] = 0; i[1] < dims[1]; ++i[1])
      for (i[2] = 0; i[2] < dims[2]; ++i[2])
        for (i[3] = 0; i[3] < dims[3]; ++i[3]) visit(i);
}

// Where index `i` along an axis of `size` falls in one of `from`: the same index, 0 for a
// broadcast axis of 1, or its group's when `from` divides `size` (GQA's key/value heads, or a
// grouped reduction's output).
int64_t map_axis(int64_t i, int64_t size, int64_t from) {
  if (from == size) return i;
  if (from == 1) return 0;
  if (size % from == 0) return i / (size / from);
  throw std::logic_error("attention graph: dimensions that do not broadcast");
}
Dims map_index(const Dims& i, const Dims& dims, const Dims& from) {
  Dims out{};
  for (int a = 0; a < 4; ++a) out[a] = map_axis(i[a], dims[a], from[a]);
  return out;
}

double pointwise(GraphOpKind kind, double x, double b) {
  switch (kind) {
    case GraphOpKind::kMul:
      return x * b;
    case GraphOpKind::kAdd:
      return x + b;
    case GraphOpKind::kSub:
      return x - b;
    case GraphOpKind::kDiv:
      return x / b;
    case GraphOpKind::kExp:
      return std::exp(x);
    case GraphOpKind::kLog:
      return std::log(x);
    case GraphOpKind::kCmpGe:
      return x >= b ? 1.0 : 0.0;
    case GraphOpKind::kIdentity:
      return x;
    default:
      throw std::logic_error("attention graph: not a pointwise operation");
  }
}

class Evaluator {
 public:
  Evaluator(const AttentionGraph& graph, const std::map<int64_t, float*>& memory)
      : graph_(graph), memory_(memory), values_(graph.tensors.size()) {}

  void run() {
    std::vector<bool> produced(graph_.tensors.size(), false);
    for (const GraphOp& op : graph_.ops) produced[op.y] = true;
    for (size_t t = 0; t < graph_.tensors.size(); ++t)
      if (!produced[t]) load(static_cast<int>(t));
    for (const GraphOp& op : graph_.ops) {
      values_[op.y].dims = graph_.tensors[op.y].dims;
      values_[op.y].data.assign(count(op.y), 0.0);
      apply(op);
      if (!graph_.tensors[op.y].is_virtual) store(op.y);
    }
  }

 private:
  size_t count(int t) const {
    const Dims& d = graph_.tensors[t].dims;
    return static_cast<size_t>(d[0] * d[1] * d[2] * d[3]);
  }
  float* memory(const GraphTensor& t) const {
    const auto found = memory_.find(t.uid);
    if (found == memory_.end())
      throw std::invalid_argument("attention graph: no memory bound for " + t.name);
    return found->second;
  }
  static int64_t offset(const GraphTensor& t, const Dims& i) {
    return i[0] * t.strides[0] + i[1] * t.strides[1] + i[2] * t.strides[2] + i[3] * t.strides[3];
  }
  void load(int index) {
    const GraphTensor& t = graph_.tensors[index];
    Values& v = values_[index];
    v.dims = t.dims;
    v.data.assign(count(index), 0.0);
    if (t.by_value) {
      v.data[0] = t.value;
      return;
    }
    if (t.is_virtual) throw std::logic_error("attention graph: " + t.name + " is never written");
    const float* base = memory(t);
    for_each_index(t.dims, [&](const Dims& i) { v.at(i) = base[offset(t, i)]; });
  }
  void store(int index) {
    const GraphTensor& t = graph_.tensors[index];
    float* base = memory(t);
    Values& v = values_[index];
    for_each_index(t.dims,
                   [&](const Dims& i) { base[offset(t, i)] = static_cast<float>(v.at(i)); });
  }

  void apply(const GraphOp& op) {
    Values& y = values_[op.y];
    switch (op.kind) {
      case GraphOpKind::kMatmul:
        return matmul(values_[op.x], values_[op.b], y);
      case GraphOpKind::kReshape:
        return transpose(op);
      case GraphOpKind::kReduceAdd:
      case GraphOpKind::kReduceMax:
        return reduce(op.kind, values_[op.x], y);
      case GraphOpKind::kGenIndex:
        return for_each_index(y.dims, [&](const Dims& i) { y.at(i) = double(i[op.axis]); });
      case GraphOpKind::kSelect: {
        Values &x = values_[op.x], &b = values_[op.b], &t = values_[op.t];
        return for_each_index(y.dims, [&](const Dims& i) {
          y.at(i) = t.at(map_index(i, y.dims, t.dims)) != 0.0 ? x.at(map_index(i, y.dims, x.dims))
                                                              : b.at(map_index(i, y.dims, b.dims));
        });
      }
      default: {
        Values& x = values_[op.x];
        Values* b = op.b >= 0 ? &values_[op.b] : nullptr;
        return for_each_index(y.dims, [&](const Dims& i) {
          y.at(i) = pointwise(op.kind, x.at(map_index(i, y.dims, x.dims)),
                              b ? b->at(map_index(i, y.dims, b->dims)) : 0.0);
        });
      }
    }
  }
  static void matmul(Values& a, Values& b, Values& y) {
    const int64_t inner = a.dims[3];
    if (b.dims[2] != inner || a.dims[2] != y.dims[2] || b.dims[3] != y.dims[3])
      throw std::logic_error("attention graph: matmul dimensions disagree");
    for_each_index(y.dims, [&](const Dims& i) {
      const int64_t batch_a = map_axis(i[0], y.dims[0], a.dims[0]);
      const int64_t batch_b = map_axis(i[0], y.dims[0], b.dims[0]);
      const int64_t head_a = map_axis(i[1], y.dims[1], a.dims[1]);
      const int64_t head_b = map_axis(i[1], y.dims[1], b.dims[1]);
      double sum = 0.0;
      for (int64_t k = 0; k < inner; ++k)
        sum += a.at({batch_a, head_a, i[2], k}) * b.at({batch_b, head_b, k, i[3]});
      y.at(i) = sum;
    });
  }
  void transpose(const GraphOp& op) {
    const GraphTensor &from = graph_.tensors[op.x], &to = graph_.tensors[op.y];
    if (from.dims[2] != to.dims[3] || from.dims[3] != to.dims[2] ||
        from.strides[2] != to.strides[3] || from.strides[3] != to.strides[2])
      throw std::logic_error("attention graph: a reshape that is not a transpose");
    Values &x = values_[op.x], &y = values_[op.y];
    for_each_index(y.dims, [&](const Dims& i) { y.at(i) = x.at({i[0], i[1], i[3], i[2]}); });
  }
  static void reduce(GraphOpKind kind, Values& x, Values& y) {
    const bool max = kind == GraphOpKind::kReduceMax;
    std::fill(y.data.begin(), y.data.end(), max ? -std::numeric_limits<double>::infinity() : 0.0);
    for_each_index(x.dims, [&](const Dims& i) {
      double& out = y.at(map_index(i, x.dims, y.dims));
      out = max ? std::max(out, x.at(i)) : out + x.at(i);
    });
  }

  const AttentionGraph& graph_;
  const std::map<int64_t, float*>& memory_;
  std::vector<Values> values_;
};

}  // namespace

void evaluate_attention_graph(const AttentionGraph& graph,
                              const std::map<int64_t, float*>& memory) {
  Evaluator(graph, memory).run();
}

}  // namespace trident::kernels
