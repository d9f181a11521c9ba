// Every buffer a GPT stage allocates, described once: the stage's constructor allocates through
// this description and the memory model sums it, for any layout, without allocating.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "core/buffer_list.hpp"
#include "core/precision.hpp"
#include "model/activations.hpp"
#include "model/context_parallel.hpp"
#include "model/layers.hpp"
#include "model/model_config.hpp"
#include "model/moe_layer.hpp"
#include "model/params.hpp"
#include "model/partition.hpp"
#include "model/recompute.hpp"

namespace trident {

// How a stage holds its parameters, gradients and activations.
struct StageBuffers {
  int64_t unit_alignment = 1;  // pad every unit to a multiple of this (dp under ZeRO)
  // > 0: expert tensors form units of their own, padded to a multiple of this (their replicas'
  // count under ZeRO): where those replicas are not the dp ranks (LocalParamTable).
  int64_t expert_unit_alignment = 0;
  // Without full_grads (full_params) no gradient (parameter) buffer is allocated: the caller
  // places every unit (GptStage::redirect_grads / redirect_params); ZeRO-2 and 3 keep only a few
  // units whole at once.
  bool full_params = true, full_grads = true;
  Recompute recompute;
  // bf16 / fp16: parameters (the compute copy), activations and their gradients stored and read
  // in 16 bits; GEMMs take 16-bit operands and sum in fp32, element-wise kernels compute in fp32
  // registers. Parameter gradients and statistics stay fp32.
  Precision precision = Precision::kFp32;
  // Zero-bubble schedules: how many DeferredGrads sets to hold (weight-gradient passes pending at
  // once, counting the one an input-gradient pass is writing).
  int deferred_sets = 0;
  // Sequence parallelism (Korthikanti et al. 2022): each tp rank keeps only its block of the
  // B*T token rows of the tensors outside the tensor-parallel regions (LayerNorm inputs and
  // outputs, residual stream, stage input and output); column-parallel layers all-gather their
  // input, row-parallel outputs are reduce-scattered. Needs B*T divisible by tp.
  bool sequence_parallel = false;
  // Attention's tiles as asked (kernels/attention_tiles.hpp; 0: the build's default): they set
  // the scratch and, on GPUs, the launches.
  kernels::AttentionTiles attention_tiles{0, 0};
  // Which attention GPU builds run (attention.kernel).
  kernels::AttentionKernel attention_kernel = kernels::AttentionKernel::kAuto;
  // How context parallelism (layout.cp_size > 1) brings keys and values to the queries, and how
  // it cuts the sequences.
  CpComm cp_comm = CpComm::kRing;
  CpSplit cp_split = CpSplit::kBalanced;
};

// A stage's extents: the model, its layers and tp slice, the largest micro-batch, how many
// micro-batches are in flight at once (slots), and how it holds its tensors.
struct StageShape {
  ModelConfig model;
  StageLayout layout;
  int max_batch = 1, max_seq = 1, slots = 1;
  StageBuffers buffers;

