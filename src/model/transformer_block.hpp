// A transformer block as a short program over the layer types, and what a stage's blocks and head
// run with besides their layers (StageContext). ZeRO's unit gathers (need) and recomputation stay
// visible in the programs, between the layers.
#pragma once

#include <optional>
#include <string>

#include "core/stored.hpp"
#include "core/timer.hpp"
#include "model/activations.hpp"
#include "model/layers.hpp"
#include "model/moe_layer.hpp"
#include "model/stage_storage.hpp"
#include "model/unit_hooks.hpp"

namespace trident {

// The stage's shape, buffers, hooks and layer context, shared by its blocks and head.
struct StageContext {
  const StageShape* shape = nullptr;
  const StageStorage* storage = nullptr;
  const LayerContext* layers = nullptr;
  UnitHooks* hooks = nullptr;
  PhaseTimer* timer = nullptr;
  // The balancing losses' scales for the MoE layers of the backward in progress (coefficient x
  // loss scale x tokens: the losses weigh as a per-token mean does).
  kernels::RouterLossScales moe_scales;

  int local_rows(int n) const { return layers->tp->local_rows(n); }
  // The stage's norm (LayerNorm or RMSNorm) over C channels.
  Norm norm() const;
  // Copies src[0, n) into dst (the same format): what a deferred weight pass will read.
  void keep(const StoredTensor& dst, const StoredTensor& src, size_t n) const;
  // Block i's input for backward (i = number of blocks: the last block's output).
  const StoredTensor& block_input(const ActivationSlot& a, int i) const;
};

class TransformerBlock {
 public:
  // Local block `index` of the stage `sc` describes.
  TransformerBlock(const StageContext* sc, int index);

  Norm ln1;
  ColumnParallelLinear qkv;
  Attention attention;
  RowParallelLinear proj;
  Norm ln2;
  // The MLP slot: a dense MLP (fc, act, fcproj) or, on the model's MoE layers, `moe`.
  ColumnParallelLinear fc;
  MlpActivation act;
  RowParallelLinear fcproj;
  std::optional<MoeLayer> moe;

  // From x into b (b.res_mlp is the output); `complete` false stops after the activation (what
  // backward needs when recomputing). `next` is the unit needed after this block's.
  void forward(const BlockActivations& b, const StoredTensor& x, int B, int T, bool complete,
               const std::string& next) const;
  // The tensors forward writes for slot a: the slot's own, the shared ones where the slot keeps
  // none, and the output in `sent` if given.
  BlockActivations working(const ActivationSlot& a, const StoredTensor& sent = {}) const;
  // From d/d(output) in storage.dresidual to d/d(input) there, with the weight gradients now
  // (`kept` null) or their output gradients left in `kept` for backward_weight.
  void backward(const ActivationSlot& a, const DeferredGrads::Block* kept, bool accumulate) const;
  void backward_weight(const ActivationSlot& a, const DeferredGrads::Block& kept,
                       bool accumulate) const;
  // An MoE block's balancing losses for the micro-batch forward wrote into b: out[0] aux, out[1]
  // z, unscaled.
  void moe_losses(const Vec& out, const BlockActivations& b, int N) const;

 private:
  // The activations backward reads: slot a's, or recomputed into the shared buffers (`next`: the
  // unit needed after the recomputation).
  BlockActivations activations_for_backward(const ActivationSlot& a, const StoredTensor& x,
                                            const std::string& next) const;
  std::string unit(int part) const { return sc_->hooks->unit_param(index_, part); }
  // The MLP slot's backward: the dense MLP (weight gradients now, or their output gradients
  // into `kept`) or the MoE layer.
  void mlp_backward_dense(const BlockActivations& b, const DeferredGrads::Block* kept, int N,
                          int rows, const BlockExtents& e, bool accumulate) const;
  void mlp_backward_moe(const BlockActivations& b, int N, int rows) const;

  const StageContext* sc_;
  int index_;
};

}  // namespace trident
