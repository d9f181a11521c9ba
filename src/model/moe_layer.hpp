// The Mixture-of-Experts layer (SwiGLU experts, the Llama family): the router in fp32, top-k
// routing with capacity (kernels/moe_routing.hpp), tokens dispatched into an expert-ordered
// buffer, each expert's MLP as GEMMs over its own rows, and the combine in slot order, with the
// shared experts' output (DeepSeek's: a SwiGLU MLP every token runs) added. Under expert
// parallelism a rank holds E / ep experts: the dispatched rows go to their experts' ranks and the
// outputs come back by all-to-all (model/expert_parallel.hpp).
#pragma once

#include "core/stored.hpp"
#include "core/types.hpp"
#include "kernels/moe_options.hpp"
#include "kernels/moe_routing.hpp"
#include "model/activations.hpp"
#include "model/layers.hpp"
#include "model/model_config.hpp"

namespace trident {

// The sizes and choices an MoE layer runs with.
struct MoeShape {
  int C = 0, E = 0, k = 1, Fe = 0;  // channels, experts, experts per token, an expert's width
  double capacity_factor = 0;       // 0: dropless
  kernels::RouterScore router = kernels::RouterScore::kSoftmax;
  kernels::DropPolicy drop_policy = kernels::DropPolicy::kProbs;
  int Fs = 0;               // the shared experts' width (n_shared x Fe), 0 without them
  bool gelu = false;        // GPT-2's experts: GELU MLPs with biases; Llama's: SwiGLU, none
  int ep = 1, ep_rank = 0;  // expert-parallel ranks; this one holds experts [ep_rank E_local, ...)
  // Ranks that split a group's tokens (the tensor-parallel ranks under sequence parallelism); this
  // one routes tokens [tp_rank N / tp, ...) of a group of N. Routing decides over the whole group.
  int tp = 1, tp_rank = 0;
  static MoeShape of(const ModelConfig& m, int ep = 1, int ep_rank = 0, int tp = 1,
                     int tp_rank = 0);
  int E_local() const { return E / ep; }
  int local_tokens(int N) const { return N / tp; }
  // A first projection's rows for an MLP of hidden width F: gate | up (2 F), or F under GELU.
  int width(int F) const { return gelu ? F : 2 * F; }
  // Slots an expert keeps of a group of T tokens: 0 (dropless) or ceil(T k / E x factor).
  int capacity(int T) const;
  // The most rows that can arrive at one rank's experts when each rank of the group routes its n
  // tokens: a token sends at most min(k, E_local) slots to one rank's experts, so ep n min(k,
  // E_local) (n k with one rank); with a capacity, also at most ep E_local C (each of at most ep
  // groups keeps C slots an expert), whichever is smaller. The buffers are sized by it: routing
  // never overflows them.
  size_t arrived_rows(size_t n) const;
};

// An MoE layer's parameters (storage format) or their gradients (fp32), flat.
struct MoeParams {
  StoredTensor router;  // [E, C]
  StoredTensor fc;      // [E, 2 Fe, C]: each expert's gate | up ([E, Fe, C] under GELU)
  StoredTensor proj;    // [E, C, Fe]
  // The shared experts (every token runs them), one MLP of width Fs; empty without.
  StoredTensor shared_fc, shared_proj;  // [width(Fs), C], [C, Fs]
  // GELU experts' biases (GPT-2); empty for Llama's.
  StoredTensor fc_bias, proj_bias;                // [E, Fe], [E, C]
  StoredTensor shared_fc_bias, shared_proj_bias;  // [Fs], [C]
};

// Scratch every MoE layer reuses.
struct MoeScratch {
  IntView1 listed, listed_offsets, kept;  // the dispatch plan's: [N k], [E + 1], [N k]
  // tp > 1: the group plan's offsets [E + 1] (this rank's are the activations'), and a weight
  // gradient from this rank's tokens (the router's [E, C], a shared projection's [2 Fs, C] or
  // [C, Fs]) summed over tp before it is added; empty with tp = 1.
  IntView1 group_offsets;
  View1 grad_share;
  View1 x32, router32;  // 16-bit storage: [N, C] the input, [E, C] the router
  // [n, E], [n, k], [n, C] for this rank's n tokens (forward gathers the logits over tp from
  // dlogits, free until backward).
  View1 dlogits, dweight, dx_router;
  StoredTensor dexpert_out, dact;  // [N k, C], [arrived, Fe]
  StoredTensor dfc, ddispatched;   // [arrived, 2 Fe], [N k, C]
  View1 expert_mass;               // [E]
  // Shared experts: their output [N, C] (forward), the gradients of their activation [N, Fs] and
  // of their first projection [N, 2 Fs] (backward); empty without.
  StoredTensor shared_out, dshared_act, dshared_fc;
  // ep > 1: rows on their way back from the experts ([arrived, C]: outputs, and the gradients of
  // their outputs and inputs in turn); empty with ep = 1, where the experts' rows are this
  // rank's own.
  StoredTensor exchanged;
};

class MoeLayer {
 public:
  MoeLayer(const LayerContext* ctx, const MoeShape& shape);
  MoeParams weights, grads;
  // [E] added to the scores to choose the experts, not to weigh them (the aux-loss-free balance,
  // DeepSeek-V3); empty: none.
  ConstVec selection_bias;

