// The pipeline runtime: schedule actions, their transfers (peers from pipeline::action_comm) and
// the hand-over of final gradients to the data-parallel strategies.
#include "train/pipeline_runner.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cast.hpp"

namespace trident {

PipelineRunner::PipelineRunner(std::vector<ModelChunk>& chunks, Communicator& pp,
                               Communicator* embedding, const PipelinePlace& place,
                               MemoryLedger& ledger, PhaseTimer& timer,
                               std::vector<int> deferred_sets)
    : chunks_(chunks),
      pp_(pp),
      embedding_(embedding),
      place_(place),
      timer_(timer),
      activation_elements_(chunks.empty() ? 0
                                          : static_cast<size_t>(chunks.front().stage->local_rows(
                                                place.micro_batch * place.seq_len)) *
                                                chunks.front().stage->config().n_embd),
      storage_(chunks.empty() ? Precision::kFp32 : chunks.front().stage->precision()),
      inputs_(static_cast<size_t>(place.micro_batch) * place.seq_len),
      targets_(static_cast<size_t>(place.micro_batch) * place.seq_len),
      deferred_sets_(std::move(deferred_sets)) {
  deferred_sets_.resize(chunks_.size(), 0);
  if (place_.split.cp > 1) {
    whole_inputs_.resize(static_cast<size_t>(place.micro_batch) * place_.split.T);
    whole_targets_.resize(whole_inputs_.size());
  }
  for (const ModelChunk& ch : chunks_) counts_losses_ |= ch.last && place_.tp_rank == 0;
  if (counts_losses_) {
    micro_losses_ = Kokkos::View<double*, Device>("micro_losses", place_.micro_batches);
    micro_losses_host_ = Kokkos::create_mirror_view(micro_losses_);
  }
  BufferList list(ledger);
  for (const ModelChunk& ch : chunks_)
    transfers_.push_back(
        pipeline::lay_out_transfers(ch.first, ch.last, activation_elements_, storage_, list));
}

double PipelineRunner::train(const std::vector<pipeline::Action>& actions,
                             const BatchSampler& sampler, int64_t batch_index, bool reduce_over_dp,
                             float loss_scale, bool read_losses) {
  const double loss_sum =
      run_actions(actions, sampler, batch_index, reduce_over_dp, loss_scale, read_losses);
  {
    ScopedPhase phase(timer_, Phase::kDpComm);
    for (ModelChunk& ch : chunks_) ch.dp->finish_reduction(reduce_over_dp);
  }
  sum_tied_embedding_gradient();
  return loss_sum;
}

double PipelineRunner::evaluate(const std::vector<pipeline::Action>& actions,
                                const BatchSampler& sampler, int64_t batch_index) {
  return run_actions(actions, sampler, batch_index, false, 0.0f, true);  // 0: no backward follows
}

double PipelineRunner::run_actions(const std::vector<pipeline::Action>& actions,
                                   const BatchSampler& sampler, int64_t batch_index,
                                   bool reduce_over_dp, float loss_scale, bool read_losses) {
  // Gradients become final with a chunk's last backward or weight-gradient pass.
  std::vector<int> gradient_passes(chunks_.size(), 0);
  const auto final_pass = [&](int chunk) {
    return ++gradient_passes[chunk] == place_.micro_batches && reduce_over_dp;
  };
  for (const pipeline::Action& act : actions) {
    for (ModelChunk& ch : chunks_) ch.dp->progress();
    switch (act.type) {
      case pipeline::ActionType::kForward:
        forward(act, sampler, batch_index, loss_scale);
        break;
      case pipeline::ActionType::kBackward:
        backward(act, final_pass(act.chunk), loss_scale);
        break;
      case pipeline::ActionType::kBackwardInput:
        backward(act, false, loss_scale);
        break;
      case pipeline::ActionType::kBackwardWeight:
        backward_weight(act, final_pass(act.chunk));
        break;
    }
  }
  wait_for_sends();
  if (!counts_losses_) return 0.0;
  const int head_forwards = static_cast<int>(
      std::count_if(actions.begin(), actions.end(), [&](const pipeline::Action& act) {
        return act.type == pipeline::ActionType::kForward && chunks_[act.chunk].last;
      }));
  if (head_forwards != place_.micro_batches)  // each micro-batch's sum written once
    throw std::logic_error("PipelineRunner: " + std::to_string(head_forwards) +
                           " forwards through the head for " +
                           std::to_string(place_.micro_batches) + " micro-batches");
  return read_losses ? this->read_losses() : 0.0;
}

double PipelineRunner::read_losses() {
  if (!counts_losses_) return 0.0;
  Kokkos::deep_copy(micro_losses_host_, micro_losses_);
  double loss_sum = 0.0;  // in micro-batch order
  for (int mb = 0; mb < place_.micro_batches; ++mb) loss_sum += micro_losses_host_(mb);
  return loss_sum;
}

// The batch is split once, here: each sequence's targets are shifted before this rank takes its
// positions of the tokens and of the targets alike.
void PipelineRunner::read_micro_batch(const BatchSampler& sampler, int64_t batch_index,
                                      int microbatch) {
  const int first = place_.first_sequence + microbatch * place_.micro_batch;
  const kernels::ContextSplit& split = place_.split;
  if (split.cp == 1)
    return sampler.fill(batch_index, first, place_.micro_batch, inputs_.data(), targets_.data());
  sampler.fill(batch_index, first, place_.micro_batch, whole_inputs_.data(), whole_targets_.data());
  for (int b = 0; b < place_.micro_batch; ++b)
    for (int t = 0; t < place_.seq_len; ++t) {
      const size_t mine = static_cast<size_t>(b) * place_.seq_len + t;
      const size_t whole = static_cast<size_t>(b) * split.T + split.position(t);
      inputs_[mine] = whole_inputs_[whole];
      targets_[mine] = whole_targets_[whole];
    }
}

PipelineRunner::Site PipelineRunner::site_of(const pipeline::Action& act) {
  ModelChunk& ch = chunks_[act.chunk];
  return {ch, transfers_[act.chunk], act.microbatch % ch.stage->slots(),
          pipeline::action_comm(place_.pp, place_.virtual_stages, place_.pp_rank, act)};
}

void PipelineRunner::forward(const pipeline::Action& act, const BatchSampler& sampler,
                             int64_t batch_index, float loss_scale) {
  const auto [ch, t, slot, peers] = site_of(act);
  GptStage& stage = *ch.stage;
  const size_t n = activation_elements_;
  read_micro_batch(sampler, batch_index, act.microbatch);
  const int out = t.next_output;
  {
    ScopedPhase wait(timer_, Phase::kPpWait);
    if (peers.recv_from >= 0)
      pp_.recv(stage.input_buffer(slot).window(0, n), peers.recv_from,
               tag(act.microbatch, ch.virtual_stage, 0));
    if (peers.send_to >= 0) t.forward_sends[out].wait();  // its previous output must have left
  }
  {
    ScopedPhase phase(timer_, Phase::kForward);
    stage.forward_pass(slot, ch.first ? inputs_.data() : nullptr,
                       ch.last ? targets_.data() : nullptr, place_.micro_batch, place_.seq_len,
                       ch.last ? StoredTensor() : t.outputs[out], loss_scale);
    // tp ranks hold the same loss
    if (ch.last && place_.tp_rank == 0)
      stage.loss_sum(slot, Kokkos::subview(micro_losses_, act.microbatch));
  }
  if (!ch.last) t.next_output = (out + 1) % pipeline::kSendBuffers;
  if (peers.send_to >= 0)
    t.forward_sends[out] = pp_.isend(CommBuffer(t.outputs[out]).window(0, n), peers.send_to,
                                     tag(act.microbatch, ch.virtual_stage + 1, 0));
}

void PipelineRunner::backward(const pipeline::Action& act, bool reduce, float loss_scale) {
  const auto [ch, t, slot, peers] = site_of(act);
  GptStage& stage = *ch.stage;
  const size_t n = activation_elements_;
  if (peers.recv_from >= 0) {
    ScopedPhase wait(timer_, Phase::kPpWait);
    pp_.recv(CommBuffer(t.grad_recv).window(0, n), peers.recv_from,
             tag(act.microbatch, ch.virtual_stage, 1));
  }
  const StoredTensor grad_output = t.grad_recv.empty() ? StoredTensor() : t.grad_recv.window(0, n);
  const bool split = act.type == pipeline::ActionType::kBackwardInput;
  if (!split) ch.dp->before_backward(reduce);  // the weight gradients are written now
  {
    ScopedPhase phase(timer_, Phase::kBackward);
    if (split)
      stage.backward_input(slot, loss_scale, grad_output,
                           act.microbatch % deferred_sets_[act.chunk]);
    else
      stage.backward(slot, loss_scale, grad_output);
  }
  if (peers.send_to >= 0) {
    ScopedPhase wait(timer_, Phase::kPpWait);
    const int out = t.next_grad_send;
    t.next_grad_send = (out + 1) % pipeline::kSendBuffers;
    t.backward_sends[out].wait();
    const StoredTensor& send = t.grad_send[out];
    kernels::copy_stored(exec_, send, stage.input_grad(), n);
    t.backward_sends[out] = pp_.isend(CommBuffer(send).window(0, n), peers.send_to,
                                      tag(act.microbatch, ch.virtual_stage - 1, 1));
  }
}

void PipelineRunner::backward_weight(const pipeline::Action& act, bool reduce) {
  const auto [ch, t, slot, peers] = site_of(act);
  ch.dp->before_backward(reduce);
  ScopedPhase phase(timer_, Phase::kWeightGrad);
  ch.stage->backward_weight(slot, act.microbatch % deferred_sets_[act.chunk]);
}

void PipelineRunner::wait_for_sends() {
  ScopedPhase wait(timer_, Phase::kPpWait);
  for (Transfers& t : transfers_) {
    for (Request& r : t.forward_sends) r.wait();
    for (Request& r : t.backward_sends) r.wait();
  }
}

// The tied embedding: the first and the last stage each hold wte and a part of its gradient.
// Summing over them commutes with the dp sum, so it may come after it.
void PipelineRunner::sum_tied_embedding_gradient() {
  if (!embedding_ || embedding_->size() == 1) return;
  if (!chunks_.front().stage->config().tied()) return;  // an untied head has its own matrix
  ScopedPhase wait(timer_, Phase::kPpWait);
  for (ModelChunk& ch : chunks_)
    if (ch.first || ch.last)
      embedding_->allreduce_sum(ch.dp->held_gradient(ch.stage->local().at("wte")));
}

}  // namespace trident