  int blocks() const { return layout.last_layer - layout.first_layer; }
  bool sequence_parallel() const { return buffers.sequence_parallel && layout.tp_size > 1; }
  bool half() const { return buffers.precision != Precision::kFp32; }
  int C_tp() const { return model.n_embd / layout.tp_size; }
  int heads_tp() const { return model.n_head / layout.tp_size; }
  // Key/value heads a rank holds: its share, or one shared with kv_replicas() - 1 other ranks.
  int kv_heads_tp() const { return std::max(1, model.kv_heads() / layout.tp_size); }
  int kv_replicas() const { return std::max(1, layout.tp_size / model.kv_heads()); }
  int qkv_tp() const { return (heads_tp() + 2 * kv_heads_tp()) * model.head_size(); }
  int F_tp() const { return model.mlp_hidden() / layout.tp_size; }     // the activation's width
  int fc_tp() const { return model.mlp_fc_width() / layout.tp_size; }  // the first projection's
  // This rank's attention heads (layers.hpp).
  AttentionHeads attention_heads() const;
  int V_tp() const { return padded_vocab(model, layout.tp_size) / layout.tp_size; }
  // A micro-batch's sequences as this rank holds them: T of each one's T x cp_size tokens.
  kernels::ContextSplit split(int T) const {
    return {layout.cp_size, layout.cp_rank, T * layout.cp_size,
            buffers.cp_split == CpSplit::kBalanced};
  }
  // The extents of one block's tensors for a micro-batch of B sequences of T tokens.
  BlockExtents extents(int B, int T) const;
  // Whether local block i's MLP is a Mixture of Experts, and whether any block's is (or is not).
  bool moe_block(int i) const { return model.moe_layer(layout.first_layer + i); }
  // The MoE layers' shape on this rank (its share of the experts).
  // Under sequence parallelism the tp ranks split each group's tokens.
  MoeShape moe() const {
    return sequence_parallel()
               ? MoeShape::of(model, layout.ep_size, layout.ep_rank, layout.tp_size, layout.tp_rank)
               : MoeShape::of(model, layout.ep_size, layout.ep_rank);
  }
  bool any_moe_block() const;
  bool any_dense_block() const;
};

// The stage's buffers, made by lay_out_stage.
struct StageStorage {
  StoredTensor params;  // full_params, in the storage format
  View1 grads;          // full_grads
  std::vector<ActivationSlot> slots;
  std::vector<DeferredGrads> deferred;
  // What a block recomputed whole rebuilds for its backward, shared by every block and slot.
  BlockActivations shared;
  LayerWorkspace layers;
  // Backward: d/d(residual stream) [local rows, C], and the tensor-parallel regions' gradients,
  // in the storage format: [N,C_tp], [N,qkv_tp], [N,fc_tp], and d/d(the MLP activation) [N,F_tp]
  // (GPT-2's GELU works in place: dact is dfch). The last four are windows of block_grads: the
  // MLP's two share it with the attention's two, whose backward comes after theirs.
  StoredTensor dresidual, datty, dqkv, dfch, dact;
  StoredTensor block_grads;
  MoeScratch moe;  // what the stage's MoE layers share (empty without one)
  // [5] the MoE blocks' forwards since the last read: aux, z, dropped slots, slots, forwards
  View1 moe_stats;
  View1 expert_bias;  // [blocks x E] each MoE block's selection bias (dense blocks' rows unused)
};

// Describes (and, when `list` has a ledger, allocates) every buffer of a stage of `shape` whose
// parameter table is `local`.
StageStorage lay_out_stage(const StageShape& shape, const LocalParamTable& local, BufferList& list);

// The stage's tensor-parallel group (into `tp`) and its buffers, described to (and, given a
// ledger, allocated through) `list`: GptStage's constructor and describe_stage share this.
StageStorage build_stage(const StageShape& shape, const LocalParamTable& local, Communicator* comm,
                         BufferList& list, std::unique_ptr<TensorParallel>& tp);
// Every buffer a stage of `shape` with parameter table `local` allocates, described without
// allocating (the memory model).
BufferList describe_stage(const StageShape& shape, const LocalParamTable& local);
// `shape`, after checking what a stage needs of it.
const StageShape& checked_shape(const StageShape& shape);

// Copies a micro-batch's N tokens and targets (null: none, -1) into slot a through host mirrors.
void stage_tokens(const Exec& exec, ActivationSlot& a, const IntView1::HostMirror& tokens_host,
                  const IntView1::HostMirror& targets_host, const int32_t* tokens,
                  const int32_t* targets, int N);

// The ranges of the gradient buffer GptStage::zero_grads clears: every parameter's gradient but
// the weight matrices' (the next backward's GEMMs overwrite those), merged where contiguous.
std::vector<Segment> grads_to_clear(const StageShape& shape, const LocalParamTable& local);

// Fills st's parameters (fp32 or 16-bit) from the counter-based initialiser: this rank's slice.
void init_stage_params(const StageShape& shape, const LocalParamTable& local,
                       const StageStorage& st, uint64_t seed);

// The GPU shape's floats between the two passes of the bias and norm gradients' column sums
// (kernels::column_sums_teams): for the widest of them, a LayerNorm's two sums over C (RMSNorm's
// one) or GPT-2's qkv or fc bias, over the largest micro-batch's rows.
size_t column_partial_floats(const StageShape& s);

// What one activation slot keeps of a block of `shape` with its output: everything its backward
// reads, or with `internals` false (recomputed whole) the output alone.
BufferList describe_kept_block(const StageShape& shape, bool internals);

}  // namespace trident