  // N is the group's tokens, of which this rank holds n = shape.local_tokens(N): x, out, dx and
  // dout are [n, C].
  // out [n, C] from x [n, C] (routing, experts, combine); a holds what backward reads.
  void forward(const StoredTensor& out, const StoredTensor& x, int N, const MoeActivations& a,
               const MoeScratch& s) const;
  // dx [n, C] (overwritten) from dout [n, C], forward's x and a: through the experts, the
  // combine weights and the balancing losses (scales) to the router. Weight gradients += (=
  // without `accumulate`: the step's first write).
  void backward(const StoredTensor& dx, const StoredTensor& dout, const StoredTensor& x, int N,
                const MoeActivations& a, const MoeScratch& s, kernels::RouterLossScales scales,
                bool accumulate) const;

  // The same in the halves a block runs between its ZeRO units. The first reads the router and
  // the experts' first projections (routing, dispatch, gate | up, activation); the second the
  // experts' second projections (down, then the combine: out = residual + the experts' sum,
  // residual may be empty). Backward runs the second half's first.
  void forward_first(const StoredTensor& x, int N, const MoeActivations& a,
                     const MoeScratch& s) const;
  void forward_second(const StoredTensor& out, const StoredTensor& residual, int N,
                      const MoeActivations& a, const MoeScratch& s) const;
  // forward_second without the combine: the experts' outputs, which backward reads (what a
  // recomputed block rebuilds).
  void expert_outputs(const MoeActivations& a, const MoeScratch& s) const;
  void backward_second(const StoredTensor& dout, int N, const MoeActivations& a,
                       const MoeScratch& s, bool accumulate) const;
  void backward_first(const StoredTensor& dx, const StoredTensor& x, int N, const MoeActivations& a,
                      const MoeScratch& s, kernels::RouterLossScales scales, bool accumulate) const;
  // The group's balancing losses, unscaled, into out[0] (aux) and out[1] (z)
  // (kernels::router_losses).
  void losses(const Vec& out, int N, const MoeActivations& a, const MoeScratch& s) const;

 private:
  struct Routed;  // where this rank's experts' rows are (moe_layer.cpp)
  // The rows of this forward's group at this rank's experts; `exchange` (forward_first) sends the
  // counts and the rows over the expert-parallel group, else the counts a.arrivals kept are read.
  Routed routed(const MoeActivations& a, bool exchange) const;
  // This rank's slots' rows in its expert-ordered buffers [n, k], and their combine weights.
  ConstIntMat rows_here(const MoeActivations& a, int N) const;
  ConstMat weights_here(const MoeActivations& a, int N) const;
  // The router's input and weight in fp32 (windows onto x and the weight under fp32 storage).
  ConstMat input32(const StoredTensor& x, int N, const MoeScratch& s) const;
  ConstMat router32(const MoeScratch& s) const;

  const LayerContext* ctx_;
  MoeShape shape_;
};

}  // namespace trident
