// GPT-2 stage forward and backward, composed from the kernels, with Megatron tensor parallelism:
// column-parallel qkv / fc, row-parallel projections (their sum all-reduced over tp: the "g"
// operator), input gradients of column-parallel layers all-reduced in backward (the "f"
// operator), vocabulary-parallel embedding and cross-entropy; under sequence parallelism the
// all-reduces become reduce-scatters, and the column-parallel layers' inputs all-gathers.
#include "model/gpt.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/error.hpp"
#include "kernels/attention.hpp"
#include "kernels/cast.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/linear.hpp"
#include "kernels/residual.hpp"
#include "parallel/pipeline/schedule.hpp"

namespace trident {

using namespace kernels;

StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const View1& flat) {
  return stage_tensors(local, layout, [&](const LocalParam& p) { return flat.data() + p.offset; });
}

StageTensors stage_tensors(const LocalParamTable& local, const StageLayout& layout,
                           const TensorLocator& where) {
  auto vec = [&](const std::string& name) {
    const LocalParam& p = local.at(name);
    return Vec(where(p), p.numel);
  };
  auto mat = [&](const std::string& name) {
    const LocalParam& p = local.at(name);
    return Mat(where(p), p.shape[0], p.shape[1]);
  };
  StageTensors t;
  if (local.holds("wte")) t.wte = mat("wte");
  if (layout.has_embedding) t.wpe = mat("wpe");
  for (int l = layout.first_layer; l < layout.last_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    t.blocks.push_back({vec(h + "ln_1.weight"), vec(h + "ln_1.bias"), mat(h + "attn.qkv.weight"),
                        vec(h + "attn.qkv.bias"), mat(h + "attn.proj.weight"),
                        vec(h + "attn.proj.bias"), vec(h + "ln_2.weight"), vec(h + "ln_2.bias"),
                        mat(h + "mlp.fc.weight"), vec(h + "mlp.fc.bias"),
                        mat(h + "mlp.proj.weight"), vec(h + "mlp.proj.bias")});
  }
  if (layout.has_head) {
    t.lnf_w = vec("ln_f.weight");
    t.lnf_b = vec("ln_f.bias");
  }
  return t;
}

