// The head's forward, backward and deferred weight-gradient pass over its layers.
#include "model/output_head.hpp"

#include <algorithm>

namespace trident {

namespace {

// The vocabulary entries of this rank's slice that are real tokens, not padding.
int valid_vocab(const StageShape& s) {
  return std::clamp(s.model.vocab_size - s.layout.tp_rank * s.V_tp(), 0, s.V_tp());
}

}  // namespace

OutputHead::OutputHead(const StageContext* sc)
    : lnf(sc->layers, sc->shape->model.n_embd),
      proj(sc->layers, sc->shape->model.n_embd, sc->shape->V_tp()),
      loss(sc->layers, sc->shape->V_tp(), sc->shape->layout.tp_rank * sc->shape->V_tp(),
           valid_vocab(*sc->shape)),
      sc_(sc) {}

double OutputHead::forward(ActivationSlot& a, const View1& x, bool with_targets) const {
  const StageStorage& st = *sc_->storage;
  const int N = a.B * a.T, rows = sc_->local_rows(N);
  sc_->hooks->need("ln_f.weight", "");
  sc_->hooks->need("wte", "");
  const View1 lnf_out = working_view(a.lnf, st.work_lnf);
  const View1 logits = working_view(a.logits, st.work_logits);
  lnf.forward(lnf_out, a.lnf_mean, a.lnf_rstd, x, rows);
  proj.forward(logits, lnf_out, N);
  sc_->keep(a.lnf, lnf_out, static_cast<size_t>(rows) * sc_->shape->model.n_embd);
  sc_->keep(a.logits, logits, static_cast<size_t>(N) * sc_->shape->V_tp());
  return with_targets ? loss.forward(a.losses, a.lse, logits, a.targets, N) : 0.0;
}

void OutputHead::backward(const ActivationSlot& a, float loss_scale, const DeferredGrads* defer,
                          bool accumulate) const {
  const StageStorage& st = *sc_->storage;
  const int N = a.B * a.T, rows = sc_->local_rows(N);
  const size_t rows_c = static_cast<size_t>(rows) * sc_->shape->model.n_embd;
  const size_t logits_n = static_cast<size_t>(N) * sc_->shape->V_tp();
  sc_->hooks->need("ln_f.weight", "");
  sc_->hooks->need("wte", sc_->hooks->first_backward_unit(sc_->shape->blocks() - 1));
  const View1 logits = sc_->kept_values(a.logits, st.work_logits, logits_n);
  const View1 lnf_out = sc_->kept_values(a.lnf, st.work_lnf, rows_c);
  loss.backward(logits, a.lse, a.targets, N, loss_scale);  // the gradient replaces the logits
  const View1 dlnf = proj.backward_input(logits, N);
  if (!defer) proj.backward_weight(logits, lnf_out, N, accumulate);
  if (defer) sc_->keep(a.logits, logits, logits_n);  // the weight pass reads the gradient there
  Kokkos::deep_copy(sc_->layers->exec, window(st.dresidual, 0, rows_c), 0.0f);
  const View1 x = sc_->block_input(a, sc_->shape->blocks());
  lnf.backward_input(st.dresidual, dlnf, x, a.lnf_mean, a.lnf_rstd, rows);
  if (defer) {
    sc_->keep(defer->dlnf, dlnf, rows_c);
  } else {
    lnf.backward_weight(dlnf, x, a.lnf_mean, a.lnf_rstd, rows);
    sc_->hooks->grads_ready_from("ln_f.weight");
    sc_->hooks->unit_done("ln_f.weight");
  }
  sc_->layers->round(st.dresidual, rows_c);
}

void OutputHead::backward_weight(const ActivationSlot& a, const DeferredGrads& defer,
                                 bool accumulate) const {
  const StageStorage& st = *sc_->storage;
  const int N = a.B * a.T, rows = sc_->local_rows(N);
  const size_t rows_c = static_cast<size_t>(rows) * sc_->shape->model.n_embd;
  const size_t logits_n = static_cast<size_t>(N) * sc_->shape->V_tp();
  proj.backward_weight(sc_->kept_values(a.logits, st.work_logits, logits_n),
                       sc_->kept_values(a.lnf, st.work_lnf, rows_c), N, accumulate);
  lnf.backward_weight(sc_->kept_values(defer.dlnf, st.layers.dinput, rows_c),
                      sc_->block_input(a, sc_->shape->blocks()), a.lnf_mean, a.lnf_rstd, rows);
  sc_->hooks->grads_ready_from("ln_f.weight");
  sc_->hooks->unit_done("ln_f.weight");
}

}  // namespace trident
