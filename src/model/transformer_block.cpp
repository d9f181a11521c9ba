// A transformer block's forward, backward and deferred weight-gradient pass over its layers.
#include "model/transformer_block.hpp"

#include "kernels/cast.hpp"

namespace trident {

void StageContext::keep(const StoredTensor& dst, const View1& src, size_t n) const {
  kernels::keep(layers->exec, dst, src, n);
}

View1 StageContext::kept_values(const StoredTensor& src, const View1& work, size_t n) const {
  const View1 values = working_view(src, work);
  kernels::restore(layers->exec, values, src, n);
  return values;
}

View1 StageContext::block_input(const ActivationSlot& a, int i) const {
  const size_t rows_c = static_cast<size_t>(local_rows(a.B * a.T)) * shape->model.n_embd;
  return kept_values(i == 0 ? a.input : a.blocks[i - 1].res_mlp, storage->work_x, rows_c);
}

TransformerBlock::TransformerBlock(const StageContext* sc, int index)
    : ln1(sc->layers, sc->shape->model.n_embd),
      qkv(sc->layers, sc->shape->model.n_embd, 3 * sc->shape->C_tp()),
      attention(sc->layers, sc->shape->heads_tp(), sc->shape->model.head_size()),
      proj(sc->layers, sc->shape->C_tp(), sc->shape->model.n_embd),
      residual(sc->layers),
      ln2(sc->layers, sc->shape->model.n_embd),
      fc(sc->layers, sc->shape->model.n_embd, sc->shape->F_tp()),
      gelu(sc->layers),
      fcproj(sc->layers, sc->shape->F_tp(), sc->shape->model.n_embd),
      sc_(sc),
      index_(index) {}

void TransformerBlock::forward(const BlockActivations& b, const View1& x, int B, int T,
                               bool complete, const std::string& next) const {
  UnitHooks& hooks = *sc_->hooks;
  const int N = B * T, rows = sc_->local_rows(N);
  const size_t rows_c = static_cast<size_t>(rows) * sc_->shape->model.n_embd;
  hooks.need(unit(0), unit(1));
  ln1.forward(b.ln1, b.ln1_mean, b.ln1_rstd, x, rows);
  qkv.forward(b.qkv, b.ln1, N);
  attention.forward(b.atty, b.att_lse, b.qkv, B, T);
  hooks.need(unit(1), unit(2));
  residual.forward(b.res_attn, x, proj.forward(b.atty, N), rows_c);
  hooks.need(unit(2), complete ? unit(3) : next);
  ln2.forward(b.ln2, b.ln2_mean, b.ln2_rstd, b.res_attn, rows);
  fc.forward(b.fch, b.ln2, N);
  gelu.forward(b.fch_gelu, b.fch, static_cast<size_t>(N) * sc_->shape->F_tp());
  if (!complete) return;
  hooks.need(unit(3), next);
  residual.forward(b.res_mlp, b.res_attn, fcproj.forward(b.fch_gelu, N), rows_c);
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
  const View1& dres = st.dresidual;
  const View1 x = sc_->block_input(a, index_);
  const BlockActivations b = activations_for_backward(a, x, unit(3));
  hooks.need(unit(3), unit(2));
  // MLP: dres holds d/d(block output) = d/d(res_attn) through the residual path.
  const View1 dout = fcproj.gather_output_grad(dres, N);
  fcproj.backward_input(st.dfch, dout, N);
  if (kept) sc_->keep(kept->out, dres, e.rows_c);
  if (!kept) fcproj.backward_weight(dout, b.fch_gelu, N, accumulate);
  if (!kept) hooks.unit_done(unit(3));
  hooks.need(unit(2), unit(1));
  gelu.backward(st.dfch, b.fch, e.fc);
  const View1 dln2 = fc.backward_input(st.dfch, N);
  if (kept) sc_->keep(kept->dfch, st.dfch, e.fc);
  if (!kept) fc.backward_weight(st.dfch, b.ln2, N, accumulate);
  ln2.backward_input(dres, dln2, b.res_attn, b.ln2_mean, b.ln2_rstd, rows);
  if (kept) sc_->keep(kept->dln2, dln2, e.rows_c);
  if (!kept) ln2.backward_weight(dln2, b.res_attn, b.ln2_mean, b.ln2_rstd, rows);
  if (!kept) hooks.unit_done(unit(2));
  sc_->layers->round(dres, e.rows_c);
  // Attention: dres now holds d/d(res_attn) = d/d(block input) through the residual path.
  const View1 dmid = proj.gather_output_grad(dres, N);
  hooks.need(unit(1), unit(0));
  proj.backward_input(st.datty, dmid, N);
  if (kept) sc_->keep(kept->mid, dres, e.rows_c);
  if (!kept) proj.backward_weight(dmid, b.atty, N, accumulate);
  if (!kept) hooks.unit_done(unit(1));
  attention.backward(st.dqkv, st.datty, b.qkv, b.atty, b.att_lse, a.B, a.T);
  hooks.need(unit(0), hooks.first_backward_unit(index_ - 1));
  const View1 dln1 = qkv.backward_input(st.dqkv, N);
  if (kept) sc_->keep(kept->dqkv, st.dqkv, e.qkv);
  if (!kept) qkv.backward_weight(st.dqkv, b.ln1, N, accumulate);
  ln1.backward_input(dres, dln1, x, b.ln1_mean, b.ln1_rstd, rows);
  if (kept) sc_->keep(kept->dln1, dln1, e.rows_c);
  if (!kept) ln1.backward_weight(dln1, x, b.ln1_mean, b.ln1_rstd, rows);
  if (!kept) hooks.grads_ready_from(unit(0));
  if (!kept) hooks.unit_done(unit(0));
  sc_->layers->round(dres, e.rows_c);
}

// The weight gradients backward left in `kept`, in its order, from the same operands (so the
// same bits; sequence parallelism gathers the same rows again). Only recomputation reads
// parameters here.
void TransformerBlock::backward_weight(const ActivationSlot& a, const DeferredGrads::Block& kept,
                                       bool accumulate) const {
  const UnitHooks& hooks = *sc_->hooks;
  const StageStorage& st = *sc_->storage;
  const int N = a.B * a.T, rows = sc_->local_rows(N);
  const BlockExtents e = sc_->shape->extents(a.B, a.T);
  const View1& dln = st.layers.dinput;
  const View1 x = sc_->block_input(a, index_);
  // After a recomputation the next parameters read are the previous block's, if recomputed.
  const bool previous_recomputed =
      index_ > 0 && sc_->shape->buffers.recompute.full_block(index_ - 1);
  const std::string next = previous_recomputed ? hooks.unit_param(index_ - 1, 0) : "";
  const BlockActivations b = activations_for_backward(a, x, next);
  const auto values = [&](const StoredTensor& k, const View1& work, size_t n) {
    return sc_->kept_values(k, work, n);
  };
  fcproj.backward_weight(fcproj.gather_output_grad(values(kept.out, st.dresidual, e.rows_c), N),
                         b.fch_gelu, N, accumulate);
  hooks.unit_done(unit(3));
  fc.backward_weight(values(kept.dfch, st.dfch, e.fc), b.ln2, N, accumulate);
  ln2.backward_weight(values(kept.dln2, dln, e.rows_c), b.res_attn, b.ln2_mean, b.ln2_rstd, rows);
  hooks.unit_done(unit(2));
  proj.backward_weight(proj.gather_output_grad(values(kept.mid, st.dresidual, e.rows_c), N), b.atty,
                       N, accumulate);
  hooks.unit_done(unit(1));
  qkv.backward_weight(values(kept.dqkv, st.dqkv, e.qkv), b.ln1, N, accumulate);
  ln1.backward_weight(values(kept.dln1, dln, e.rows_c), x, b.ln1_mean, b.ln1_rstd, rows);
  hooks.grads_ready_from(unit(0));
  hooks.unit_done(unit(0));
}

BlockActivations TransformerBlock::working(const ActivationSlot& a,
                                           const StoredTensor& sent) const {
  BlockKept k = a.blocks[index_];
  if (!sent.empty()) k.res_mlp = sent;
  BlockActivations b = sc_->storage->shared;
  for_each_kept(k, b, BlockExtents{}, [](const StoredTensor& kept, View1& work, size_t) {
    work = working_view(kept, work);
  });
  if (k.ln1_mean.extent(0) > 0) {  // the statistics are kept in fp32 where they are written
    b.ln1_mean = k.ln1_mean, b.ln1_rstd = k.ln1_rstd;
    b.att_lse = k.att_lse;
    b.ln2_mean = k.ln2_mean, b.ln2_rstd = k.ln2_rstd;
  }
  return b;
}

void TransformerBlock::keep(const ActivationSlot& a, const BlockActivations& b,
                            const StoredTensor& sent) const {
  BlockKept k = a.blocks[index_];
  if (!sent.empty()) k.res_mlp = sent;
  for_each_kept(k, b, sc_->shape->extents(a.B, a.T),
                [&](const StoredTensor& kept, const View1& work, size_t n) {
                  if (!kept.empty()) sc_->keep(kept, work, n);
                });
}

BlockActivations TransformerBlock::activations_for_backward(const ActivationSlot& a, const View1& x,
                                                            const std::string& next) const {
  BlockActivations b = working(a);
  const Recompute& recompute = sc_->shape->buffers.recompute;
  if (recompute.full_block(index_)) {
    ScopedPhase phase(sc_->timer, Phase::kRecompute);
    forward(b, x, a.B, a.T, false, next);
    return b;
  }
  const BlockKept& k = a.blocks[index_];
  // Backward does not read the block's output.
  for_each_kept(k, b, sc_->shape->extents(a.B, a.T),
                [&](const StoredTensor& kept, const View1& work, size_t n) {
                  const bool read = &kept != &k.res_mlp;
                  if (read && !kept.empty()) kernels::restore(sc_->layers->exec, work, kept, n);
                });
  return b;
}

}  // namespace trident