GptStage::GptStage(const ModelConfig& m, const StageLayout& layout, Communicator* tp,
                   MemoryLedger& ledger, int max_batch, int max_seq, int slots,
                   const StageBuffers& buffers)
    : model_(m),
      layout_(layout),
      table_(m),
      local_(table_, m, layout, buffers.unit_alignment),
      tp_(tp) {
  const int tps = layout.tp_size;
  C_tp_ = m.n_embd / tps;
  NH_tp_ = m.n_head / tps;
  F_tp_ = 4 * m.n_embd / tps;
  V_tp_ = padded_vocab(m.vocab_size, tps) / tps;
  vocab_start_ = layout.tp_rank * V_tp_;
  vocab_valid_ = std::clamp(m.vocab_size - vocab_start_, 0, V_tp_);
  const size_t N = static_cast<size_t>(max_batch) * max_seq;
  const size_t C = m.n_embd, T = max_seq;
  precision_ = buffers.precision;
  half_ = precision_ != Precision::kFp32;
  sp_ = buffers.sequence_parallel && tps > 1;
  if (sp_ && max_seq % tps != 0)
    throw InputError("sequence parallelism splits the tokens over tp = " + std::to_string(tps) +
                     ": the sequence length " + std::to_string(max_seq) +
                     " must be divisible by it");
  const size_t Nl = local_rows(static_cast<int>(N));  // token rows outside the tp regions
  if (half_ && buffers.full_params) {
    // 16-bit parameters; each op reads its unit expanded to fp32 (see need()). Under ZeRO-3 the
    // parameter shards do the same and redirect the parameters.
    params16_ = allocate_half(ledger, MemCategory::kParams, "params16", local_.total_numel());
    expanded_ = std::make_unique<UnitBuffers>(local_, m.n_layer, ledger, MemCategory::kWorkspace,
                                              "expanded_params");
    expanded_unit_.assign(expanded_->all().size(), -1);
    param_tensors_ =
        stage_tensors(local_, layout, [this](const LocalParam& p) { return expanded_->locate(p); });
  } else if (buffers.full_params) {
    params_ = allocate(ledger, MemCategory::kParams, "params", local_.total_numel());
    param_tensors_ = stage_tensors(local_, layout, params_);
  }
  if (buffers.full_grads) {
    grads_ = allocate(ledger, MemCategory::kGrads, "grads", local_.total_numel());
    // What zero_grads clears: every parameter's gradient but those backward overwrites, merged
    // into contiguous ranges.
    for (const LocalParam& p : local_.params()) {
      if (overwritten_by_backward(p)) continue;
      if (cleared_grads_.empty() || cleared_grads_.back().end != p.offset)
        cleared_grads_.push_back({p.offset, p.offset});
      cleared_grads_.back().end = p.offset + p.numel;
    }
    grad_tensors_ = stage_tensors(local_, layout, grads_);
  }
  auto act = [&](const char* label, size_t n) {
    return allocate(ledger, MemCategory::kActivations, label, n);
  };
  auto act16 = [&](const char* label, size_t n) {
    return allocate_half(ledger, MemCategory::kActivations, label, n);
  };
  auto work = [&](const char* label, size_t n) {
    return allocate(ledger, MemCategory::kWorkspace, label, n);
  };
  recompute_ = buffers.recompute;
  // Everything of a block except its output, which a recomputed block still keeps per slot.
  auto block_internals = [&](BlockActivations& b, bool with_att, MemCategory c) {
    auto f = [&](const char* label, size_t n) { return allocate(ledger, c, label, n); };
    b.ln1 = f("ln1", Nl * C);
    b.ln1_mean = f("ln1_mean", Nl);
    b.ln1_rstd = f("ln1_rstd", Nl);
    b.qkv = f("qkv", N * 3 * C_tp_);
    if (with_att) b.att = f("att", N * NH_tp_ * T);
    b.atty = f("atty", N * C_tp_);
    b.res_attn = f("res_attn", Nl * C);
    b.ln2 = f("ln2", Nl * C);
    b.ln2_mean = f("ln2_mean", Nl);
    b.ln2_rstd = f("ln2_rstd", Nl);
    b.fch = f("fch", N * F_tp_);
    b.fch_gelu = f("fch_gelu", N * F_tp_);
  };
  const int n_blocks = layout.last_layer - layout.first_layer;
  if (n_blocks < 1 && !layout.has_head)
    throw std::logic_error("a pipeline stage without the head needs a block to make its output");
  if (!layout.has_head)  // the stage's outputs, each sent before the buffer is reused
    for (int k = 0; k < pipeline::kSendBuffers; ++k) {
      if (half_)
        outputs16_.push_back(allocate_half(ledger, MemCategory::kCommBuffers, "output16", Nl * C));
      else
        outputs_.push_back(allocate(ledger, MemCategory::kCommBuffers, "output", Nl * C));
    }
  for (int s = 0; s < slots; ++s) {
    ActivationSlot a;
    a.tokens = allocate_int(ledger, MemCategory::kActivations, "tokens", N);
    a.targets = allocate_int(ledger, MemCategory::kActivations, "targets", N);
    if (half_)
      a.input16 = act16("input16", Nl * C);
    else
      a.input = act("input", Nl * C);
    for (int i = 0; i < n_blocks; ++i) {
      BlockActivations b;
      BlockStash st;
      const bool kept = !recompute_.full_block(i), with_att = !recompute_.selective();
      if (kept && !half_) block_internals(b, with_att, MemCategory::kActivations);
      if (kept && half_) {
        b.ln1_mean = act("ln1_mean", Nl);
        b.ln1_rstd = act("ln1_rstd", Nl);
        b.ln2_mean = act("ln2_mean", Nl);
        b.ln2_rstd = act("ln2_rstd", Nl);
        st.ln1 = act16("ln1", Nl * C);
        st.qkv = act16("qkv", N * 3 * C_tp_);
        if (with_att) st.att = act16("att", N * NH_tp_ * T);
        st.atty = act16("atty", N * C_tp_);
        st.res_attn = act16("res_attn", Nl * C);
        st.ln2 = act16("ln2", Nl * C);
        st.fch = act16("fch", N * F_tp_);
        st.fch_gelu = act16("fch_gelu", N * F_tp_);
      }
      // The last block's output of a stage without the head is sent, not kept: it goes to one of
      // the output buffers below.
      const bool sent = i == n_blocks - 1 && !layout.has_head;
      if (half_ && !sent)
        st.res_mlp = act16("res_mlp", Nl * C);
      else if (!sent)
        b.res_mlp = act("res_mlp", Nl * C);
      a.blocks.push_back(b);
      a.stash.push_back(st);
    }
    if (layout.has_head) {
      if (half_) {
        a.lnf16 = act16("lnf", Nl * C);
        a.logits16 = act16("logits", N * V_tp_);
      } else {
        a.lnf = act("lnf", Nl * C);
        a.logits = act("logits", N * V_tp_);
      }
      a.lnf_mean = act("lnf_mean", Nl);
      a.lnf_rstd = act("lnf_rstd", Nl);
      a.losses = act("losses", N);
      a.lse = act("lse", N);
    }
    slots_.push_back(a);
  }
  auto kept = [&](const char* label, size_t n) {
    KeptTensor k;
    if (half_)
      k.f16 = act16(label, n);
    else
      k.f32 = act(label, n);
    return k;
  };
  for (int s = 0; s < buffers.deferred_sets; ++s) {
    DeferredGrads d;
    for (int i = 0; i < n_blocks; ++i)
      d.blocks.push_back({kept("deferred_out", Nl * C), kept("deferred_mid", Nl * C),
                          kept("deferred_dln2", Nl * C), kept("deferred_dln1", Nl * C),
                          kept("deferred_dfch", N * F_tp_), kept("deferred_dqkv", N * 3 * C_tp_)});
    if (layout.has_embedding) d.input = kept("deferred_input", Nl * C);
    if (layout.has_head) d.dlnf = kept("deferred_dlnf", Nl * C);
    deferred_.push_back(d);
  }
  if (half_) {
    // One block's activations in fp32, its input and the head's tensors.
    block_internals(work_, true, MemCategory::kWorkspace);
    work_.res_mlp = work("work_res_mlp", Nl * C);
    work_x_ = work("work_x", Nl * C);
    if (layout.has_head) {
      work_lnf_ = work("work_lnf", Nl * C);
      work_logits_ = work("work_logits", N * V_tp_);
    }
  } else if (n_blocks > 0 && recompute_.full_block(0)) {
    block_internals(recomputed_, true, MemCategory::kActivations);
  } else if (n_blocks > 0 && recompute_.selective()) {
    recomputed_.att = act("att", N * NH_tp_ * T);
  }
  // create_mirror, not create_mirror_view: on host spaces the latter would alias slot 0's
  // tokens, and staging a later micro-batch would overwrite them before slot 0's backward.
  tokens_host_ = Kokkos::create_mirror(slots_[0].tokens);
  targets_host_ = Kokkos::create_mirror(slots_[0].targets);
  scratch_c_ = work("scratch_c", N * C);
  if (half_ && tps > 1) {  // tensor-parallel transfers in 16 bits (sum_rows, gather_rows)
    tp16_ = allocate_half(ledger, MemCategory::kCommBuffers, "tp16", N * C);
    if (sp_) tp16_rows_ = allocate_half(ledger, MemCategory::kCommBuffers, "tp16_rows", Nl * C);
  }
  if (sp_) {
    gathered_ = work("gathered", N * C);
    scattered_ = work("scattered", Nl * C);
    ln_grad_ = work("ln_grad", 2 * C);
  }
  row_max_ = work("row_max", N);
  row_sum_ = work("row_sum", 2 * N);  // sums, then target logits: one all-reduce for both
  dresidual_ = work("dresidual", Nl * C);
  dln_ = work("dln", N * C);
  datty_ = work("datty", N * C_tp_);
  dqkv_ = work("dqkv", N * 3 * C_tp_);
  dfch_ = work("dfch", N * F_tp_);
  datt_scratch_ =
      work("datt_scratch", static_cast<size_t>(max_batch) * NH_tp_ * attention_block_rows(T) * T);
}

