// The pipeline schedules' simulator (schedule_simulator.hpp).
#include "schedule_simulator.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "core/error.hpp"

namespace trident::pipeline {

namespace {

const char* pass_name(ActionType type) {
  switch (type) {
    case ActionType::kForward:
      return "forward";
    case ActionType::kBackward:
      return "backward";
    case ActionType::kBackwardInput:
      return "input-gradient pass";
    case ActionType::kBackwardWeight:
      return "weight-gradient pass";
  }
  return "?";
}

std::string describe(const Action& a, int pp, int rank) {
  std::ostringstream s;
  s << pass_name(a.type) << " mb " << a.microbatch << " chunk " << a.chunk << " (stage "
    << virtual_stage(pp, rank, a.chunk) << ")";
  return s.str();
}

bool fail(std::string* error, const std::string& why) {
  if (error) *error = why;
  return false;
}

// Each rank's list must hold exactly one forward per (micro-batch, chunk) and after it either one
// backward or an input-gradient pass followed by a weight-gradient pass: the simulator only checks
// cross-rank dependencies, this checks the local ones.
bool check_rank_list(const std::vector<Action>& actions, int pp, int rank, int m, int v,
                     std::string* error) {
  const size_t slots = static_cast<size_t>(m) * v;
  std::vector<int> forward_at(slots, -1), backward_at(slots, -1), input_at(slots, -1),
      weight_at(slots, -1);
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    std::ostringstream where;
    where << "rank " << rank << " action " << i << ": " << describe(a, pp, rank);
    if (a.microbatch < 0 || a.microbatch >= m || a.chunk < 0 || a.chunk >= v)
      return fail(error, where.str() + " is out of range");
    const size_t slot = static_cast<size_t>(a.microbatch) * v + a.chunk;
    std::vector<int>& seen = a.type == ActionType::kForward         ? forward_at
                             : a.type == ActionType::kBackward      ? backward_at
                             : a.type == ActionType::kBackwardInput ? input_at
                                                                    : weight_at;
    if (seen[slot] >= 0) return fail(error, where.str() + " repeats");
    if (a.type != ActionType::kForward && forward_at[slot] < 0)
      return fail(error, where.str() + " comes before its forward");
    if (a.type == ActionType::kBackwardWeight && input_at[slot] < 0)
      return fail(error, where.str() + " comes before its input-gradient pass");
    const bool split =
        a.type == ActionType::kBackwardInput || a.type == ActionType::kBackwardWeight;
    if (split ? backward_at[slot] >= 0 : (a.type == ActionType::kBackward && input_at[slot] >= 0))
      return fail(error, where.str() + " mixes a fused and a split backward");
    seen[slot] = static_cast<int>(i);
  }
  for (size_t slot = 0; slot < slots; ++slot) {
    const char* missing = forward_at[slot] < 0     ? "forward"
                          : backward_at[slot] >= 0 ? nullptr
                          : input_at[slot] < 0     ? "backward"
                          : weight_at[slot] < 0    ? "weight-gradient pass"
                                                   : nullptr;
    if (missing) {
      std::ostringstream s;
      s << "rank " << rank << " never runs the " << missing << " of mb " << slot / v << " chunk "
        << slot % v;
      return fail(error, s.str());
    }
  }
  return true;
}

}  // namespace

int max_in_flight_all_chunks(const std::vector<Action>& actions) {
  int live = 0, peak = 0;
  for (const Action& a : actions) {
    live += activation_change(a);
    peak = std::max(peak, live);
  }
  return peak;
}

