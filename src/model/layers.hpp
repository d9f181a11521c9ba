// The layer types a GPT stage is a program over. Each holds views of its parameters and their
// gradients, and has a forward, a backward-input and a backward-weight half (zero-bubble
// schedules run the weight halves later); tensor parallelism is a property of the type
// (column-parallel, row-parallel, vocabulary-parallel) and sequence parallelism of the group it
// runs on. Activations, their gradients and parameters are tensors in the storage format (fp32,
// or bf16 / fp16 computed in fp32 registers and by 16-bit GEMMs with fp32 sums); parameter
// gradients and statistics are fp32.
#pragma once

#include <cstddef>

#include "core/precision.hpp"
#include "core/stored.hpp"
#include "core/types.hpp"
#include "kernels/attention.hpp"
#include "kernels/attention_graph.hpp"
#include "kernels/elements.hpp"
#include "model/context_parallel.hpp"
#include "model/expert_parallel.hpp"
#include "model/grad_sink.hpp"
#include "model/tensor_parallel.hpp"

namespace trident {

// The buffers a stage's layers share, each reused by every layer in turn ([N,C] unless said; the
// stored ones in the storage format).
struct LayerWorkspace {
  StoredTensor partial;    // a row-parallel output before its tp sum; gathered output gradients
  StoredTensor dinput;     // a column-parallel layer's input gradient before its tp sum
  StoredTensor gathered;   // sequence parallelism: all rows of a layer's input
  StoredTensor scattered;  // sequence parallelism: [N/tp,C] this rank's rows of a tp sum
  View1 norm_grad;      // sequence parallelism: [2C] a norm's parameter gradients before their sum
  View1 attention;      // [attention_scratch_elements(B, NH_tp, HS, T, storage)] its tiles
  View1 row_max;        // [N] vocabulary-parallel cross-entropy: each row's maximum
  View1 row_sums;       // [2N] its exp sums, then the target logits: one all-reduce for both
  View1 rope;           // rotary embeddings: [positions, HS/2, 2] cosines and sines (Llama)
  StoredTensor kv_sum;  // [N, 2 KVH HS] key/value gradients summed over their tp replicas
  // Context parallelism: key/value chunks in flight and backward's fp32 sums
  // (context_attention_elements).
  StoredTensor cp_kv;
  View1 cp_sums;
  // GPU builds: the row blocks' partial column sums of the bias and norm gradients
  // (kernels::column_partials_elements for the widest of them); empty on hosts.
  View1 column_partials;
};

// What every layer of a stage runs with.
struct LayerContext {
  Exec exec;
  Precision storage = Precision::kFp32;  // of activations, their gradients and parameters
  TensorParallel* tp = nullptr;
  LayerWorkspace* ws = nullptr;
  ExpertParallel* ep = nullptr;  // MoE layers' expert-parallel group (null: one rank, every expert)
  // Attention across the context-parallel group (null: each rank holds whole sequences).
  const ContextAttention* cp = nullptr;
  // Which global positions a micro-batch's rows of T tokens a sequence hold on this rank.
  kernels::ContextSplit split(int T) const {
    return cp ? cp->split(T) : kernels::whole_sequence_split(T);
  }
  // f(E{}) with the kernels' element type for the storage format.
  template <class F>
  void dispatch(F&& f) const {
    kernels::with_elements(storage, f);
  }
};

// A layer's parameters (in the storage format) or their gradients (fp32), flat.
struct NormParams {
  StoredTensor weight, bias;  // [C]; RMSNorm has no bias
};
struct LinearParams {
  StoredTensor weight;  // [out, in] (this rank's slice)
  StoredTensor bias;    // [out], or empty
};

// LayerNorm (GPT-2: eps 1e-5, gain and bias) or RMSNorm (Llama: gain only, eps from the config)
// over this rank's token rows, its parameters replicated over tp (under sequence parallelism their
// gradients are summed over the group, whose ranks hold different rows).
class Norm {
 public:
  Norm(const LayerContext* ctx, int C, bool rms, float eps)
      : ctx_(ctx), C_(C), rms_(rms), eps_(eps) {}
  NormParams weights, grads;
  // out, mean, rstd [rows, C], [rows], [rows] of x [rows, C] (RMSNorm: no mean).
  void forward(const StoredTensor& out, const View1& mean, const View1& rstd, const StoredTensor& x,
               int rows) const;
  // dx += d/dx from dout.
  void backward_input(const StoredTensor& dx, const StoredTensor& dout, const StoredTensor& x,
                      const View1& mean, const View1& rstd, int rows) const;
  void backward_weight(const StoredTensor& dout, const StoredTensor& x, const View1& mean,
                       const View1& rstd, int rows) const;
  // Both: on GPUs one pass over dout and x (kernels::layernorm_backward).
  void backward(const StoredTensor& dx, const StoredTensor& dout, const StoredTensor& x,
                const View1& mean, const View1& rstd, int rows) const;

