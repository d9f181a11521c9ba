// The pipeline schedules' simulator, a test instrument: runs every rank's action list against the
// others (blocking receives, non-blocking sends, bounded send buffers) to prove a schedule free of
// deadlock and to measure its bubble. analysis/bubble.py carries a port of it.
#pragma once

#include <string>
#include <vector>

#include "parallel/pipeline/schedule.hpp"

namespace trident::pipeline {

// Relative cost of each pass, for the simulator: a fused backward costs input + weight.
struct PassCosts {
  double forward = 1, input_grad = 1, weight_grad = 1;
};

// Actions compare field by field (EXPECT_EQ on action lists).
inline bool operator==(const Action& a, const Action& b) {
  return a.type == b.type && a.microbatch == b.microbatch && a.chunk == b.chunk;
}

// max_in_flight summed over all chunks of the rank: activation sets of 1/v of a stage each.
int max_in_flight_all_chunks(const std::vector<Action>& actions);

// Simulates all pp ranks executing their action lists with blocking receives and non-blocking sends
// (a receive completes only after the matching send was issued, with zero transfer time), the
// runtime's order: receive, compute, send. With `send_buffers` > 0 each (stage, direction) sends
// from that many buffers in turn, and a send waits until the message sent from its buffer before
// was received (before a forward's compute, after a backward's, as the runtime waits); 0 means
// unbounded buffering. Returns true when every rank finishes (no deadlock) and every action's
// dependencies are respected; otherwise false with the reason in `error` (when non-null).
// `makespan_out` (when non-null) gets the time the last rank finishes, each pass costing what
// `costs` says (by default a forward 1 and a backward 2).
bool simulate(ScheduleKind kind, int pp, int m, int v, std::string* error,
              double* makespan_out = nullptr, const PassCosts& costs = {}, int send_buffers = 0);
// The same for arbitrary per-rank lists (index = pipeline rank), e.g. a hand-made broken schedule.
bool simulate_actions(const std::vector<std::vector<Action>>& per_rank, int m, int v,
                      std::string* error, double* makespan_out = nullptr,
                      const PassCosts& costs = {}, int send_buffers = 0);

// Idle fraction per rank under simulate's timing model: 1 - m*v*(F + B + W) / makespan, since every
// rank computes m*v forwards and m*v backwards. Throws InputError for an invalid (kind, pp, m, v)
// and std::logic_error if the schedule deadlocks.
double simulated_bubble(ScheduleKind kind, int pp, int m, int v, const PassCosts& costs = {});

}  // namespace trident::pipeline
