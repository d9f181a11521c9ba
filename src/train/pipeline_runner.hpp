// Executes a pipeline schedule on this rank's model chunks: receives inputs and output gradients,
// runs forward and backward, sends outputs and input gradients (non-blocking, tagged), and tells
// each chunk's data-parallel strategy when its gradients become final.
#pragma once

#include <memory>
#include <vector>

#include "comm/comm.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "io/dataset.hpp"
#include "model/gpt.hpp"
#include "parallel/data/strategy.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "parallel/pipeline/transfers.hpp"

namespace trident {

// One model chunk on this rank (one per virtual stage): its layers and their data-parallel
// strategy.
struct ModelChunk {
  std::unique_ptr<GptStage> stage;
  std::unique_ptr<DataParallelStrategy> dp;
  int virtual_stage = 0;
  bool first = false, last = false;  // holds the token embedding / the head and the loss
};

// Where this rank sits in the pipeline and which sequences of the global batch it computes.
struct PipelinePlace {
  int pp = 1, pp_rank = 0, virtual_stages = 1;
  int tp_rank = 0;  // the loss is counted on tp rank 0 (every tp rank holds it)
  int seq_len = 1;  // T: this rank's tokens of each sequence
  // Context parallelism: each sequence's T x cp tokens are split over the cp ranks, this one
  // holding the positions split.position(t) (kernels/context_split.hpp).
  kernels::ContextSplit split;
  int micro_batch = 1;     // sequences per micro-batch
  int micro_batches = 1;   // per step on this pipeline
  int first_sequence = 0;  // this dp replica's first sequence of the global batch
};

class PipelineRunner {
 public:
  // `embedding` joins the first and the last stage at this (dp, tp) (null on the middle pp ranks):
  // both hold the tied embedding and sum its gradient.
  // `deferred_sets[c]`: the DeferredGrads sets chunk c's stage holds (0 without split backwards);
  // input-gradient passes of micro-batch mb use set mb % deferred_sets[c].
  PipelineRunner(std::vector<ModelChunk>& chunks, Communicator& pp, Communicator* embedding,
                 const PipelinePlace& place, MemoryLedger& ledger, PhaseTimer& timer,
                 std::vector<int> deferred_sets = {});
  // Runs a training step's `actions` on the batch `batch_index` of `sampler`; returns this rank's
  // share of the summed per-token losses. Gradients, multiplied by `loss_scale`, accumulate over
  // micro-batches and are final on return: reduced over dp when `reduce_over_dp`, and summed
  // between the tied embedding's two stages.
  // With `read_losses` false the losses stay on the device and train() returns 0: read_losses()
  // reads them later (one rank reads them with the gradient norm, once AdamW is launched).
  double train(const std::vector<pipeline::Action>& actions, const BatchSampler& sampler,
               int64_t batch_index, bool reduce_over_dp, float loss_scale, bool read_losses = true);
  // This rank's share of the summed per-token losses of the last pass, in micro-batch order (a
  // wait for the device).
  double read_losses();
  // Runs forward-only `actions` (evaluation); returns this rank's share of the summed losses.
  double evaluate(const std::vector<pipeline::Action>& actions, const BatchSampler& sampler,
                  int64_t batch_index);

 private:
  using Transfers = pipeline::Transfers;
  // Where an action runs: its chunk, that chunk's transfers, its activation slot, its peers.
  struct Site {
    ModelChunk& chunk;
    Transfers& transfers;
    int slot;
    pipeline::ActionComm peers;
  };
  Site site_of(const pipeline::Action& act);
  // loss_scale > 0: training (backward follows at that scale; see GptStage::forward).
  // This rank's tokens and targets of a micro-batch into inputs_ and targets_.
  void read_micro_batch(const BatchSampler& sampler, int64_t batch_index, int microbatch);
  void forward(const pipeline::Action& act, const BatchSampler& sampler, int64_t batch_index,
               float loss_scale);
  // A fused backward, or a zero-bubble schedule's input-gradient pass: receives the output
  // gradient, computes and sends the input gradient.
  void backward(const pipeline::Action& act, bool final_pass, float loss_scale);
  // A zero-bubble schedule's deferred weight-gradient pass (no communication).
  void backward_weight(const pipeline::Action& act, bool final_pass);
  double run_actions(const std::vector<pipeline::Action>& actions, const BatchSampler& sampler,
                     int64_t batch_index, bool reduce_over_dp, float loss_scale, bool read_losses);
  void wait_for_sends();
  void sum_tied_embedding_gradient();
  // Messages are tagged by micro-batch, receiving virtual stage and direction, so transfers of
  // different micro-batches and chunks between the same two ranks never match each other.
  int tag(int microbatch, int receiving_stage, int direction) const {
    return (microbatch * place_.pp * place_.virtual_stages + receiving_stage) * 2 + direction;
  }

  std::vector<ModelChunk>& chunks_;
  Communicator& pp_;
  Communicator* embedding_;
  PipelinePlace place_;
  PhaseTimer& timer_;
  size_t activation_elements_;  // N*C of one micro-batch (N/tp*C: sequence parallel)
  Precision storage_;           // of activations and what the stages send
  Exec exec_;
  std::vector<Transfers> transfers_;
  std::vector<int32_t> inputs_, targets_;              // this rank's tokens of the micro-batch
  std::vector<int32_t> whole_inputs_, whole_targets_;  // context parallelism: whole sequences
  std::vector<int> deferred_sets_;  // per chunk: DeferredGrads sets its stage holds
  // Each micro-batch's loss sum, left on the device by its forward and read once, after the
  // last action: no forward waits for the device. Only the head's tp rank 0 counts them.
  Kokkos::View<double*, Device> micro_losses_;
  Kokkos::View<double*, Device>::HostMirror micro_losses_host_;
  bool counts_losses_ = false;
};

}  // namespace trident