 private:
  struct GradTargets {
    Vec weight, bias;  // where the kernels add this rank's rows' parameter gradients
  };
  size_t grad_floats() const { return static_cast<size_t>(rms_ ? 1 : 2) * C_; }
  GradTargets grad_targets() const;
  void finish_grads(const GradTargets& g) const;

  const LayerContext* ctx_;
  int C_;
  bool rms_;
  float eps_;
};

// y = x W^T + b with W split by output rows over tp (Megatron's ColumnParallelLinear): the input
// is whole on every rank (all-gathered from its rows under sequence parallelism), the output is
// this rank's columns, and the input gradient is summed over tp (reduce-scattered to rows).
class ColumnParallelLinear {
 public:
  ColumnParallelLinear(const LayerContext* ctx, int in, int out_tp)
      : ctx_(ctx), in_(in), out_(out_tp) {}
  LinearParams weights, grads;
  GradStream weight_grad_stream;  // ZeRO-2/3: the weight gradient goes there, not to grads.weight
  // out [N, out_tp] from this rank's rows of x [local_rows(N), in].
  void forward(const StoredTensor& out, const StoredTensor& x_rows, int N) const;
  // out as forward, and act [N, out_tp] = gelu(out): GPT-2's MLP projection and activation, in
  // one GEMM where its epilogue can (kernels::linear_forward_gelu).
  void forward_gelu(const StoredTensor& act, const StoredTensor& out, const StoredTensor& x_rows,
                    int N) const;
  // This rank's rows of d/dx (the tp sum of dout W): returns the buffer that holds them.
  StoredTensor backward_input(const StoredTensor& dout, int N) const;
  // Weight and bias gradients (+)= from dout [N, out_tp] and x's rows; `accumulate` false
  // overwrites the weight gradient (the step's first write).
  void backward_weight(const StoredTensor& dout, const StoredTensor& x_rows, int N,
                       bool accumulate) const;

 private:
  const LayerContext* ctx_;
  int in_, out_;
};

// y = x W^T + b with W split by input columns over tp (Megatron's RowParallelLinear): the input
// is this rank's columns, the partial outputs are summed over tp (reduce-scattered to rows under
// sequence parallelism), and the bias is added once, by tp rank 0.
class RowParallelLinear {
 public:
  RowParallelLinear(const LayerContext* ctx, int in_tp, int out)
      : ctx_(ctx), in_(in_tp), out_(out) {}
  LinearParams weights, grads;
  GradStream weight_grad_stream;  // ZeRO-2/3: the weight gradient goes there, not to grads.weight
  // This rank's rows of the output [local_rows(N), out] from x [N, in_tp]: returns their buffer.
  StoredTensor forward(const StoredTensor& x, int N) const;
  // out = residual + this rank's rows of the output (the residual stream after the layer; out may
  // alias residual only when forward() would run). On one tp rank with 16-bit tensors where
  // GEMMs have the epilogue (CPUs), the residual is added inside the GEMM, rounded once with the
  // output; otherwise forward(), summed over tp, then added element-wise.
  void forward_residual(const StoredTensor& out, const StoredTensor& x,
                        const StoredTensor& residual, int N) const;
  // All N rows of an output gradient held as this rank's rows (gathered under SP).
  StoredTensor gather_output_grad(const StoredTensor& dout_rows, int N) const;
  // dx [N, in_tp] = dout W, from all rows of dout.
  void backward_input(const StoredTensor& dx, const StoredTensor& dout, int N) const;
  // d/d(fc) [N, in_tp] = (dout W) * gelu'(fc) through GPT-2's activation, in one GEMM where its
  // epilogue can (kernels::linear_backward_input_gelu); dx: where dout W goes otherwise (may be
  // dfc).
  void backward_input_gelu(const StoredTensor& dfc, const StoredTensor& dx,
                           const StoredTensor& dout, const StoredTensor& fc, int N) const;
  void backward_weight(const StoredTensor& dout, const StoredTensor& x, int N,
                       bool accumulate) const;

