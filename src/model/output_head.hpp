// The last stage's head as a program over its layers: the final norm, the output projection (the
// token embedding when tied, else lm_head) and the vocabulary-parallel loss.
#pragma once

#include "model/transformer_block.hpp"

namespace trident {

class OutputHead {
 public:
  explicit OutputHead(const StageContext* sc);

  Norm lnf;
  ColumnParallelLinear proj;  // weight: the token embedding (tied) or lm_head
  VocabParallelCrossEntropy loss;

  // Logits of the last block's output x into slot a; with targets, the per-token losses (a.losses).
  // With a `gradient_scale` (> 0: training, the loss scale backward will get)
  // and the whole vocabulary here (tp = 1), the logits' gradient replaces them in the same pass.
  void forward(ActivationSlot& a, const StoredTensor& x, bool with_targets,
               float gradient_scale = 0.0f) const;
  // d/d(x) into storage.dresidual, with the weight gradients now (`defer` null) or their output
  // gradients kept in `defer` (and the logits slot) for backward_weight.
  void backward(const ActivationSlot& a, float loss_scale, const DeferredGrads* defer,
                bool accumulate) const;
  void backward_weight(const ActivationSlot& a, const DeferredGrads& defer, bool accumulate) const;

 private:
  const char* weight_name() const { return sc_->shape->model.tied() ? "wte" : "lm_head"; }
  const StageContext* sc_;
};

}  // namespace trident
