// Pipeline schedules (GPipe, 1F1B, interleaved, zero-bubble H1) as pure per-rank action lists, and
// what they imply for a rank (peers, activation sets in flight). The unit tests' simulator
// (tests/unit/schedule_simulator.hpp) proves them free of deadlock.
#pragma once

#include <string>
#include <vector>

#include "parallel/pipeline/options.hpp"

namespace trident::pipeline {

// kBackward computes a micro-batch's input and weight gradients together. Zero-bubble schedules
// split it: kBackwardInput (B) computes the input gradient, which the previous stage waits for,
// and kBackwardWeight (W) the weight gradients later, where the rank would otherwise idle.
enum class ActionType { kForward, kBackward, kBackwardInput, kBackwardWeight };

struct Action {
  ActionType type;
  int microbatch;  // 0..m-1
  int chunk;       // model chunk on this rank, 0..v-1 (always 0 unless interleaved)
};

// Virtual stage of (rank, chunk): chunk * pp + rank (Megatron's interleaving: rank r holds stages
// r, r+pp, ...), so consecutive stages always sit on neighbouring ranks and the last rank's chunk c
// feeds rank 0's chunk c+1.
inline int virtual_stage(int pp, int rank, int chunk) {
  return chunk * pp + rank;
}

// The pipeline rank that owns virtual stage `stage`.
inline int stage_rank(int pp, int stage) {
  return stage % pp;
}

// The communication an action implies, as peer pipeline ranks (-1 when there is none): what the
// runtime receives before computing and sends after. Forwards flow to stage+1, gradients to
// stage-1 after a backward or an input-gradient pass. A weight-gradient pass communicates nothing.
struct ActionComm {
  int recv_from = -1;  // rank to receive the input (forward) or output gradient (backward) from
  int send_to = -1;    // rank to send the output (forward) or input gradient (backward) to
};
ActionComm action_comm(int pp, int v, int rank, const Action& a);

// The ordered list of compute actions pipeline rank `rank` (0..pp-1) executes for one optimizer
// step of m micro-batches with v model chunks per rank (v == 1 unless kInterleaved). Communication
// is implied (see action_comm). Throws InputError with validate_schedule's message for an invalid
// (kind, pp, m, v) and std::out_of_range for a rank outside 0..pp-1.
std::vector<Action> make_schedule(ScheduleKind kind, int pp, int rank, int m, int v);

// Why a (kind, pp, m, v) is invalid, or "" when valid. Rules: pp>=1, m>=1, v>=1; v==1 unless
// interleaved; interleaved needs pp>=2, v>=2 and m a multiple of pp (Megatron's rule). Layer
// divisibility by pp*v is checked elsewhere.
std::string validate_schedule(ScheduleKind kind, int pp, int m, int v);

// Max number of micro-batches whose forward on (rank, chunk) is done but whose backward (or weight-
// gradient pass, which still reads the activations) is not yet, over the schedule: how many
// activation sets that chunk must hold.
int max_in_flight(const std::vector<Action>& actions, int chunk);
// +1 when an action starts holding a micro-batch's activations, -1 when it releases them.
int activation_change(const Action& a);
// Max number of micro-batches of `chunk` whose input-gradient pass is done but whose
// weight-gradient pass is not yet: how many sets of output gradients the chunk keeps for deferred W
// passes (0 for schedules without split backwards).
int max_deferred_weight_grads(const std::vector<Action>& actions, int chunk);

// Send buffers per (model chunk, direction) of the runtime: an output or input gradient is sent
// from one of this many buffers in turn, each reused once the message sent from it two sends ago
// was received. The bound holds the pipeline's transfer memory at a micro-batch's worth or two
// instead of one per activation set in flight; PipelineSchedule.SendBuffersNeitherDeadlockNorSlow
// checks every schedule with it.
inline constexpr int kSendBuffers = 2;

}  // namespace trident::pipeline
