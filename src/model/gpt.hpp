// The GPT-2 model on one rank: parameters, gradients, activations, forward and backward.
#pragma once

#include <vector>

#include "core/memory.hpp"
#include "core/types.hpp"
#include "model/config.hpp"
#include "model/params.hpp"

namespace trident {

// Windows onto one transformer block's tensors inside a flat buffer (parameters or gradients).
struct BlockTensors {
  Vec ln1_w, ln1_b;  // [C]
  Mat qkv_w;         // [3C, C]
  Vec qkv_b;         // [3C]
  Mat proj_w;        // [C, C]
  Vec proj_b;        // [C]
  Vec ln2_w, ln2_b;  // [C]
  Mat fc_w;          // [4C, C]
  Vec fc_b;          // [4C]
  Mat fcproj_w;      // [C, 4C]
  Vec fcproj_b;      // [C]
};

struct ModelTensors {
  Mat wte;  // [V, C], also the output projection (tied)
  Mat wpe;  // [block_size, C]
  std::vector<BlockTensors> blocks;
  Vec lnf_w, lnf_b;  // [C]
};

ModelTensors model_tensors(const ParamTable& table, const ModelConfig& m, const View1& flat);

// What forward keeps for backward, per block. Sized for the largest micro-batch (B, T).
struct BlockActivations {
  View1 ln1, ln1_mean, ln1_rstd;  // [N,C], [N], [N]
  View1 qkv;                      // [N,3C]
  View1 att;                      // [B,NH,T,T] softmax probabilities
  View1 atty;                     // [N,C]
  View1 res_attn;                 // [N,C] residual stream after attention
  View1 ln2, ln2_mean, ln2_rstd;  // [N,C], [N], [N]
  View1 fch, fch_gelu;            // [N,4C]
  View1 res_mlp;                  // [N,C] residual stream after the MLP (block output)
};

class Gpt {
 public:
  Gpt(const ModelConfig& m, MemoryLedger& ledger, int max_batch, int max_seq);

  const ModelConfig& config() const { return m_; }
  const ParamTable& table() const { return table_; }
  View1 params() const { return params_; }
  View1 grads() const { return grads_; }

  // Fills every parameter from the counter-based initialiser.
  void init_params(uint64_t seed);
  void zero_grads();

  // Runs the model on tokens[B*T] (host memory). With targets, computes per-token losses and
  // returns their sum; without (nullptr), only the logits are computed and 0 is returned.
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Accumulates d(loss_scale * sum of per-token losses)/d(params) into grads().
  void backward(float loss_scale);
  // Logits [B*T, V] of the last forward.
  ConstMat logits() const;

 private:
  ModelConfig m_;
  ParamTable table_;
  Exec exec_;
  int max_B_, max_T_, B_ = 0, T_ = 0;
  View1 params_, grads_;
  ModelTensors p_, g_;
  IntView1 tokens_, targets_;
  IntView1::HostMirror tokens_host_, targets_host_;
  View1 encoded_;  // [N,C]
  std::vector<BlockActivations> acts_;
  View1 lnf_, lnf_mean_, lnf_rstd_;  // [N,C], [N], [N]
  View1 logits_;                     // [N,V]; overwritten by its gradient in backward
  View1 losses_, lse_;               // [N]
  View1 scratch_c_;                  // [N,C] attention / MLP projection outputs
  // Backward buffers.
  View1 dresidual_, dln_, datty_;  // [N,C]
  View1 dqkv_;                     // [N,3C]
  View1 dfch_;                     // [N,4C]
  View1 datt_scratch_;             // [B*NH, T]
};

}  // namespace trident
