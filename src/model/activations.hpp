// What a stage keeps between passes: per in-flight micro-batch (an activation slot) the tensors
// backward reads, in the storage format; per pending weight-gradient pass the output gradients it
// multiplies with them.
#pragma once

#include <cstddef>
#include <vector>

#include "core/stored.hpp"
#include "core/types.hpp"

namespace trident {

// What an MoE layer's forward keeps for its backward, for one group of N tokens (the routing in
// fp32 and ints, the experts' activations in the storage format). Every kept slot takes one row of
// the expert-ordered buffers, so N k rows bound those of this rank's tokens; the rows that arrive
// at this rank's experts (from every rank of its expert-parallel group) are bounded by
// MoeShape::arrived_rows (model/moe_layer.hpp).
// Under sequence parallelism the tp ranks split a group's tokens: routing runs over the group
// (the [N, ...] tensors are the group's, the same on each rank), and each rank moves its own n
// tokens' rows (n = N / tp; n = N with tp = 1).
struct MoeActivations {
  View1 logits, scores;      // [N, E]
  View1 weight;              // [N, k] combine weights
  IntView1 choice, row;      // [N, k] chosen experts, and each slot's group row (-1: dropped)
  IntView1 local_row;        // tp > 1: [n, k] this rank's slots' rows in its own buffers
  IntView1 counts, offsets;  // [E] slots routed to each expert, [E + 1] this rank's kept rows
  StoredTensor dispatched;   // [n k, C] token rows in expert order
  // Expert parallelism (ep > 1): the rows each rank of the group sent each of this rank's experts
  // [ep, E / ep], and the rows themselves [arrived, C], by sending rank then expert. With ep = 1
  // the arrived rows are `dispatched` and `arrivals` is empty.
  IntView1 arrivals;
  StoredTensor arrived;
  StoredTensor fc, act;     // [arrived, 2 Fe], [arrived, Fe]: the experts' hidden rows
  StoredTensor expert_out;  // [n k, C] the experts' outputs, back in this rank's expert order
  StoredTensor shared_fc, shared_act;  // [n, 2 Fs], [n, Fs]: the shared experts' (empty without)
};
// One block's tensors, in the storage format (the norm and softmax statistics in fp32): what
// its ops write and its backward reads. A slot keeps them per block (ActivationSlot::blocks), and
// the ops compute there; where a slot does not keep a tensor (a block recomputed whole keeps only
// its output; the last block of a stage without the head sends its output) the ops use buffers the
// stage shares. Under sequence parallelism the tensors outside the tensor-parallel regions (ln1,
// res_attn, ln2, res_mlp and the norm statistics) hold local_rows(N) rows.
// Widths: qkv holds this rank's q | k | v heads (3C_tp for GPT-2; fewer key/value heads under
// grouped-query attention), fch the MLP's first projection (4C_tp, or Llama's gate | up 2F_tp) and
// fch_act its activation (4C_tp, or F_tp). RMSNorm keeps no mean (empty).
struct BlockActivations {
  StoredTensor ln1;          // [N,C]
  View1 ln1_mean, ln1_rstd;  // [N], [N]
  StoredTensor qkv;          // [N,qkv_tp] (q and k rotated in place under RoPE)
  View1 att_lse;             // [B,NH_tp,T] each query row's softmax log-sum-exp
  StoredTensor atty;         // [N,C_tp]
  StoredTensor res_attn;     // [N,C] residual stream after attention
  StoredTensor ln2;          // [N,C]
  View1 ln2_mean, ln2_rstd;  // [N], [N]
  StoredTensor fch;          // [N,fc_tp]        a dense MLP's
  StoredTensor fch_act;      // [N,F_tp] the activation's output
  MoeActivations moe;        // an MoE layer's, in place of fch and fch_act
  StoredTensor res_mlp;      // [N,C] residual stream after the MLP (block output)
};

// The extents of a block's tensors, in elements, for a micro-batch of N = B*T token rows.
struct BlockExtents {
  size_t rows_c;  // [local rows, C]
  size_t qkv;     // [N, qkv_tp]
  size_t heads;   // [N*NH_tp] a value per (token row, head)
  size_t atty;    // [N, C_tp]
  size_t fc;      // [N, fc_tp] the MLP's first projection
  size_t act;     // [N, F_tp] its activation
  size_t stats;   // [local rows]
};

// One in-flight micro-batch's activations. Under sequence parallelism input and lnf hold
// local_rows(N) rows.
struct ActivationSlot {
  IntView1 tokens, targets;              // [N]
  StoredTensor input;                    // [N,C] embeddings (first stage) or received input
  std::vector<BlockActivations> blocks;  // per local layer
  StoredTensor lnf;                      // [N,C]      (last stage)
  View1 lnf_mean, lnf_rstd;              // [N], [N]
  StoredTensor logits;                   // [N,V_tp]; overwritten by its gradient in backward
  View1 losses, lse;                     // [N]
  View1 moe_losses;                      // [2 per block] each MoE block's aux and z losses
  int B = 0, T = 0;
  // > 0: the forward already wrote the logits' gradient over them, at this loss scale (the fused
  // classifier, tp = 1); backward then starts from it.
  float logits_gradient_scale = 0.0f;
};

// What an input-gradient pass keeps for its deferred weight-gradient pass (zero-bubble
// schedules): the output gradient of every linear layer and norm, which the weight gradients
// multiply with activations the micro-batch's slot still holds. [N,C] tensors outside the
// tensor-parallel regions hold local_rows(N) rows under sequence parallelism.
struct DeferredGrads {
  struct Block {
    StoredTensor out;         // [N,C] d/d(block output): the MLP projection's output gradient
    StoredTensor mid;         // [N,C] d/d(res_attn): the attention projection's
    StoredTensor dln2, dln1;  // [N,C] the norms' output gradients
    StoredTensor dfch;        // [N,fc_tp] the fc layer's (after the activation)
    StoredTensor dqkv;        // [N,qkv_tp] the qkv layer's
  };
  std::vector<Block> blocks;
  StoredTensor input;  // [N,C] d/d(stage input): the embedding's output gradient (first stage)
  StoredTensor dlnf;   // [N,C] the final norm's (last stage; the head's is the logits slot)
};

}  // namespace trident