 private:
  const LayerContext* ctx_;
  int in_, out_;
};

// This rank's attention heads. Tensor parallelism splits the query heads and the key/value heads;
// when tp exceeds the key/value heads, `replicas` ranks hold each key/value head (the one their
// query heads read), and their gradients of it are summed over them (Megatron's rule).
struct AttentionHeads {
  int heads = 1, kv_heads = 1, head_size = 1;  // this rank's
  int replicas = 1;                            // tp ranks holding this rank's key/value head
  int global_kv_heads = 1;
  int kv_head = 0;    // replicas > 1: the global index of this rank's key/value head
  bool rope = false;  // rotary position embeddings on q and k (table in the workspace)
  kernels::AttentionTiles tiles{0, 0};  // as asked (kernels/attention_tiles.hpp)
  kernels::AttentionKernel kernel = kernels::AttentionKernel::kAuto;  // attention.kernel
  int width() const { return (heads + 2 * kv_heads) * head_size; }    // of the packed qkv
};

// Causal self-attention over this rank's heads on a packed q | k | v (grouped-query when
// kv_heads < heads), with rotary embeddings applied to q and k in place first when configured.
class Attention {
 public:
  Attention(const LayerContext* ctx, const AttentionHeads& heads) : ctx_(ctx), h_(heads) {}
  // out [N, C_tp] and each query row's log-sum-exp lse [B*NH_tp*T] from qkv [N, width()] (rotated
  // in place: backward reads the rotated q and k).
  void forward(const StoredTensor& out, const View1& lse, const StoredTensor& qkv, int B,
               int T) const;
  // dqkv [N, width()] (w.r.t. forward's input, before the rotation) from dout [N, C_tp] and
  // forward's qkv, out and lse.
  void backward(const StoredTensor& dqkv, const StoredTensor& dout, const StoredTensor& qkv,
                const StoredTensor& out, const View1& lse, int B, int T) const;
  // With replicated key/value heads: each replica's dk and dv summed over the replicas, in dqkv.
  // After the input gradient (which must count each rank's own part once), before the weights'.
  void sum_kv_replicas(const StoredTensor& dqkv, int N) const;

 private:
  kernels::AttentionShape shape(int B, int T) const {
    return {B, T, h_.heads, h_.head_size, h_.kv_heads};
  }
  kernels::AttentionGraphShape graph_shape(int B, int T) const;
  bool runs_on_cudnn(int B, int T, Precision format, const void* qkv, const void* out) const;
  const LayerContext* ctx_;
  AttentionHeads h_;
};

// The MLP's activation between its two projections: SwiGLU, silu(gate) * up, of fc = gate | up
// [N, 2F], output [N, F] (Llama). GPT-2's GELU (tanh approximation) runs inside the projections
// around it (ColumnParallelLinear::forward_gelu, RowParallelLinear::backward_input_gelu), so that
// GPU builds fuse it into their GEMMs' epilogues.
class MlpActivation {
 public:
  MlpActivation(const LayerContext* ctx, bool swiglu, int F_tp)
      : ctx_(ctx), swiglu_(swiglu), F_(F_tp) {}
  bool swiglu() const { return swiglu_; }
  void forward(const StoredTensor& out, const StoredTensor& fc, int N) const;
  // dfc [N, 2F] from dout [N, F] (separate tensors).
  void backward(const StoredTensor& dfc, const StoredTensor& dout, const StoredTensor& fc,
                int N) const;

 private:
  const LayerContext* ctx_;
  bool swiglu_;
  int F_;
};

// Token and (GPT-2) position embeddings with the vocabulary split over tp: each rank embeds the
// tokens of its slice, the partial embeddings are summed over tp (the position term added by rank
// 0). Llama has no position table (wpe empty): its positions are rotary, in attention.
class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(const LayerContext* ctx, int C, int vocab_start)
      : ctx_(ctx), C_(C), vocab_start_(vocab_start) {}
  struct Tables {
    StoredTensor wte;  // [V_tp, C]
    StoredTensor wpe;  // [block_size, C]
  };
  Tables weights, grads;
  GradStream wte_grad_stream;  // ZeRO-2/3: the token table's gradient goes there, not to grads.wte
  // This rank's rows of the embeddings [local_rows(B*T), C] into `out`.
  void forward(const StoredTensor& out, const IntView1& tokens, int B, int T) const;
  // Scatter-adds the rows of dout (this rank's; all of them gathered under SP).
  void backward_weight(const StoredTensor& dout_rows, const IntView1& tokens, int B, int T) const;

 private:
  const LayerContext* ctx_;
  int C_, vocab_start_;
};

// Cross-entropy over logits whose vocabulary is split over tp: row maxima and exp sums are
// reduced over the group, so no rank needs the whole row.
class VocabParallelCrossEntropy {
 public:
  VocabParallelCrossEntropy(const LayerContext* ctx, int V_tp, int vocab_start, int vocab_valid)
      : ctx_(ctx), V_(V_tp), vocab_start_(vocab_start), vocab_valid_(vocab_valid) {}
  // Per-token losses and log-sum-exps [N] of logits [N, V_tp].
  void forward(const View1& losses, const View1& lse, const StoredTensor& logits,
               const IntView1& targets, int N) const;
  // logits (in place) = scale * d(loss)/d(logits).
  void backward(const StoredTensor& logits, const View1& lse, const IntView1& targets, int N,
                float scale) const;
  // Both at once, where one rank holds the whole vocabulary (tp = 1): the losses, log-sum-exps
  // and the logits' gradient (in place, times scale) in one pass over the logits, the bits of
  // forward then backward (kernels::cross_entropy_fused).
  void forward_backward(const View1& losses, const View1& lse, const StoredTensor& logits,
                        const IntView1& targets, int N, float scale) const;

 private:
  const LayerContext* ctx_;
  int V_, vocab_start_, vocab_valid_;
};

}  // namespace trident