void GptStage::init_params(uint64_t seed) {
  if (half_) {
    if (params16_.extent(0) == 0) return;  // sharded: initialised by their owner
    auto host = Kokkos::create_mirror_view(params16_);
    for (const LocalParam& p : local_.params())
      for (int64_t i = 0; i < p.numel; ++i) {
        const int64_t g = local_.global_index(p, i);
        host(p.offset + i) = to_half(g < 0 ? 0.0f : initial_value(seed, *p.spec, g), precision_);
      }
    Kokkos::deep_copy(params16_, host);
    invalidate_expanded();
    return;
  }
  if (params_.extent(0) == 0) return;  // sharded parameters are initialised by their owner
  auto host = Kokkos::create_mirror_view(params_);
  for (const LocalParam& p : local_.params())
    for (int64_t i = 0; i < p.numel; ++i) {
      const int64_t g = local_.global_index(p, i);
      host(p.offset + i) = g < 0 ? 0.0f : initial_value(seed, *p.spec, g);
    }
  Kokkos::deep_copy(params_, host);
}

void GptStage::invalidate_expanded() {
  std::fill(expanded_unit_.begin(), expanded_unit_.end(), -1);
}

void GptStage::round(const View1& v, size_t n) {
  kernels::round_in_place(exec_, window(v, 0, n), n, precision_);
}

void GptStage::stash(const HalfView1& dst, const View1& src, size_t n) {
  kernels::store_half(exec_, dst, 0, window(src, 0, n), n, precision_);
}

void GptStage::restore(const View1& dst, const HalfView1& src, size_t n) {
  kernels::load_half(exec_, window(dst, 0, n), src, 0, n, precision_);
}

// The next backward writes the weight matrices' gradients with its GEMMs (beta 0, see
// grads_fresh_) instead of adding to zeros: clearing those is half the gradient traffic of a step
// that is memory-bound outside its GEMMs. Everything else (biases, LayerNorms, the embeddings'
// scatter-adds) is cleared here, in contiguous ranges.
void GptStage::zero_grads() {
  grads_fresh_ = true;
  for (const Segment& r : cleared_grads_)
    Kokkos::deep_copy(exec_, window(grads_, r.begin, r.size()), 0.0f);
}

