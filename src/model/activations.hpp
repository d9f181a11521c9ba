// What a stage keeps between passes: per in-flight micro-batch (an activation slot) the tensors
// backward reads, in the storage format; per pending weight-gradient pass the output gradients it
// multiplies with them. And the fp32 views the ops of one block compute on.
#pragma once

#include <cstddef>
#include <vector>

#include "core/stored.hpp"
#include "core/types.hpp"

namespace trident {

// The fp32 tensors one block's ops read and write. Each is the slot's own where the slot keeps it
// in fp32, else a buffer the stage shares between blocks and slots (16-bit storage computes there
// and keeps a rounded copy; recomputation rebuilds what was not kept). Under sequence parallelism
// the tensors outside the tensor-parallel regions (ln1, res_attn, ln2, res_mlp and the LayerNorm
// statistics) hold local_rows(N) rows.
struct BlockActivations {
  View1 ln1, ln1_mean, ln1_rstd;  // [N,C], [N], [N]
  View1 qkv;                      // [N,3C_tp]
  View1 att_lse;                  // [B,NH_tp,T] each query row's softmax log-sum-exp
  View1 atty;                     // [N,C_tp]
  View1 res_attn;                 // [N,C] residual stream after attention
  View1 ln2, ln2_mean, ln2_rstd;  // [N,C], [N], [N]
  View1 fch, fch_gelu;            // [N,4C_tp]
  View1 res_mlp;                  // [N,C] residual stream after the MLP (block output)
};

// What a slot keeps of one block for backward, in the storage format (the LayerNorm and softmax
// statistics in fp32). A block recomputed whole keeps only res_mlp; the last block of a stage
// without the head keeps no res_mlp (it is sent).
struct BlockKept {
  StoredTensor ln1, qkv, atty, res_attn, ln2, fch, fch_gelu, res_mlp;
  View1 ln1_mean, ln1_rstd, att_lse, ln2_mean, ln2_rstd;
};

// The extents of a block's tensors, in elements, for a micro-batch of N = B*T token rows.
struct BlockExtents {
  size_t rows_c;  // [local rows, C]
  size_t qkv;     // [N, 3C_tp]
  size_t heads;   // [N*NH_tp] a value per (token row, head)
  size_t atty;    // [N, C_tp]
  size_t fc;      // [N, 4C_tp]
  size_t stats;   // [local rows]
};

// Calls f(kept, working, extent) for every tensor a block keeps, beside the working view it is
// kept from and its extent: keeping, restoring and choosing working views are loops over this.
template <class Kept, class Work, class F>
void for_each_kept(Kept& k, Work& b, const BlockExtents& e, F&& f) {
  f(k.ln1, b.ln1, e.rows_c);
  f(k.qkv, b.qkv, e.qkv);
  f(k.atty, b.atty, e.atty);
  f(k.res_attn, b.res_attn, e.rows_c);
  f(k.ln2, b.ln2, e.rows_c);
  f(k.fch, b.fch, e.fc);
  f(k.fch_gelu, b.fch_gelu, e.fc);
  f(k.res_mlp, b.res_mlp, e.rows_c);
}

// One in-flight micro-batch's activations. Under sequence parallelism input and lnf hold
// local_rows(N) rows.
struct ActivationSlot {
  IntView1 tokens, targets;       // [N]
  StoredTensor input;             // [N,C] embeddings (first stage) or received input
  std::vector<BlockKept> blocks;  // per local layer
  StoredTensor lnf;               // [N,C]      (last stage)
  View1 lnf_mean, lnf_rstd;       // [N], [N]
  StoredTensor logits;            // [N,V_tp]; overwritten by its gradient in backward
  View1 losses, lse;              // [N]
  int B = 0, T = 0;
};

// What an input-gradient pass keeps for its deferred weight-gradient pass (zero-bubble
// schedules): the output gradient of every linear layer and LayerNorm, which the weight gradients
// multiply with activations the micro-batch's slot still holds. [N,C] tensors outside the
// tensor-parallel regions hold local_rows(N) rows under sequence parallelism.
struct DeferredGrads {
  struct Block {
    StoredTensor out;         // [N,C] d/d(block output): the MLP projection's output gradient
    StoredTensor mid;         // [N,C] d/d(res_attn): the attention projection's
    StoredTensor dln2, dln1;  // [N,C] the LayerNorms' output gradients
    StoredTensor dfch;        // [N,4C_tp] the fc layer's (after the GELU)
    StoredTensor dqkv;        // [N,3C_tp] the qkv layer's
  };
  std::vector<Block> blocks;
  StoredTensor input;  // [N,C] d/d(stage input): the embedding's output gradient (first stage)
  StoredTensor dlnf;   // [N,C] the final LayerNorm's (last stage; the head's is the logits slot)
};

}  // namespace trident
