// A stage of the model (GPT-2 or Llama): the embedding, blocks and head one pipeline rank runs as
// one unit of its schedule (one of its virtual stages under interleaving), on a tensor-parallel
// slice, with their parameters, gradients and activation slots.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "model/output_head.hpp"
#include "model/stage_tensors.hpp"
#include "model/transformer_block.hpp"

namespace trident {

// One MoE block's sums over forwards: aux and z losses, dropped slots, all slots, forwards, and
// the slots routed to each expert (before capacity).
struct MoeBlockStats {
  int layer = 0;  // global layer index
  double aux = 0, z = 0, dropped = 0, slots = 0, forwards = 0;
  std::vector<double> tokens;  // [E]
};

class GptStage {
 public:
  // `tp` may be null when layout.tp_size == 1. `slots` activation sets of [max_batch, max_seq].
  // Each unit of the flat parameter and gradient buffers is padded with zeros to a multiple of
  // `buffers.unit_alignment` (dp under ZeRO, which shards every unit into dp equal parts).
  // Under expert parallelism (layout.ep_size > 1) `ep` carries the MoE layers' exchanges; under
  // context parallelism (layout.cp_size > 1) `cp` the key/value chunks, and max_seq and every
  // micro-batch's T count this rank's tokens of each sequence.
  GptStage(const ModelConfig& m, const StageLayout& layout, Communicator* tp, MemoryLedger& ledger,
           int max_batch, int max_seq, int slots, const StageBuffers& buffers = {},
           const ExpertComms& ep = {}, Communicator* cp = nullptr);
  GptStage(const GptStage&) = delete;  // the layers point at the stage's context
  GptStage& operator=(const GptStage&) = delete;

  const ModelConfig& config() const { return shape_.model; }
  const StageLayout& layout() const { return shape_.layout; }
  const ParamTable& table() const { return table_; }
  const LocalParamTable& local() const { return local_; }
  View1 params() const { return st_.params.f32; }  // fp32 storage
  Precision precision() const { return shape_.buffers.precision; }
  // 16-bit storage: the parameters as bf16 / fp16, laid out like params().
  HalfView1 params16() const { return st_.params.f16; }
  View1 grads() const { return st_.grads; }
  int slots() const { return static_cast<int>(st_.slots.size()); }
  // Attributes tensor-, expert- and context-parallel communication to Phase::kTpComm, kEpComm
  // and kCpComm; null times nothing.
  void set_timer(PhaseTimer* timer);
  // Context parallelism: the bytes of keys, values and their gradients this rank has sent.
  size_t cp_bytes_sent() const { return context_attention_.bytes_sent(); }
  // Called during backward with an offset into grads(): every gradient at or above it has
  // received this backward's contribution (data parallelism starts reducing those).
  void set_grad_ready_hook(std::function<void(int64_t)> f) { hooks_.on_grads_ready = std::move(f); }
  // Backward writes parameter p's gradient at where(p) instead of grads().
  void redirect_grads(const TensorLocator& where);
  // Sends the gradients of the parameters streams_grad names to `sink` a block of rows at a time
  // (their locator gives them no tensor): ZeRO-2/3.
  void stream_weight_grads(GradSink* sink);
  // Forward and backward read parameter p at where(p) instead of params().
  void redirect_params(const TensorLocator& where);
  // Called before forward or backward reads a unit's parameters, with the unit the pass will
  // need next (-1: none), so the caller can gather it and start gathering the next (ZeRO-3).
  void set_unit_needed_hook(std::function<void(int, int)> f) {
    hooks_.on_unit_needed = std::move(f);
  }
  // Index into local().units() of the unit holding parameter `name`.
  int unit_index(const std::string& name) const { return hooks_.unit_index(name); }
  // Called during backward with a unit index (into local().units()) once this backward has
  // written that unit's whole contribution.
  void set_unit_done_hook(std::function<void(int)> f) { hooks_.on_unit_done = std::move(f); }

  // The Mixture-of-Experts balancing losses' coefficients (train.aux_loss_coeff, z_loss_coeff):
  // backward adds their gradients, forward()'s objective their values. 0 until set.
  void set_moe_loss_coefficients(double aux, double z);
  // The sums over this stage's MoE blocks of the slot's last forward's balancing losses,
  // unscaled: {aux, z} (zeros without MoE blocks).
  std::array<double, 2> moe_losses(int slot) const;
  // The routing of the slot's last forward, block by block: each MoE block's chosen experts and
  // each slot's row in the expert buffers (-1: dropped), [N k] each (empty without MoE blocks).
  std::vector<int32_t> moe_routing(int slot) const;
  // The aux-loss-free selection bias of every MoE layer of the model, [moe layers x E] in layer
  // order: this stage's blocks take their rows.
  void set_expert_bias(const std::vector<float>& table);
  // What each MoE block's training and evaluation forwards (not recomputations) added up since
  // the last call, which clears it.
  std::vector<MoeBlockStats> take_moe_stats();

