// The head's forward, backward and deferred weight-gradient pass over its layers.
#include "model/output_head.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/cast.hpp"

namespace trident {

namespace {

// The vocabulary entries of this rank's slice that are real tokens, not padding.
int valid_vocab(const StageShape& s) {
  return std::clamp(s.model.vocab_size - s.layout.tp_rank * s.V_tp(), 0, s.V_tp());
}

}  // namespace

OutputHead::OutputHead(const StageContext* sc)
    : lnf(sc->norm()),
      proj(sc->layers, sc->shape->model.n_embd, sc->shape->V_tp()),
      loss(sc->layers, sc->shape->V_tp(), sc->shape->layout.tp_rank * sc->shape->V_tp(),
           valid_vocab(*sc->shape)),
      sc_(sc) {}

void OutputHead::forward(ActivationSlot& a, const StoredTensor& x, bool with_targets,
                         float gradient_scale) const {
  const int N = a.B * a.T, rows = sc_->local_rows(N);
  sc_->hooks->need("ln_f.weight", "");
  sc_->hooks->need(weight_name(), "");
  lnf.forward(a.lnf, a.lnf_mean, a.lnf_rstd, x, rows);
  proj.forward(a.logits, a.lnf, N);
  const bool fused = with_targets && gradient_scale > 0 && sc_->shape->layout.tp_size == 1;
  a.logits_gradient_scale = fused ? gradient_scale : 0.0f;
  if (fused)
    loss.forward_backward(a.losses, a.lse, a.logits, a.targets, N, gradient_scale);
  else if (with_targets)
    loss.forward(a.losses, a.lse, a.logits, a.targets, N);
}

void OutputHead::backward(const ActivationSlot& a, float loss_scale, const DeferredGrads* defer,
                          bool accumulate) const {
  const StageStorage& st = *sc_->storage;
  const int N = a.B * a.T, rows = sc_->local_rows(N);
  const size_t rows_c = static_cast<size_t>(rows) * sc_->shape->model.n_embd;
  sc_->hooks->need("ln_f.weight", "");
  sc_->hooks->need(weight_name(), sc_->hooks->first_backward_unit(sc_->shape->blocks() - 1));
  // The gradient replaces the logits (unless the forward's fused classifier wrote it), where a
  // deferred weight pass reads it.
  if (a.logits_gradient_scale == 0.0f)
    loss.backward(a.logits, a.lse, a.targets, N, loss_scale);
  else if (a.logits_gradient_scale != loss_scale)
    throw std::logic_error("OutputHead::backward: the logits' gradient was made at another scale");
  const StoredTensor dlnf = proj.backward_input(a.logits, N);
  if (!defer) proj.backward_weight(a.logits, a.lnf, N, accumulate);
  if (!defer && !sc_->shape->model.tied()) sc_->hooks->unit_done("lm_head");
  kernels::zero_stored(sc_->layers->exec, st.dresidual, rows_c);
  const StoredTensor& x = sc_->block_input(a, sc_->shape->blocks());
  if (defer) {
    lnf.backward_input(st.dresidual, dlnf, x, a.lnf_mean, a.lnf_rstd, rows);
    sc_->keep(defer->dlnf, dlnf, rows_c);
    return;
  }
  lnf.backward(st.dresidual, dlnf, x, a.lnf_mean, a.lnf_rstd, rows);
  sc_->hooks->grads_ready_from("ln_f.weight");
  sc_->hooks->unit_done("ln_f.weight");
}

void OutputHead::backward_weight(const ActivationSlot& a, const DeferredGrads& defer,
                                 bool accumulate) const {
  const int N = a.B * a.T, rows = sc_->local_rows(N);
  proj.backward_weight(a.logits, a.lnf, N, accumulate);
  if (!sc_->shape->model.tied()) sc_->hooks->unit_done("lm_head");
  lnf.backward_weight(defer.dlnf, sc_->block_input(a, sc_->shape->blocks()), a.lnf_mean, a.lnf_rstd,
                      rows);
  sc_->hooks->grads_ready_from("ln_f.weight");
  sc_->hooks->unit_done("ln_f.weight");
}

}  // namespace trident
