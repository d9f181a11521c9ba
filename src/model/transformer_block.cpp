// A transformer block's forward, backward and deferred weight-gradient pass over its layers.
#include "model/transformer_block.hpp"

#include <stdexcept>

#include "kernels/cast.hpp"

namespace trident {

void StageContext::keep(const StoredTensor& dst, const StoredTensor& src, size_t n) const {
  kernels::copy_stored(layers->exec, dst, src, n);
}

const StoredTensor& StageContext::block_input(const ActivationSlot& a, int i) const {
  return i == 0 ? a.input : a.blocks[i - 1].res_mlp;
}

Norm StageContext::norm() const {
  const ModelConfig& m = shape->model;
  return Norm(layers, m.n_embd, m.llama(), static_cast<float>(m.norm_eps));
}

TransformerBlock::TransformerBlock(const StageContext* sc, int index)
    : ln1(sc->norm()),
      qkv(sc->layers, sc->shape->model.n_embd, sc->shape->qkv_tp()),
      attention(sc->layers, sc->shape->attention_heads()),
      proj(sc->layers, sc->shape->C_tp(), sc->shape->model.n_embd),
      ln2(sc->norm()),
      fc(sc->layers, sc->shape->model.n_embd, sc->shape->fc_tp()),
      act(sc->layers, sc->shape->model.llama(), sc->shape->F_tp()),
      fcproj(sc->layers, sc->shape->F_tp(), sc->shape->model.n_embd),
      sc_(sc),
      index_(index) {
  if (sc->shape->moe_block(index)) moe.emplace(sc->layers, sc->shape->moe());
}

void TransformerBlock::forward(const BlockActivations& b, const StoredTensor& x, int B, int T,
                               bool complete, const std::string& next) const {
  UnitHooks& hooks = *sc_->hooks;
  const int N = B * T, rows = sc_->local_rows(N);
  hooks.need(unit(0), unit(1));
  ln1.forward(b.ln1, b.ln1_mean, b.ln1_rstd, x, rows);
  qkv.forward(b.qkv, b.ln1, N);
  attention.forward(b.atty, b.att_lse, b.qkv, B, T);
  hooks.need(unit(1), unit(2));
  proj.forward_residual(b.res_attn, b.atty, x, N);
  // An MoE layer's backward reads its experts' outputs: a recomputation runs them too.
  hooks.need(unit(2), complete || moe ? unit(3) : next);
  ln2.forward(b.ln2, b.ln2_mean, b.ln2_rstd, b.res_attn, rows);
  if (moe) {  // this rank's rows of the group: all N, or its share under sequence parallelism
    moe->forward_first(b.ln2, N, b.moe, sc_->storage->moe);
    hooks.need(unit(3), next);
    if (complete)
      moe->forward_second(b.res_mlp, b.res_attn, N, b.moe, sc_->storage->moe);
    else
      moe->expert_outputs(b.moe, sc_->storage->moe);
    return;
  }
  if (act.swiglu()) {
    fc.forward(b.fch, b.ln2, N);
    act.forward(b.fch_act, b.fch, N);
  } else {
    fc.forward_gelu(b.fch_act, b.fch, b.ln2, N);
  }
  if (!complete) return;
  hooks.need(unit(3), next);
  fcproj.forward_residual(b.res_mlp, b.fch_act, b.res_attn, N);
}

// Each unit's gradients are final (unit_done) before the next but one is written: ZeRO-2/3
// reduce them from two alternating buffers. With `kept`, the output gradients the weights need
// go there instead of into weight gradients.
void TransformerBlock::backward(const ActivationSlot& a, const DeferredGrads::Block* kept,
                                bool accumulate) const {
  UnitHooks& hooks = *sc_->hooks;
  const StageStorage& st = *sc_->storage;
  const int N = a.B * a.T, rows = sc_->local_rows(N);
  const BlockExtents e = sc_->shape->extents(a.B, a.T);
  const StoredTensor& dres = st.dresidual;
  const StoredTensor& x = sc_->block_input(a, index_);
  const BlockActivations b = activations_for_backward(a, x, unit(3));
  hooks.need(unit(3), unit(2));
  if (moe) {
    // Under a split (zero-bubble) backward too, an MoE layer's weight gradients are made here:
    // its experts' GEMMs read the rows the all-to-all brought, which a deferred pass would have
    // to keep. The attention's weight gradients still wait for the weight pass.
    mlp_backward_moe(b, N, rows);
  } else {
    mlp_backward_dense(b, kept, N, rows, e, accumulate);
  }
  // Attention: dres now holds d/d(res_attn) = d/d(block input) through the residual path.
  const StoredTensor dmid = proj.gather_output_grad(dres, N);
  hooks.need(unit(1), unit(0));
  proj.backward_input(st.datty, dmid, N);
  if (kept) sc_->keep(kept->mid, dres, e.rows_c);
  if (!kept) proj.backward_weight(dmid, b.atty, N, accumulate);
  if (!kept) hooks.unit_done(unit(1));
  attention.backward(st.dqkv, st.datty, b.qkv, b.atty, b.att_lse, a.B, a.T);
  hooks.need(unit(0), hooks.first_backward_unit(index_ - 1));
  const StoredTensor dln1 = qkv.backward_input(st.dqkv, N);
  attention.sum_kv_replicas(st.dqkv, N);  // after the input gradient, before the weights'
  if (kept) sc_->keep(kept->dqkv, st.dqkv, e.qkv);
  if (!kept) qkv.backward_weight(st.dqkv, b.ln1, N, accumulate);
  if (kept) {
    ln1.backward_input(dres, dln1, x, b.ln1_mean, b.ln1_rstd, rows);
    sc_->keep(kept->dln1, dln1, e.rows_c);
  } else {
    ln1.backward(dres, dln1, x, b.ln1_mean, b.ln1_rstd, rows);
  }
  if (!kept) hooks.grads_ready_from(unit(0));
  if (!kept) hooks.unit_done(unit(0));
}

// The dense MLP's backward: dres holds d/d(block output) = d/d(res_attn) through the residual
// path; the norm adds its input gradient there.
void TransformerBlock::mlp_backward_dense(const BlockActivations& b,
                                          const DeferredGrads::Block* kept, int N, int rows,
                                          const BlockExtents& e, bool accumulate) const {
  UnitHooks& hooks = *sc_->hooks;
  const StageStorage& st = *sc_->storage;
  const StoredTensor& dres = st.dresidual;
  const StoredTensor dout = fcproj.gather_output_grad(dres, N);
  if (act.swiglu())
    fcproj.backward_input(st.dact, dout, N);
  else
    fcproj.backward_input_gelu(st.dfch, st.dact, dout, b.fch, N);
  if (kept) sc_->keep(kept->out, dres, e.rows_c);
  if (!kept) fcproj.backward_weight(dout, b.fch_act, N, accumulate);
  if (!kept) hooks.unit_done(unit(3));
  hooks.need(unit(2), unit(1));
  if (act.swiglu()) act.backward(st.dfch, st.dact, b.fch, N);
  const StoredTensor dln2 = fc.backward_input(st.dfch, N);
  if (kept) sc_->keep(kept->dfch, st.dfch, e.fc);
  if (!kept) fc.backward_weight(st.dfch, b.ln2, N, accumulate);
  if (kept) {
    ln2.backward_input(dres, dln2, b.res_attn, b.ln2_mean, b.ln2_rstd, rows);
    sc_->keep(kept->dln2, dln2, e.rows_c);
  } else {
    ln2.backward(dres, dln2, b.res_attn, b.ln2_mean, b.ln2_rstd, rows);
  }
  if (!kept) hooks.unit_done(unit(2));
}

// The MoE layer's backward over this rank's rows (as forward's): the experts' second
// projections (unit 3), then their first, the router and the norm (unit 2). Its gradients
// accumulate onto the cleared ones (grads_to_clear).
void TransformerBlock::mlp_backward_moe(const BlockActivations& b, int N, int rows) const {
  UnitHooks& hooks = *sc_->hooks;
  const StageStorage& st = *sc_->storage;
  const StoredTensor& dres = st.dresidual;
  const StoredTensor& dln2 = sc_->layers->ws->dinput;
  moe->backward_second(dres, N, b.moe, st.moe, true);
  hooks.unit_done(unit(3));
  hooks.need(unit(2), unit(1));
  moe->backward_first(dln2, b.ln2, N, b.moe, st.moe, sc_->moe_scales, true);
  ln2.backward(dres, dln2, b.res_attn, b.ln2_mean, b.ln2_rstd, rows);
  hooks.unit_done(unit(2));
}

void TransformerBlock::moe_losses(const Vec& out, const BlockActivations& b, int N) const {
  moe->losses(out, N, b.moe, sc_->storage->moe);
}

// The weight gradients backward left in `kept`, in its order, from the same operands (so the
// same bits; sequence parallelism gathers the same rows again). Only recomputation reads
// parameters here.
void TransformerBlock::backward_weight(const ActivationSlot& a, const DeferredGrads::Block& kept,
                                       bool accumulate) const {
  const UnitHooks& hooks = *sc_->hooks;
  const int N = a.B * a.T, rows = sc_->local_rows(N);
  const StoredTensor& x = sc_->block_input(a, index_);
  // After a recomputation the next parameters read are the previous block's, if recomputed.
  const bool previous_recomputed =
      index_ > 0 && sc_->shape->buffers.recompute.full_block(index_ - 1);
  const std::string next = previous_recomputed ? hooks.unit_param(index_ - 1, 0) : "";
  const BlockActivations b = activations_for_backward(a, x, next);
  if (!moe) {  // an MoE layer made its weight gradients in backward
    fcproj.backward_weight(fcproj.gather_output_grad(kept.out, N), b.fch_act, N, accumulate);
    hooks.unit_done(unit(3));
    fc.backward_weight(kept.dfch, b.ln2, N, accumulate);
    ln2.backward_weight(kept.dln2, b.res_attn, b.ln2_mean, b.ln2_rstd, rows);
    hooks.unit_done(unit(2));
  }
  proj.backward_weight(proj.gather_output_grad(kept.mid, N), b.atty, N, accumulate);
  hooks.unit_done(unit(1));
  qkv.backward_weight(kept.dqkv, b.ln1, N, accumulate);
  ln1.backward_weight(kept.dln1, x, b.ln1_mean, b.ln1_rstd, rows);
  hooks.grads_ready_from(unit(0));
  hooks.unit_done(unit(0));
}

namespace {

void or_shared(StoredTensor& t, const StoredTensor& shared) {
  if (t.empty()) t = shared;
}
void or_shared(View1& t, const View1& shared) {
  if (t.extent(0) == 0) t = shared;
}
void or_shared(IntView1& t, const IntView1& shared) {
  if (t.extent(0) == 0) t = shared;
}
void or_shared(MoeActivations& m, const MoeActivations& s) {
  or_shared(m.logits, s.logits), or_shared(m.scores, s.scores), or_shared(m.weight, s.weight);
  or_shared(m.choice, s.choice), or_shared(m.row, s.row), or_shared(m.local_row, s.local_row);
  or_shared(m.counts, s.counts);
  or_shared(m.offsets, s.offsets), or_shared(m.dispatched, s.dispatched);
  or_shared(m.arrivals, s.arrivals), or_shared(m.arrived, s.arrived);
  or_shared(m.shared_fc, s.shared_fc), or_shared(m.shared_act, s.shared_act);
  or_shared(m.fc, s.fc), or_shared(m.act, s.act), or_shared(m.expert_out, s.expert_out);
}

}  // namespace

BlockActivations TransformerBlock::working(const ActivationSlot& a,
                                           const StoredTensor& sent) const {
  BlockActivations b = a.blocks[index_];
  if (!sent.empty()) b.res_mlp = sent;
  const BlockActivations& s = sc_->storage->shared;
  or_shared(b.ln1, s.ln1), or_shared(b.ln1_mean, s.ln1_mean), or_shared(b.ln1_rstd, s.ln1_rstd);
  or_shared(b.qkv, s.qkv), or_shared(b.att_lse, s.att_lse), or_shared(b.atty, s.atty);
  or_shared(b.res_attn, s.res_attn);
  or_shared(b.ln2, s.ln2), or_shared(b.ln2_mean, s.ln2_mean), or_shared(b.ln2_rstd, s.ln2_rstd);
  or_shared(b.fch, s.fch), or_shared(b.fch_act, s.fch_act);
  if (moe) or_shared(b.moe, s.moe);
  return b;
}

BlockActivations TransformerBlock::activations_for_backward(const ActivationSlot& a,
                                                            const StoredTensor& x,
                                                            const std::string& next) const {
  const BlockActivations b = working(a);
  if (sc_->shape->buffers.recompute.full_block(index_)) {
    ScopedPhase phase(sc_->timer, Phase::kRecompute);
    forward(b, x, a.B, a.T, false, next);
  }
  return b;
}

}  // namespace trident
