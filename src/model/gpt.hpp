// One rank's part of the GPT-2 model: a stage of layers and a tensor-parallel slice, with
// parameters, gradients, activation slots for in-flight micro-batches, forward and backward.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/comm.hpp"
#include "core/half.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "core/types.hpp"
#include "model/model_config.hpp"
#include "model/params.hpp"
#include "model/partition.hpp"
#include "model/recompute.hpp"
#include "model/unit_buffers.hpp"

namespace trident {

// Windows onto one transformer block's local tensors inside a flat buffer.
struct BlockTensors {
  Vec ln1_w, ln1_b;  // [C]
  Mat qkv_w;         // [3C_tp, C]   column-parallel, q|k|v of this rank's heads
  Vec qkv_b;         // [3C_tp]
  Mat proj_w;        // [C, C_tp]    row-parallel
  Vec proj_b;        // [C]          replicated, added once
  Vec ln2_w, ln2_b;  // [C]
  Mat fc_w;          // [4C_tp, C]   column-parallel
  Vec fc_b;          // [4C_tp]
  Mat fcproj_w;      // [C, 4C_tp]   row-parallel
  Vec fcproj_b;      // [C]
};

struct StageTensors {
  Mat wte;                           // [V_tp, C] vocabulary slice; also the tied output projection
  Mat wpe;                           // [block_size, C]
  std::vector<BlockTensors> blocks;  // this stage's layers, in order
  Vec lnf_w, lnf_b;                  // [C]
};

// Windows onto the stage's tensors (its layers, embedding and head as the layout says), each
// parameter's data at where(param).
using TensorLocator = std::function<float*(const LocalParam&)>;
StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const TensorLocator& where);
// The same, every parameter at its offset in one flat buffer.
StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const View1& flat);

// What forward keeps for backward, per block and micro-batch. A block recomputed whole keeps
// only res_mlp; under selective recomputation att is not kept.
// Under sequence parallelism the tensors outside the tensor-parallel regions (ln1, res_attn,
// ln2, res_mlp and the LayerNorm statistics; a slot's input and lnf; DeferredGrads' [N,C]
// gradients) hold local_rows(N) rows.
struct BlockActivations {
  View1 ln1, ln1_mean, ln1_rstd;  // [N,C], [N], [N]
  View1 qkv;                      // [N,3C_tp]
  View1 att;                      // [B,NH_tp,T,T] softmax probabilities
  View1 atty;                     // [N,C_tp]
  View1 res_attn;                 // [N,C] residual stream after attention
  View1 ln2, ln2_mean, ln2_rstd;  // [N,C], [N], [N]
  View1 fch, fch_gelu;            // [N,4C_tp]
  View1 res_mlp;                  // [N,C] residual stream after the MLP (block output)
};

// Under 16-bit storage, the kept activations of a block as bf16 / fp16 (the LayerNorm statistics
// stay fp32 in BlockActivations). Empty where recomputation does not keep them.
struct BlockStash {
  HalfView1 ln1, qkv, att, atty, res_attn, ln2, fch, fch_gelu, res_mlp;
};

// A tensor kept between passes in the storage precision: fp32, or 16 bits under bf16 / fp16.
struct KeptTensor {
  View1 f32;
  HalfView1 f16;
};

// What an input-gradient pass keeps for its deferred weight-gradient pass (zero-bubble
// schedules): the output gradient of every linear layer and LayerNorm, which the weight gradients
// multiply with activations the micro-batch's slot still holds.
struct DeferredGrads {
  struct Block {
    KeptTensor out;         // [N,C] d/d(block output): the MLP projection's output gradient
    KeptTensor mid;         // [N,C] d/d(res_attn): the attention projection's
    KeptTensor dln2, dln1;  // [N,C] the LayerNorms' output gradients
    KeptTensor dfch;        // [N,4C_tp] the fc layer's (after the GELU)
    KeptTensor dqkv;        // [N,3C_tp] the qkv layer's
  };
  std::vector<Block> blocks;
  KeptTensor input;  // [N,C] d/d(stage input): the embedding's output gradient (first stage)
  KeptTensor dlnf;   // [N,C] the final LayerNorm's (last stage; the head's is the logits slot)
};

