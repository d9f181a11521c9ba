// The last stage's head as a program over its layers: the final LayerNorm, the output projection
// (tied to the token embedding) and the vocabulary-parallel loss.
#pragma once

#include "model/transformer_block.hpp"

namespace trident {

class OutputHead {
 public:
  explicit OutputHead(const StageContext* sc);

  LayerNorm lnf;
  ColumnParallelLinear proj;  // weight: the token embedding (tied)
  VocabParallelCrossEntropy loss;

  // Logits of the last block's output x into slot a; with targets, returns the sum of the
  // per-token losses.
  double forward(ActivationSlot& a, const StoredTensor& x, bool with_targets) const;
  // d/d(x) into storage.dresidual, with the weight gradients now (`defer` null) or their output
  // gradients kept in `defer` (and the logits slot) for backward_weight.
  void backward(const ActivationSlot& a, float loss_scale, const DeferredGrads* defer,
                bool accumulate) const;
  void backward_weight(const ActivationSlot& a, const DeferredGrads& defer, bool accumulate) const;

 private:
  const StageContext* sc_;
};

}  // namespace trident
