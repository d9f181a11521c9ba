// Pipeline schedules (GPipe, 1F1B, interleaved) as pure per-rank action lists, and a simulator.
#pragma once

#include <string>
#include <vector>

#include "core/names.hpp"

namespace trident::pipeline {

enum class ScheduleKind { kGpipe, kOneFOneB, kInterleaved };

enum class ActionType { kForward, kBackward };

struct Action {
  ActionType type;
  int microbatch;  // 0..m-1
  int chunk;       // model chunk on this rank, 0..v-1 (always 0 unless interleaved)
};

inline bool operator==(const Action& a, const Action& b) {
  return a.type == b.type && a.microbatch == b.microbatch && a.chunk == b.chunk;
}
inline bool operator!=(const Action& a, const Action& b) {
  return !(a == b);
}

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
// stage-1.
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

// Max number of micro-batches whose forward on (rank, chunk) is done but whose backward is not yet,
// over the schedule: how many activation sets that chunk must hold.
int max_in_flight(const std::vector<Action>& actions, int chunk);
// The same summed over all chunks of the rank: activation sets of 1/v of a stage each.
int max_in_flight_all_chunks(const std::vector<Action>& actions);

// Simulates all pp ranks executing their action lists with blocking receives and non-blocking sends
// (a receive completes only after the matching send was issued, with zero transfer time). Returns
// true when every rank finishes (no deadlock) and every action's dependencies are respected;
// otherwise false with the reason in `error` (when non-null). `steps_out` (when non-null) gets the
// makespan in time units, a forward costing 1 and a backward 2.
bool simulate(ScheduleKind kind, int pp, int m, int v, std::string* error,
              int* steps_out = nullptr);
// The same for arbitrary per-rank lists (index = pipeline rank), e.g. a hand-made broken schedule.
bool simulate_actions(const std::vector<std::vector<Action>>& per_rank, int m, int v,
                      std::string* error, int* steps_out = nullptr);

// Idle fraction per rank under simulate's timing model: 1 - (3*m*v) / makespan, since every rank
// computes m*v forwards (1 unit) and m*v backwards (2 units). Throws InputError for an invalid
// (kind, pp, m, v) and std::logic_error if the schedule deadlocks.
double simulated_bubble(ScheduleKind kind, int pp, int m, int v);

}  // namespace trident::pipeline

namespace trident {

template <>
inline constexpr std::array<Named<pipeline::ScheduleKind>, 3> kNames<pipeline::ScheduleKind>{
    {{pipeline::ScheduleKind::kGpipe, "gpipe"},
     {pipeline::ScheduleKind::kOneFOneB, "1f1b"},
     {pipeline::ScheduleKind::kInterleaved, "interleaved"}}};

}  // namespace trident