bool GptStage::overwritten_by_backward(const LocalParam& p) const {
  const std::string& name = p.spec->name;
  if (name == "wte") return layout_.has_head;  // the head's GEMM comes before any scatter-add
  if (p.spec->layer < 0 || p.spec->layer >= model_.n_layer) return false;
  for (const char* suffix :
       {".attn.qkv.weight", ".attn.proj.weight", ".mlp.fc.weight", ".mlp.proj.weight"})
    if (name.size() > std::strlen(suffix) &&
        name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
      return true;
  return false;
}

int GptStage::unit_index(const std::string& name) const {
  return local_.unit_of(local_.at(name));
}

// No fences before a hook or a collective: communicators order themselves against the kernels
// launched before them (NCCL by events on Kokkos' stream, MPI by a fence or a staging copy), and
// kernels after them run on the same stream.
void GptStage::unit_done(const std::string& first_param) {
  if (!unit_done_) return;
  unit_done_(unit_index(first_param));
}

void GptStage::need(const std::string& name, const std::string& next) {
  if (expanded_) {  // expand the unit's 16-bit parameters into its fp32 working buffer
    const int u = unit_index(name);
    const int buffer = expanded_->index_of_unit(u);
    if (expanded_unit_[buffer] != u) {
      const ParamUnit& unit = local_.units()[u];
      kernels::load_half(exec_, window(expanded_->of_unit(u), 0, unit.padded), params16_,
                         unit.offset, unit.padded, precision_);
      expanded_unit_[buffer] = u;
    }
  }
  if (unit_needed_) unit_needed_(unit_index(name), next.empty() ? -1 : unit_index(next));
}

void GptStage::tp_allreduce(const View1& buf, size_t n) {
  if (layout_.tp_size == 1) return;
  ScopedPhase phase(timer_, Phase::kTpComm);
  tp_->allreduce_sum(window(buf, 0, n));
}

void GptStage::tp_allreduce_max(const View1& buf, size_t n) {
  if (layout_.tp_size == 1) return;
  ScopedPhase phase(timer_, Phase::kTpComm);
  tp_->allreduce_max(window(buf, 0, n));
}

// Under 16-bit storage the activations and their gradients cross tp in 16 bits, as Megatron's
// bf16 collectives do: half the bytes. A gathered tensor is already 16-bit valued (exact); a
// partial sum is rounded before the sum, which the collective makes in fp32 and rounds.
View1 GptStage::sum_rows(const View1& partial, int N, const View1& scattered) {
  const size_t NC = static_cast<size_t>(N) * model_.n_embd, part = NC / layout_.tp_size;
  if (layout_.tp_size == 1) return partial;
  ScopedPhase phase(timer_, Phase::kTpComm);
  if (!half_ && !sp_) {
    tp_->allreduce_sum(window(partial, 0, NC));
    return partial;
  }
  if (!half_) {
    tp_->reduce_scatter_sum(window(partial, 0, NC), window(scattered, 0, part));
    return scattered;
  }
  store_half(exec_, tp16_, 0, window(partial, 0, NC), NC, precision_);
  if (!sp_) {
    tp_->allreduce_sum(CommBuffer(window(tp16_, 0, NC), precision_));
    load_half(exec_, window(partial, 0, NC), tp16_, 0, NC, precision_);
    return partial;
  }
  tp_->reduce_scatter_sum(CommBuffer(window(tp16_, 0, NC), precision_),
                          CommBuffer(window(tp16_rows_, 0, part), precision_));
  load_half(exec_, window(scattered, 0, part), tp16_rows_, 0, part, precision_);
  return scattered;
}

View1 GptStage::gather_rows(const View1& rows, int N, const View1& gathered) {
  if (!sp_) return rows;
  const size_t NC = static_cast<size_t>(N) * model_.n_embd, part = NC / layout_.tp_size;
  ScopedPhase phase(timer_, Phase::kTpComm);
  if (!half_) {
    tp_->allgather(window(rows, 0, part), window(gathered, 0, NC));
    return gathered;
  }
  store_half(exec_, tp16_rows_, 0, window(rows, 0, part), part, precision_);
  tp_->allgather(CommBuffer(window(tp16_rows_, 0, part), precision_),
                 CommBuffer(window(tp16_, 0, NC), precision_));
  load_half(exec_, window(gathered, 0, NC), tp16_, 0, NC, precision_);
  return gathered;
}

void GptStage::layernorm_param_grads(const Vec& dweight, const Vec& dbias, const ConstMat& dout,
                                     const ConstMat& inp, const ConstVec& mean,
                                     const ConstVec& rstd) {
  if (!sp_) {
    layernorm_backward_params(exec_, dweight, dbias, dout, inp, mean, rstd);
    return;
  }
  const size_t C = model_.n_embd;
  Kokkos::deep_copy(exec_, ln_grad_, 0.0f);
  const Vec dw = window(ln_grad_, 0, C), db = window(ln_grad_, C, C);
  layernorm_backward_params(exec_, dw, db, dout, inp, mean, rstd);
  tp_allreduce(ln_grad_, 2 * C);
  residual_forward(exec_, dweight, dweight, dw);
  residual_forward(exec_, dbias, dbias, db);
}

CommBuffer GptStage::input_buffer(int slot) const {
  const ActivationSlot& a = slots_[slot];
  if (half_) return CommBuffer(window(a.input16, 0, a.input16.extent(0)), precision_);
  return window(a.input, 0, a.input.extent(0));
}

CommBuffer GptStage::output(int index) const {
  if (half_) return CommBuffer(outputs16_.at(index), precision_);
  return outputs_.at(index);
}

Vec GptStage::input_grad() const {
  return window(dresidual_, 0, dresidual_.extent(0));
}

ConstMat GptStage::logits(int slot) const {
  const ActivationSlot& a = slots_[slot];
  return window(half_ ? work_logits_ : a.logits, 0, static_cast<size_t>(a.B) * a.T, V_tp_);
}

double GptStage::cross_entropy(ActivationSlot& a, const View1& logits_buffer, int N) {
  const ConstMat logits = window(logits_buffer, 0, N, V_tp_);
  cross_entropy_row_max(exec_, row_max_, logits, vocab_valid_);
  tp_allreduce_max(row_max_, N);
  const Vec sums = window(row_sum_, 0, N), target_logit = window(row_sum_, N, N);
  cross_entropy_row_sums(exec_, sums, target_logit, logits, row_max_, a.targets, vocab_start_,
                         vocab_valid_);
  tp_allreduce(row_sum_, 2 * static_cast<size_t>(N));
  cross_entropy_losses(exec_, a.losses, a.lse, row_max_, sums, target_logit, a.targets);
  return cross_entropy_loss_sum(exec_, window(a.losses, 0, N), N);
}

void GptStage::block_forward(int i, const BlockActivations& b, const View1& x, int B, int T,
                             bool complete, const std::string& next) {
  const BlockTensors& w = param_tensors_.blocks[i];
  const int N = B * T, Nl = local_rows(N), C = model_.n_embd;
  const size_t NlC = static_cast<size_t>(Nl) * C;
  const AttentionShape shape{B, T, NH_tp_, model_.head_size()};
  const bool adds_bias = layout_.tp_rank == 0;  // row-parallel biases: added once per tp group
  // Under 16-bit storage every output is rounded as it is produced, so the next op reads what a
  // 16-bit tensor would hold (fp32 arithmetic inside each op, as on tensor cores). x, the
  // LayerNorms and the residual stream hold this rank's Nl token rows (all N without sequence
  // parallelism); the tensor-parallel regions between them all N.
  need(unit_param(i, 0), unit_param(i, 1));
  layernorm_forward(exec_, window(b.ln1, 0, Nl, C), b.ln1_mean, b.ln1_rstd, window(x, 0, Nl, C),
                    w.ln1_w, w.ln1_b);
  round(b.ln1, NlC);
  const View1 ln1 = gather_rows(b.ln1, N, gathered_);
  linear_forward(exec_, window(b.qkv, 0, N, 3 * C_tp_), window(ln1, 0, N, C), w.qkv_w, w.qkv_b);
  round(b.qkv, static_cast<size_t>(N) * 3 * C_tp_);
  attention_forward(exec_, window(b.atty, 0, N, C_tp_), window(b.att, 0, N * NH_tp_, T),
                    window(b.qkv, 0, N, 3 * C_tp_), shape);
  round(b.att, static_cast<size_t>(N) * NH_tp_ * T);
  round(b.atty, static_cast<size_t>(N) * C_tp_);
  need(unit_param(i, 1), unit_param(i, 2));
  linear_forward(exec_, window(scratch_c_, 0, N, C), window(b.atty, 0, N, C_tp_), w.proj_w,
                 adds_bias ? ConstVec(w.proj_b) : ConstVec());
  const View1 attn_out = sum_rows(scratch_c_, N, scattered_);
  round(attn_out, NlC);
  residual_forward(exec_, window(b.res_attn, 0, NlC), window(x, 0, NlC), window(attn_out, 0, NlC));
  round(b.res_attn, NlC);
  need(unit_param(i, 2), complete ? unit_param(i, 3) : next);
  layernorm_forward(exec_, window(b.ln2, 0, Nl, C), b.ln2_mean, b.ln2_rstd,
                    window(b.res_attn, 0, Nl, C), w.ln2_w, w.ln2_b);
  round(b.ln2, NlC);
  const View1 ln2 = gather_rows(b.ln2, N, gathered_);
  linear_forward(exec_, window(b.fch, 0, N, F_tp_), window(ln2, 0, N, C), w.fc_w, w.fc_b);
  round(b.fch, static_cast<size_t>(N) * F_tp_);
  gelu_forward(exec_, window(b.fch_gelu, 0, N * F_tp_), window(b.fch, 0, N * F_tp_));
  round(b.fch_gelu, static_cast<size_t>(N) * F_tp_);
  if (!complete) return;
  need(unit_param(i, 3), next);
  linear_forward(exec_, window(scratch_c_, 0, N, C), window(b.fch_gelu, 0, N, F_tp_), w.fcproj_w,
                 adds_bias ? ConstVec(w.fcproj_b) : ConstVec());
  const View1 mlp_out = sum_rows(scratch_c_, N, scattered_);
  round(mlp_out, NlC);
  residual_forward(exec_, window(b.res_mlp, 0, NlC), window(b.res_attn, 0, NlC),
                   window(mlp_out, 0, NlC));
  round(b.res_mlp, NlC);
}

BlockActivations GptStage::forward_buffers(const ActivationSlot& a, int i) {
  if (half_) {  // computed in fp32 working buffers, then kept in 16 bits (keep())
    BlockActivations b = work_;
    if (!recompute_.full_block(i)) {  // the statistics are kept in fp32 as they are written
      const BlockActivations& kept = a.blocks[i];
      b.ln1_mean = kept.ln1_mean, b.ln1_rstd = kept.ln1_rstd;
      b.ln2_mean = kept.ln2_mean, b.ln2_rstd = kept.ln2_rstd;
    }
    return b;
  }
  BlockActivations b = a.blocks[i];
  if (recompute_.full_block(i)) {
    b = recomputed_;
    b.res_mlp = a.blocks[i].res_mlp;
  } else if (recompute_.selective()) {
    b.att = recomputed_.att;
  }
  return b;
}

void GptStage::keep(const ActivationSlot& a, int i, const BlockActivations& b) {
  if (!half_) return;
  const BlockStash& st = a.stash[i];
  const size_t N = static_cast<size_t>(a.B) * a.T, C = model_.n_embd;
  const size_t NlC = static_cast<size_t>(local_rows(a.B * a.T)) * C;
  const bool sent = !layout_.has_head && i + 1 == static_cast<int>(a.blocks.size());
  stash(sent ? outputs16_[next_output_] : st.res_mlp, b.res_mlp, NlC);
  if (recompute_.full_block(i)) return;
  stash(st.ln1, b.ln1, NlC);
  stash(st.qkv, b.qkv, N * 3 * C_tp_);
  if (!recompute_.selective()) stash(st.att, b.att, N * NH_tp_ * a.T);
  stash(st.atty, b.atty, N * C_tp_);
  stash(st.res_attn, b.res_attn, NlC);
  stash(st.ln2, b.ln2, NlC);
  stash(st.fch, b.fch, N * F_tp_);
  stash(st.fch_gelu, b.fch_gelu, N * F_tp_);
}

View1 GptStage::block_input(const ActivationSlot& a, int i) {
  if (!half_) return i == 0 ? a.input : a.blocks[i - 1].res_mlp;
  const size_t NlC = static_cast<size_t>(local_rows(a.B * a.T)) * model_.n_embd;
  restore(work_x_, i == 0 ? a.input16 : a.stash[i - 1].res_mlp, NlC);
  return work_x_;
}

BlockActivations GptStage::activations_for_backward(const ActivationSlot& a, int i, const View1& x,
                                                    const std::string& next, bool attention) {
  const int N = a.B * a.T;
  if (recompute_.full_block(i)) {
    ScopedPhase phase(timer_, Phase::kRecompute);
    BlockActivations b = half_ ? work_ : recomputed_;
    if (!half_) b.res_mlp = a.blocks[i].res_mlp;
    block_forward(i, b, x, a.B, a.T, false, next);
    return b;
  }
  BlockActivations b = a.blocks[i];
  if (half_) {
    const BlockStash& st = a.stash[i];
    const size_t NlC = static_cast<size_t>(local_rows(N)) * model_.n_embd;
    const BlockActivations kept = b;
    b = work_;
    b.ln1_mean = kept.ln1_mean, b.ln1_rstd = kept.ln1_rstd;
    b.ln2_mean = kept.ln2_mean, b.ln2_rstd = kept.ln2_rstd;
    restore(b.ln1, st.ln1, NlC);
    restore(b.qkv, st.qkv, static_cast<size_t>(N) * 3 * C_tp_);
    if (attention && !recompute_.selective())
      restore(b.att, st.att, static_cast<size_t>(N) * NH_tp_ * a.T);
    restore(b.atty, st.atty, static_cast<size_t>(N) * C_tp_);
    restore(b.res_attn, st.res_attn, NlC);
    restore(b.ln2, st.ln2, NlC);
    restore(b.fch, st.fch, static_cast<size_t>(N) * F_tp_);
    restore(b.fch_gelu, st.fch_gelu, static_cast<size_t>(N) * F_tp_);
  }
  if (attention && recompute_.selective()) {
    ScopedPhase phase(timer_, Phase::kRecompute);
    if (!half_) b.att = recomputed_.att;
    // The attention output is kept; its recomputed copy lands in datty_, which the projection's
    // backward overwrites next.
    attention_forward(exec_, window(datty_, 0, N, C_tp_), window(b.att, 0, N * NH_tp_, a.T),
                      window(b.qkv, 0, N, 3 * C_tp_), {a.B, a.T, NH_tp_, model_.head_size()});
    round(b.att, static_cast<size_t>(N) * NH_tp_ * a.T);
  }
  return b;
}

double GptStage::forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int T) {
  ActivationSlot& a = slots_[slot];
  a.B = B;
  a.T = T;
  if (sp_ && T % layout_.tp_size != 0)
    throw InputError("sequence parallelism: sequence length " + std::to_string(T) +
                     " is not divisible by tp = " + std::to_string(layout_.tp_size));
  const int N = B * T, Nl = local_rows(N), C = model_.n_embd;
  const size_t NlC = static_cast<size_t>(Nl) * C;
  if (tokens || targets) {
    for (int n = 0; n < N; ++n) {
      tokens_host_(n) = tokens ? tokens[n] : 0;
      targets_host_(n) = targets ? targets[n] : -1;
    }
    Kokkos::deep_copy(exec_, Kokkos::subview(a.tokens, std::make_pair(0, N)),
                      Kokkos::subview(tokens_host_, std::make_pair(0, N)));
    Kokkos::deep_copy(exec_, Kokkos::subview(a.targets, std::make_pair(0, N)),
                      Kokkos::subview(targets_host_, std::make_pair(0, N)));
  }
  const bool adds_bias = layout_.tp_rank == 0;  // row-parallel biases: added once per tp group
  // Under 16-bit storage blocks read their input from work_x_: the embeddings are made there, a
  // received input is expanded there from its 16 bits.
  const View1 input = half_ ? work_x_ : a.input;
  if (layout_.has_embedding) {
    need("wte", "");
    need("wpe", block_param(0));
    // Every token's partial embedding (this rank's vocabulary slice), summed over tp.
    const View1 embedded = sp_ ? scratch_c_ : input;
    embedding_forward(exec_, window(embedded, 0, N, C), a.tokens, param_tensors_.wte,
                      adds_bias ? ConstMat(param_tensors_.wpe) : ConstMat(), T, vocab_start_);
    sum_rows(embedded, N, input);
  }
  View1 x = input;
  if (half_ && layout_.has_embedding) {  // keep the input in 16 bits
    round(input, NlC);
    stash(a.input16, input, NlC);
  } else if (half_) {
    restore(input, a.input16, NlC);
  }
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    const int block = static_cast<int>(i);
    BlockActivations b = forward_buffers(a, block);
    if (!half_ && !layout_.has_head && i + 1 == a.blocks.size()) b.res_mlp = outputs_[next_output_];
    block_forward(
        block, b, x, B, T, true,
        i + 1 < a.blocks.size() ? block_param(block + 1) : (layout_.has_head ? "ln_f.weight" : ""));
    keep(a, static_cast<int>(i), b);
    if (half_)
      Kokkos::deep_copy(exec_, window(work_x_, 0, NlC), window(b.res_mlp, 0, NlC));
    else
      x = b.res_mlp;
  }
  if (!layout_.has_head) {  // the output is in output(next_output_), to be sent
    next_output_ = (next_output_ + 1) % pipeline::kSendBuffers;
    return 0.0;
  }
  need("ln_f.weight", "");
  need("wte", "");
  const View1 lnf = half_ ? work_lnf_ : a.lnf, logits = half_ ? work_logits_ : a.logits;
  layernorm_forward(exec_, window(lnf, 0, Nl, C), a.lnf_mean, a.lnf_rstd, window(x, 0, Nl, C),
                    param_tensors_.lnf_w, param_tensors_.lnf_b);
  round(lnf, NlC);
  linear_forward(exec_, window(logits, 0, N, V_tp_),
                 window(gather_rows(lnf, N, gathered_), 0, N, C), param_tensors_.wte, ConstVec());
  round(logits, static_cast<size_t>(N) * V_tp_);
  if (half_) {
    stash(a.lnf16, lnf, NlC);
    stash(a.logits16, logits, static_cast<size_t>(N) * V_tp_);
  }
  return targets ? cross_entropy(a, logits, N) : 0.0;
}