// One in-flight micro-batch's activations.
struct ActivationSlot {
  IntView1 tokens, targets;              // [N]
  View1 input;                           // [N,C] embeddings (first stage) or received input
  std::vector<BlockActivations> blocks;  // per local layer
  View1 lnf, lnf_mean, lnf_rstd;         // [N,C], [N], [N]      (last stage)
  View1 logits;                          // [N,V_tp]; overwritten by its gradient in backward
  View1 losses, lse;                     // [N]
  // 16-bit storage: the kept tensors (blocks hold only their fp32 statistics); a non-last stage
  // sends its last block's res_mlp from here.
  std::vector<BlockStash> stash;
  HalfView1 input16, lnf16, logits16;
  int B = 0, T = 0;
};

// How a stage holds its parameters, gradients and activations (see GptStage's constructor).
struct StageBuffers {
  int64_t unit_alignment = 1;  // pad every unit to a multiple of this (dp under ZeRO)
  bool full_params = true, full_grads = true;
  Recompute recompute;
  // bf16 / fp16: parameters and kept activations stored in 16 bits; every op computes in fp32 on
  // expanded copies (a unit of parameters, one block's activations) and rounds its output to
  // what 16-bit storage holds. Gradients stay fp32.
  Precision precision = Precision::kFp32;
  // Zero-bubble schedules: how many DeferredGrads sets to hold (weight-gradient passes pending at
  // once, counting the one an input-gradient pass is writing).
  int deferred_sets = 0;
  // Sequence parallelism (Korthikanti et al. 2022): each tp rank keeps only its block of the
  // B*T token rows of the tensors outside the tensor-parallel regions (LayerNorm inputs and
  // outputs, residual stream, stage input and output); column-parallel layers all-gather their
  // input, row-parallel outputs are reduce-scattered. Needs B*T divisible by tp.
  bool sequence_parallel = false;
};

class GptStage {
 public:
  // `tp` may be null when layout.tp_size == 1. `slots` activation sets of [max_batch, max_seq].
  // Each unit of the flat parameter and gradient buffers is padded with zeros to a multiple of
  // `unit_alignment` (dp under ZeRO, which shards every unit into dp equal parts).
  // With `buffers.full_grads` (`full_params`) false no gradient (parameter) buffer is
  // allocated: the caller places every unit with redirect_grads (redirect_params); ZeRO-2 and 3
  // keep only a few units whole at once.
  GptStage(const ModelConfig& m, const StageLayout& layout, Communicator* tp, MemoryLedger& ledger,
           int max_batch, int max_seq, int slots, const StageBuffers& buffers = {});

  const ModelConfig& config() const { return model_; }
  const StageLayout& layout() const { return layout_; }
  const ParamTable& table() const { return table_; }
  const LocalParamTable& local() const { return local_; }
  View1 params() const { return params_; }  // fp32 storage
  Precision precision() const { return precision_; }
  // 16-bit storage: the parameters as bf16 / fp16, laid out like params().
  HalfView1 params16() const { return params16_; }
  // 16-bit storage: params16() changed (an optimizer step): expand units again before use.
  void invalidate_expanded();
  View1 grads() const { return grads_; }
  int slots() const { return static_cast<int>(slots_.size()); }
  // Attributes tensor-parallel communication to Phase::kTpComm; null times nothing.
  void set_timer(PhaseTimer* timer) { timer_ = timer; }
  // Called during backward with an offset into grads(): every gradient at or above it has
  // received this backward's contribution (data parallelism starts reducing those).
  void set_grad_ready_hook(std::function<void(int64_t)> hook) { grad_ready_ = std::move(hook); }
  // Backward writes parameter p's gradient at where(p) instead of grads().
  void redirect_grads(const TensorLocator& where) {
    grad_tensors_ = stage_tensors(local_, layout_, where);
  }
  // Forward and backward read parameter p at where(p) instead of params().
  void redirect_params(const TensorLocator& where) {
    param_tensors_ = stage_tensors(local_, layout_, where);
  }
  // Called before forward or backward reads a unit's parameters, with the unit the pass will
  // need next (-1: none), so the caller can gather it and start gathering the next (ZeRO-3).
  void set_unit_needed_hook(std::function<void(int, int)> hook) { unit_needed_ = std::move(hook); }
  // Index into local().units() of the unit holding parameter `name`.
  int unit_index(const std::string& name) const;
  // Called during backward with a unit index (into local().units()) once this backward has
  // written that unit's whole contribution.
  void set_unit_done_hook(std::function<void(int)> hook) { unit_done_ = std::move(hook); }

  // Fills this rank's parameters from the counter-based initialiser (its slice only).
  void init_params(uint64_t seed);
  // Clears the gradients for the next step's accumulation; the weight matrices' are overwritten
  // by the next backward (or weight-gradient pass) instead, so until then they hold stale values.
  void zero_grads();