  // Fills this rank's parameters from the counter-based initialiser (its slice only).
  void init_params(uint64_t seed);
  // Clears the gradients for the next step's accumulation; the weight matrices' are overwritten
  // by the next backward (or weight-gradient pass) instead, so until then they hold stale values.
  void zero_grads();

  // Forward of one micro-batch of B sequences of T tokens into `slot`. The first stage reads
  // tokens (host memory); later stages read input_buffer(slot), filled by the caller. The last
  // stage, given targets, keeps the per-token losses in the slot (the same on every tp rank). A
  // stage without the head writes its output [local_rows(B*T), C] into `output` (in the storage
  // format), which the caller sends: the output is never read back, so it is not kept per slot.
  // `gradient_scale` > 0 (training: the loss scale backward will get) lets a head holding the
  // whole vocabulary write the logits' gradient in the loss's pass (OutputHead::forward). Nothing
  // waits for the device.
  void forward_pass(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                    const StoredTensor& output = {}, float gradient_scale = 0.0f);
  // The sum of the slot's per-token losses written to `sum` on the device, without waiting (the
  // last stage, after a forward with targets).
  void loss_sum(int slot, const Kokkos::View<double, Device>& sum) const;
  // forward_pass, then the sum of the per-token losses read back (0 without the head or
  // targets), plus N x the MoE blocks' coefficient-weighted balancing losses (the objective
  // backward differentiates): for callers that want each micro-batch's loss at once (tests,
  // generation).
  double forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                 const StoredTensor& output = {}, float gradient_scale = 0.0f);
  // The token rows of a micro-batch of n this rank holds outside the tensor-parallel regions.
  int local_rows(int n) const { return tp_->local_rows(n); }
  // Where a non-first stage's input activation [local_rows(B*T), C] is received, in the storage
  // format (activations are rounded to it as they are made, so the transfer is exact).
  CommBuffer input_buffer(int slot) const { return CommBuffer(st_.slots[slot].input); }
  // Backward of `slot`, accumulating into grads(). The last stage starts from
  // loss_scale * (sum of per-token losses); others from grad_output [local_rows(B*T), C] in the
  // storage format.
  void backward(int slot, float loss_scale, const StoredTensor& grad_output = {});
  // backward(slot) split in two for zero-bubble schedules: backward_input computes input_grad()
  // and keeps what the weight gradients need in deferred set `set` (0..deferred_sets-1); the
  // later backward_weight(slot, set), before the slot's next forward, accumulates the weight
  // gradients into grads() and fires the gradient hooks. Together they give backward()'s
  // gradients bit for bit.
  void backward_input(int slot, float loss_scale, const StoredTensor& grad_output, int set);
  void backward_weight(int slot, int set);
  // d(loss)/d(input) [local_rows(B*T), C] in the storage format after backward on a non-first
  // stage (valid until the next one).
  const StoredTensor& input_grad() const { return st_.dresidual; }
  // Logits [B*T, V_tp] of the last forward on `slot` in the storage format (last stage; this
  // rank's vocabulary slice); backward overwrites them with their gradient.
  const StoredTensor& logits(int slot) const { return st_.slots[slot].logits; }

 private:
  // Every input gradient, and the weight gradients now (defer null) or later (backward_weight).
  void backward_pass(const ActivationSlot& a, float loss_scale, const StoredTensor& grad_output,
                     const DeferredGrads* defer);
  // The end of a backward's weight gradients: the embeddings' and the last hooks.
  void finish_weight_grads(const ActivationSlot& a, const StoredTensor& dinput);
  void bind(const StageTensors& t, bool grads);

  StageShape shape_;
  ParamTable table_;
  LocalParamTable local_;
  Exec exec_;
  std::unique_ptr<TensorParallel> tp_;
  ExpertParallel ep_;
  ContextAttention context_attention_;
  StageStorage st_;
  LayerContext layer_context_;
  UnitHooks hooks_;
  StageContext context_;
  VocabParallelEmbedding embedding_;
  std::vector<TransformerBlock> blocks_;
  OutputHead head_;
  // zero_grads() was called and no backward has written since: GEMMs overwrite weight gradients.
  bool grads_fresh_ = false;
  double moe_aux_coeff_ = 0.0, moe_z_coeff_ = 0.0;
  std::vector<Segment> cleared_grads_;  // the ranges of grads zero_grads clears
  IntView1::HostMirror tokens_host_, targets_host_;
};

}  // namespace trident