void GptStage::keep_grad(const KeptTensor& dst, const View1& src, size_t n) {
  if (half_)
    stash(dst.f16, src, n);
  else
    Kokkos::deep_copy(exec_, window(dst.f32, 0, n), window(src, 0, n));
}

View1 GptStage::kept_grad(const KeptTensor& src, const View1& work, size_t n) {
  if (!half_) return src.f32;
  restore(work, src.f16, n);
  return work;
}

void GptStage::backward(int slot, float loss_scale, const ConstVec& grad_output) {
  backward_pass(slots_[slot], loss_scale, grad_output, nullptr);
}

void GptStage::backward_input(int slot, float loss_scale, const ConstVec& grad_output, int set) {
  backward_pass(slots_[slot], loss_scale, grad_output, &deferred_.at(set));
}

// Every layer's input gradient, and its weight gradients either at once from the live output
// gradient (defer null) or later from the copy kept in `defer` (backward_weight). Under sequence
// parallelism dres and the LayerNorms' gradients hold this rank's token rows; a row-parallel
// layer's backward gathers all rows of its output gradient, and a column-parallel layer's input
// gradient, partial over tp, is reduce-scattered back to rows.
void GptStage::backward_pass(const ActivationSlot& a, float loss_scale, const ConstVec& grad_output,
                             const DeferredGrads* defer) {
  const bool accumulate = !grads_fresh_;  // weight matrices: the step's first write overwrites
  const int B = a.B, T = a.T, N = B * T, Nl = local_rows(N), C = model_.n_embd;
  const size_t NlC = static_cast<size_t>(Nl) * C;
  const AttentionShape shape{B, T, NH_tp_, model_.head_size()};
  const Mat dln = window(dln_, 0, N, C);
  const Mat dres = window(dresidual_, 0, Nl, C);
  const int n_blocks = static_cast<int>(a.blocks.size());
  // Under 16-bit storage activation gradients are rounded like activations, so an fp16 overflow
  // shows as infinity in the gradients, as it would on a device.
  if (layout_.has_head) {
    need("ln_f.weight", "");
    need("wte", first_backward_unit(n_blocks - 1));
    View1 logits = a.logits, lnf = a.lnf;
    if (half_) {
      logits = work_logits_, lnf = work_lnf_;
      restore(logits, a.logits16, static_cast<size_t>(N) * V_tp_);
      restore(lnf, a.lnf16, NlC);
    }
    const Mat dlogits = window(logits, 0, N, V_tp_);  // the gradient replaces the logits
    cross_entropy_backward(exec_, dlogits, dlogits, a.lse, a.targets, vocab_start_, vocab_valid_,
                           loss_scale);
    round(logits, static_cast<size_t>(N) * V_tp_);
    linear_backward_input(exec_, dln, dlogits, param_tensors_.wte, false);
    if (!defer)
      linear_backward_weight(exec_, grad_tensors_.wte, Vec(), dlogits,
                             window(gather_rows(lnf, N, gathered_), 0, N, C), accumulate);
    else if (half_)  // the weight-gradient pass reads the logits' gradient where they were kept
      stash(a.logits16, logits, static_cast<size_t>(N) * V_tp_);
    const View1 dlnf = sum_rows(dln_, N, scattered_);
    round(dlnf, NlC);
    Kokkos::deep_copy(exec_, dres, 0.0f);
    const View1 x_last = block_input(a, n_blocks);
    layernorm_backward_input(exec_, dres, window(dlnf, 0, Nl, C), window(x_last, 0, Nl, C),
                             param_tensors_.lnf_w, a.lnf_mean, a.lnf_rstd);
    if (defer) {
      keep_grad(defer->dlnf, dlnf, NlC);
    } else {
      layernorm_param_grads(grad_tensors_.lnf_w, grad_tensors_.lnf_b, window(dlnf, 0, Nl, C),
                            window(x_last, 0, Nl, C), a.lnf_mean, a.lnf_rstd);
      grads_ready_from(local_.at("ln_f.weight").offset);
      unit_done("ln_f.weight");
    }
    round(dresidual_, NlC);
  } else {
    // Rounding is a no-op on what a 16-bit stage sends, and keeps any other input exact in the
    // deferred copy.
    Kokkos::deep_copy(exec_, window(dresidual_, 0, NlC), grad_output);
    round(dresidual_, NlC);
  }
  for (int i = n_blocks - 1; i >= 0; --i) {
    const BlockTensors& w = param_tensors_.blocks[i];
    const BlockTensors& g = grad_tensors_.blocks[i];
    const DeferredGrads::Block* kept = defer ? &defer->blocks[i] : nullptr;
    const View1 x = block_input(a, i);
    const BlockActivations b = activations_for_backward(a, i, x, unit_param(i, 3));
    // Each unit's gradients are final (unit_done) before the next but one is written: ZeRO-2/3
    // reduce them from two alternating buffers.
    need(unit_param(i, 3), unit_param(i, 2));
    const Mat dfch = window(dfch_, 0, N, F_tp_);
    const size_t NF = static_cast<size_t>(N) * F_tp_;
    // MLP: dres holds d/d(block output) = d/d(res_attn) through the residual path.
    const Mat dout = window(gather_rows(dresidual_, N, scratch_c_), 0, N, C);
    linear_backward_input(exec_, dfch, dout, w.fcproj_w, false);
    if (kept) {
      keep_grad(kept->out, dresidual_, NlC);
    } else {
      linear_backward_weight(exec_, g.fcproj_w, g.fcproj_b, dout, window(b.fch_gelu, 0, N, F_tp_),
                             accumulate);
      unit_done(unit_param(i, 3));
    }
    need(unit_param(i, 2), unit_param(i, 1));
    round(dfch_, NF);
    gelu_backward(exec_, window(dfch_, 0, NF), window(b.fch, 0, NF), window(dfch_, 0, NF));
    round(dfch_, NF);
    linear_backward_input(exec_, dln, dfch, w.fc_w, false);
    if (kept)
      keep_grad(kept->dfch, dfch_, NF);
    else
      linear_backward_weight(exec_, g.fc_w, g.fc_b, dfch,
                             window(gather_rows(b.ln2, N, gathered_), 0, N, C), accumulate);
    const View1 dln2 = sum_rows(dln_, N, scattered_);
    round(dln2, NlC);
    layernorm_backward_input(exec_, dres, window(dln2, 0, Nl, C), window(b.res_attn, 0, Nl, C),
                             w.ln2_w, b.ln2_mean, b.ln2_rstd);
    if (kept) {
      keep_grad(kept->dln2, dln2, NlC);
    } else {
      layernorm_param_grads(g.ln2_w, g.ln2_b, window(dln2, 0, Nl, C), window(b.res_attn, 0, Nl, C),
                            b.ln2_mean, b.ln2_rstd);
      unit_done(unit_param(i, 2));
    }
    round(dresidual_, NlC);
    // Attention: dres now holds d/d(res_attn) = d/d(block input) through the residual path.
    const Mat dmid = window(gather_rows(dresidual_, N, scratch_c_), 0, N, C);
    const Mat datty = window(datty_, 0, N, C_tp_);
    need(unit_param(i, 1), unit_param(i, 0));
    linear_backward_input(exec_, datty, dmid, w.proj_w, false);
    if (kept) {
      keep_grad(kept->mid, dresidual_, NlC);
    } else {
      linear_backward_weight(exec_, g.proj_w, g.proj_b, dmid, window(b.atty, 0, N, C_tp_),
                             accumulate);
      unit_done(unit_param(i, 1));
    }
    round(datty_, static_cast<size_t>(N) * C_tp_);
    const Mat dqkv = window(dqkv_, 0, N, 3 * C_tp_);
    attention_backward(exec_, dqkv,
                       window(datt_scratch_, 0, B * NH_tp_ * attention_block_rows(T), T), datty,
                       window(b.qkv, 0, N, 3 * C_tp_), window(b.att, 0, N * NH_tp_, T), shape);
    round(dqkv_, static_cast<size_t>(N) * 3 * C_tp_);
    need(unit_param(i, 0), first_backward_unit(i - 1));
    linear_backward_input(exec_, dln, dqkv, w.qkv_w, false);
    if (kept)
      keep_grad(kept->dqkv, dqkv_, static_cast<size_t>(N) * 3 * C_tp_);
    else
      linear_backward_weight(exec_, g.qkv_w, g.qkv_b, dqkv,
                             window(gather_rows(b.ln1, N, gathered_), 0, N, C), accumulate);
    const View1 dln1 = sum_rows(dln_, N, scattered_);
    round(dln1, NlC);
    layernorm_backward_input(exec_, dres, window(dln1, 0, Nl, C), window(x, 0, Nl, C), w.ln1_w,
                             b.ln1_mean, b.ln1_rstd);
    if (kept) {
      keep_grad(kept->dln1, dln1, NlC);
    } else {
      layernorm_param_grads(g.ln1_w, g.ln1_b, window(dln1, 0, Nl, C), window(x, 0, Nl, C),
                            b.ln1_mean, b.ln1_rstd);
      grads_ready_from(local_.at(block_param(i)).offset);
      unit_done(unit_param(i, 0));
    }
    round(dresidual_, NlC);
  }
  if (defer) {
    if (layout_.has_embedding) keep_grad(defer->input, dresidual_, NlC);
    return;
  }
  if (layout_.has_embedding)
    embedding_backward(exec_, grad_tensors_.wte, grad_tensors_.wpe,
                       window(gather_rows(dresidual_, N, scratch_c_), 0, N, C), a.tokens, T,
                       vocab_start_);
  grads_fresh_ = false;
  grads_ready_from(0);
  if (layout_.has_embedding) unit_done("wpe");
  if (local_.holds("wte")) unit_done("wte");
}