  // Forward of one micro-batch of B sequences of T tokens into `slot`. The first stage reads
  // tokens (host memory); later stages read input_buffer(slot), filled by the caller. The last
  // stage, given targets, returns the sum of per-token losses (the same on every tp rank).
  double forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T);
  // The token rows of a micro-batch of n this rank holds outside the tensor-parallel regions:
  // n, or its 1/tp block under sequence parallelism (rows [tp_rank*n/tp, (tp_rank+1)*n/tp)).
  int local_rows(int n) const { return sp_ ? n / layout_.tp_size : n; }
  // Where a non-first stage's input activation [local_rows(B*T), C] is received: fp32, or under
  // bf16 / fp16 the slot's 16-bit copy (activations are rounded to 16 bits as they are made, so
  // the transfer is exact at half the bytes).
  CommBuffer input_buffer(int slot) const;
  // A stage without the head writes each forward's output, in the storage width, into its
  // pipeline::kSendBuffers output buffers in turn: the next forward into output(next_output()).
  // The output is only sent, never read back, so it is not kept per activation slot; the caller
  // must not start a forward before the previous send from that buffer completed.
  int next_output() const { return next_output_; }
  CommBuffer output(int index) const;
  // Backward of `slot`, accumulating into grads(). The last stage starts from
  // loss_scale * (sum of per-token losses); others from grad_output [B*T, C].
  void backward(int slot, float loss_scale, const ConstVec& grad_output);
  // (grad_output and input_grad() hold local_rows(B*T) rows.)
  // backward(slot) split in two for zero-bubble schedules: backward_input computes input_grad()
  // and keeps what the weight gradients need in deferred set `set` (0..deferred_sets-1); the
  // later backward_weight(slot, set), before the slot's next forward, accumulates the weight
  // gradients into grads() and fires the gradient hooks. Together they give backward()'s
  // gradients bit for bit.
  void backward_input(int slot, float loss_scale, const ConstVec& grad_output, int set);
  void backward_weight(int slot, int set);
  // d(loss)/d(input) [local_rows(B*T), C] after backward on a non-first stage (valid until the next
  // one).
  Vec input_grad() const;
  // Logits [B*T, V_tp] of the last forward on `slot` (last stage; this rank's vocab slice).
  // Under 16-bit storage: of the last forward on any slot.
  ConstMat logits(int slot) const;

 private:
  void tp_allreduce(const View1& buf, size_t n);
  void tp_allreduce_max(const View1& buf, size_t n);
  // A row-parallel layer's output `partial` [N,C], summed over tp: in place, or under sequence
  // parallelism this rank's rows of the sum in `scattered`. Returns the sum's buffer.
  View1 sum_rows(const View1& partial, int N, const View1& scattered);
  // All N rows of `rows` [local_rows(N), C]: itself, or under sequence parallelism every tp
  // rank's block gathered into `gathered`. Returns the buffer with all rows.
  View1 gather_rows(const View1& rows, int N, const View1& gathered);
  // dweight, dbias += a LayerNorm's parameter gradients over this rank's rows, summed over tp
  // under sequence parallelism (the parameters are replicated, the rows split).
  void layernorm_param_grads(const Vec& dweight, const Vec& dbias, const ConstMat& dout,
                             const ConstMat& inp, const ConstVec& mean, const ConstVec& rstd);
  double cross_entropy(ActivationSlot& a, const View1& logits, int N);
  // Local block i's forward from x into b (b.res_mlp is the output). `complete` false stops after
  // the GELU: what backward needs when recomputing, without the last projection and its
  // all-reduce. Each op first needs its unit; `next` names the unit needed after this call's last
  // one ("" for none).
  void block_forward(int i, const BlockActivations& b, const View1& x, int B, int T, bool complete,
                     const std::string& next);
  // Where block i's forward writes: slot a's buffers, or shared ones for what is not kept.
  BlockActivations forward_buffers(const ActivationSlot& a, int i);
  // 16-bit storage: after block i's forward, keeps what backward reads from `b` in a's stash.
  void keep(const ActivationSlot& a, int i, const BlockActivations& b);
  // Block i's input [N,C] for backward (i = number of blocks: the last block's output).
  View1 block_input(const ActivationSlot& a, int i);
  // The activations block i's backward reads: slot a's, or recomputed into shared buffers (then
  // `next` is the unit needed after the recomputation). Without `attention` the attention
  // probabilities are neither restored nor recomputed (the weight gradients do not read them).
  BlockActivations activations_for_backward(const ActivationSlot& a, int i, const View1& x,
                                            const std::string& next, bool attention = true);
  // backward() with `defer` null; backward_input() with the set its output gradients go to.
  void backward_pass(const ActivationSlot& a, float loss_scale, const ConstVec& grad_output,
                     const DeferredGrads* defer);
  // Keeps src[0, n) in dst; the kept tensor back, in fp32 (16-bit: expanded into `work`).
  void keep_grad(const KeptTensor& dst, const View1& src, size_t n);
  View1 kept_grad(const KeptTensor& src, const View1& work, size_t n);
  // 16-bit storage: rounds v[0, n) to the stored precision (no-op in fp32).
  void round(const View1& v, size_t n);
  void stash(const HalfView1& dst, const View1& src, size_t n);
  void restore(const View1& dst, const HalfView1& src, size_t n);

  ModelConfig model_;
  StageLayout layout_;
  ParamTable table_;
  LocalParamTable local_;
  Communicator* tp_;
  PhaseTimer* timer_ = nullptr;
  std::function<void(int64_t)> grad_ready_;
  std::function<void(int)> unit_done_;
  std::function<void(int, int)> unit_needed_;
  void unit_done(const std::string& first_param);
  // unit_needed_ for the unit of `name`, announcing the unit of `next` ("" for none).
  void need(const std::string& name, const std::string& next);
  // First parameter of unit `part` of local block i ("" if there is no block i); part 0's is the
  // block's first.
  std::string unit_param(int i, int part) const {
    if (i < 0 || i >= layout_.last_layer - layout_.first_layer) return "";
    return block_unit_first_param(layout_.first_layer + i, part);
  }
  std::string block_param(int i) const { return unit_param(i, 0); }
  // The first unit backward needs of local block i: recomputation starts with the first, the
  // backward itself with the last.
  std::string first_backward_unit(int i) const {
    return unit_param(i, recompute_.full_block(i) ? 0 : kUnitsPerBlock - 1);
  }
  void grads_ready_from(int64_t offset) {
    if (grad_ready_) grad_ready_(offset);
  }
  Exec exec_;
  int C_tp_, NH_tp_, F_tp_, V_tp_, vocab_start_, vocab_valid_;
  View1 params_, grads_;
  StageTensors param_tensors_, grad_tensors_;
  // zero_grads() was called and no backward has written since: GEMMs overwrite weight gradients.
  bool grads_fresh_ = false;
  bool overwritten_by_backward(const LocalParam& p) const;
  std::vector<Segment> cleared_grads_;  // the ranges of grads_ zero_grads clears
  std::vector<ActivationSlot> slots_;
  std::vector<View1> outputs_;        // no head: the stage's output buffers (fp32 storage)
  std::vector<HalfView1> outputs16_;  // the same under bf16 / fp16
  int next_output_ = 0;
  std::vector<DeferredGrads> deferred_;
  Precision precision_ = Precision::kFp32;
  bool half_ = false;
  bool sp_ = false;  // sequence parallelism
  HalfView1 params16_;
  std::unique_ptr<UnitBuffers> expanded_;  // 16-bit: fp32 copies of the units in use
  std::vector<int> expanded_unit_;         // per expanded_ buffer: the unit it holds, or -1
  // 16-bit: the block being computed and its input (the stage input first), and the head, in
  // fp32.
  BlockActivations work_;
  View1 work_x_, work_lnf_, work_logits_;
  Recompute recompute_;
  BlockActivations recomputed_;  // one block's recomputed activations, shared by all slots
  IntView1::HostMirror tokens_host_, targets_host_;
  View1 scratch_c_;  // [N,C] projection outputs before their all-reduce; gathered gradients
  // Sequence parallelism: all rows of a LayerNorm output, this rank's rows of a reduced
  // projection, and LayerNorm parameter gradients before their tp sum.
  View1 gathered_, scattered_, ln_grad_;  // [N,C], [N/tp,C], [2C]
  // 16-bit storage with tp > 1: what sum_rows and gather_rows send, [N,C] and [N/tp,C] (SP).
  HalfView1 tp16_, tp16_rows_;
  View1 row_max_, row_sum_;  // [N], [2N]: vocabulary-parallel cross-entropy reductions
  // Backward buffers.
  View1 dresidual_, dln_, datty_;  // [local_rows(N),C], [N,C], [N,C_tp]
  View1 dqkv_;                     // [N,3C_tp]
  View1 dfch_;                     // [N,4C_tp]
  View1 datt_scratch_;             // [B*NH_tp*attention_block_rows(T), T]
};

}  // namespace trident