bool simulate_actions(const std::vector<std::vector<Action>>& per_rank, int m, int v,
                      std::string* error, double* makespan_out, const PassCosts& costs,
                      int send_buffers) {
  const int pp = static_cast<int>(per_rank.size());
  if (pp < 1 || m < 1 || v < 1) return fail(error, "empty pipeline");
  if (send_buffers < 0) return fail(error, "negative send_buffers");
  for (int r = 0; r < pp; ++r)
    if (!check_rank_list(per_rank[r], pp, r, m, v, error)) return false;

  // Per message (index stage * m + micro-batch, by the sending stage): when its send was issued
  // and when its receive began; -1 = not yet. Zero transfer time: a receive completes as soon as
  // the send exists, and a send completes once its receive has begun.
  const int stages = pp * v;
  const size_t messages = static_cast<size_t>(stages) * m;
  std::vector<double> sent[2] = {std::vector<double>(messages, -1),
                                 std::vector<double>(messages, -1)};
  std::vector<double> received[2] = {sent[0], sent[0]};
  // Per (sending stage, direction): the micro-batches sent so far, in order. With send_buffers
  // > 0 the k-th send reuses the buffer of send k - send_buffers, which must have been received.
  std::vector<std::vector<int>> order[2] = {std::vector<std::vector<int>>(stages),
                                            std::vector<std::vector<int>>(stages)};
  std::vector<size_t> next(pp, 0);
  std::vector<double> clock(pp, 0);
  std::vector<bool> waits_for_buffer(pp, false);
  // Each sweep runs every rank until it blocks on a receive or a send buffer; start times take the
  // max of the rank's clock and the send (or buffer release) time, so the sweep order does not
  // change the timing, and a sweep without progress means every unfinished rank waits on one that
  // waits too: a deadlock.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      while (next[r] < per_rank[r].size()) {
        const Action& a = per_rank[r][next[r]];
        const int stage = virtual_stage(pp, r, a.chunk);
        const bool forward = a.type == ActionType::kForward;
        const bool weight_only = a.type == ActionType::kBackwardWeight;  // local, no transfer
        const int dir = forward ? 0 : 1;
        const int from = forward ? stage - 1 : stage + 1;  // the stage this action receives from
        const int to = forward ? stage + 1 : stage - 1;    // the stage it sends to
        const bool receives = !weight_only && from >= 0 && from < stages;
        const bool sends = !weight_only && to >= 0 && to < stages;
        double ready = clock[r];
        if (receives) {
          const double t = sent[dir][static_cast<size_t>(from) * m + a.microbatch];
          if (t < 0) break;
          ready = std::max(ready, t);
        }
        // The runtime receives first, so a rank blocked on its send buffer below has received.
        if (receives) received[dir][static_cast<size_t>(from) * m + a.microbatch] = ready;
        // The send buffer this action's output goes to is free once its previous message was
        // received (the runtime waits for it before a forward's compute, after a backward's).
        double buffer_free = 0;
        const std::vector<int>& issued = order[dir][sends ? stage : 0];
        if (sends && send_buffers > 0 && issued.size() >= static_cast<size_t>(send_buffers)) {
          const int previous = issued[issued.size() - send_buffers];
          buffer_free = received[dir][static_cast<size_t>(stage) * m + previous];
          waits_for_buffer[r] = buffer_free < 0;
          if (buffer_free < 0) break;
        }
        waits_for_buffer[r] = false;
        switch (a.type) {
          case ActionType::kForward:
            clock[r] = std::max(ready, buffer_free) + costs.forward;
            break;
          case ActionType::kBackward:
            clock[r] = std::max(ready + costs.input_grad + costs.weight_grad, buffer_free);
            break;
          case ActionType::kBackwardInput:
            clock[r] = std::max(ready + costs.input_grad, buffer_free);
            break;
          case ActionType::kBackwardWeight:
            clock[r] = ready + costs.weight_grad;
            break;
        }
        if (sends) {
          sent[dir][static_cast<size_t>(stage) * m + a.microbatch] = clock[r];
          order[dir][stage].push_back(a.microbatch);
        }
        ++next[r];
        progress = true;
      }
    }
  }

  std::ostringstream stuck;
  for (int r = 0; r < pp; ++r) {
    if (next[r] == per_rank[r].size()) continue;
    const Action& a = per_rank[r][next[r]];
    const int stage = virtual_stage(pp, r, a.chunk);
    const bool forward = a.type == ActionType::kForward;
    stuck << (stuck.tellp() > 0 ? "; " : "") << "rank " << r << " waits at action " << next[r]
          << " (" << describe(a, pp, r) << ") for stage ";
    if (waits_for_buffer[r])
      stuck << (forward ? stage + 1 : stage - 1) << " to receive what it sent from the same buffer "
            << send_buffers << " sends ago";
    else
      stuck << (forward ? stage - 1 : stage + 1);
  }
  if (stuck.tellp() > 0) return fail(error, "deadlock: " + stuck.str());
  if (makespan_out) *makespan_out = *std::max_element(clock.begin(), clock.end());
  return true;
}

bool simulate(ScheduleKind kind, int pp, int m, int v, std::string* error, double* makespan_out,
              const PassCosts& costs, int send_buffers) {
  const std::string invalid = validate_schedule(kind, pp, m, v);
  if (!invalid.empty()) return fail(error, invalid);
  std::vector<std::vector<Action>> per_rank;
  for (int r = 0; r < pp; ++r) per_rank.push_back(make_schedule(kind, pp, r, m, v));
  return simulate_actions(per_rank, m, v, error, makespan_out, costs, send_buffers);
}

double simulated_bubble(ScheduleKind kind, int pp, int m, int v, const PassCosts& costs) {
  const std::string invalid = validate_schedule(kind, pp, m, v);
  if (!invalid.empty()) throw InputError(invalid);
  std::string error;
  double makespan = 0;
  if (!simulate(kind, pp, m, v, &error, &makespan, costs))
    throw std::logic_error(std::string("schedule ") + name_of(kind) + ": " + error);
  const double busy =
      static_cast<double>(m) * v * (costs.forward + costs.input_grad + costs.weight_grad);
  return 1.0 - busy / makespan;
}

}  // namespace trident::pipeline