// The weight gradients backward_pass leaves to later, in its order, from the kept output
// gradients and the slot's activations: the same operands, so the same bits (sequence
// parallelism gathers the same rows again).
void GptStage::backward_weight(int slot, int set) {
  const ActivationSlot& a = slots_[slot];
  const DeferredGrads& d = deferred_.at(set);
  const int T = a.T, N = a.B * T, Nl = local_rows(N), C = model_.n_embd;
  const size_t NlC = static_cast<size_t>(Nl) * C, NF = static_cast<size_t>(N) * F_tp_;
  const int n_blocks = static_cast<int>(a.blocks.size());
  // All rows of a kept row-split output gradient.
  const auto all_rows = [&](const KeptTensor& k) {
    return window(gather_rows(kept_grad(k, dresidual_, NlC), N, scratch_c_), 0, N, C);
  };
  const bool accumulate = !grads_fresh_;  // weight matrices: the step's first write overwrites
  // Only recomputation reads parameters here; weight gradients need none.
  if (layout_.has_head) {
    View1 dlogits = a.logits, lnf = a.lnf;
    if (half_) {
      dlogits = work_logits_, lnf = work_lnf_;
      restore(dlogits, a.logits16, static_cast<size_t>(N) * V_tp_);
      restore(lnf, a.lnf16, NlC);
    }
    linear_backward_weight(exec_, grad_tensors_.wte, Vec(), window(dlogits, 0, N, V_tp_),
                           window(gather_rows(lnf, N, gathered_), 0, N, C), accumulate);
    const View1 x_last = block_input(a, n_blocks);
    layernorm_param_grads(grad_tensors_.lnf_w, grad_tensors_.lnf_b,
                          window(kept_grad(d.dlnf, dln_, NlC), 0, Nl, C), window(x_last, 0, Nl, C),
                          a.lnf_mean, a.lnf_rstd);
    grads_ready_from(local_.at("ln_f.weight").offset);
    unit_done("ln_f.weight");
  }
  for (int i = n_blocks - 1; i >= 0; --i) {
    const BlockTensors& g = grad_tensors_.blocks[i];
    const DeferredGrads::Block& kept = d.blocks[i];
    const View1 x = block_input(a, i);
    // After a recomputation the next parameters read are the previous block's, if recomputed.
    const BlockActivations b = activations_for_backward(
        a, i, x, i > 0 && recompute_.full_block(i - 1) ? block_param(i - 1) : "", false);
    linear_backward_weight(exec_, g.fcproj_w, g.fcproj_b, all_rows(kept.out),
                           window(b.fch_gelu, 0, N, F_tp_), accumulate);
    unit_done(unit_param(i, 3));
    linear_backward_weight(exec_, g.fc_w, g.fc_b,
                           window(kept_grad(kept.dfch, dfch_, NF), 0, N, F_tp_),
                           window(gather_rows(b.ln2, N, gathered_), 0, N, C), accumulate);
    layernorm_param_grads(g.ln2_w, g.ln2_b, window(kept_grad(kept.dln2, dln_, NlC), 0, Nl, C),
                          window(b.res_attn, 0, Nl, C), b.ln2_mean, b.ln2_rstd);
    unit_done(unit_param(i, 2));
    linear_backward_weight(exec_, g.proj_w, g.proj_b, all_rows(kept.mid),
                           window(b.atty, 0, N, C_tp_), accumulate);
    unit_done(unit_param(i, 1));
    linear_backward_weight(
        exec_, g.qkv_w, g.qkv_b,
        window(kept_grad(kept.dqkv, dqkv_, static_cast<size_t>(N) * 3 * C_tp_), 0, N, 3 * C_tp_),
        window(gather_rows(b.ln1, N, gathered_), 0, N, C), accumulate);
    layernorm_param_grads(g.ln1_w, g.ln1_b, window(kept_grad(kept.dln1, dln_, NlC), 0, Nl, C),
                          window(x, 0, Nl, C), b.ln1_mean, b.ln1_rstd);
    grads_ready_from(local_.at(block_param(i)).offset);
    unit_done(unit_param(i, 0));
  }
  if (layout_.has_embedding)
    embedding_backward(exec_, grad_tensors_.wte, grad_tensors_.wpe, all_rows(d.input), a.tokens, T,
                       vocab_start_);
  grads_fresh_ = false;
  grads_ready_from(0);
  if (layout_.has_embedding) unit_done("wpe");
  if (local_.holds("wte")) unit_done("wte");
}

}  // namespace trident
