// Builds GPipe / 1F1B / interleaved-1F1B / ZB-H1 action lists and what they imply (peers,
// activation sets in flight, deferred weight-gradient sets).
#include "parallel/pipeline/schedule.hpp"

#include <algorithm>
#include <deque>
#include <sstream>
#include <stdexcept>

#include "core/error.hpp"

namespace trident::pipeline {

namespace {

// Forward then backward, both in micro-batch order 0..m-1. Both orders hold all m activation sets,
// but this one is FIFO like 1F1B: every rank consumes activations and gradients in the order they
// were produced and arrive, so one FIFO activation stash and one receive order serve both
// schedules, whereas m-1..0 would need a LIFO stash here and a FIFO one for 1F1B. The bubble is
// the same either way.
std::vector<Action> gpipe(int m) {
  std::vector<Action> out;
  for (int mb = 0; mb < m; ++mb) out.push_back({ActionType::kForward, mb, 0});
  for (int mb = 0; mb < m; ++mb) out.push_back({ActionType::kBackward, mb, 0});
  return out;
}

// PipeDream-Flush: rank r runs ahead by the pp-r-1 micro-batches that are still in the stages
// below it when its first backward can arrive, so it never holds more than pp-r activation sets.
std::vector<Action> one_f_one_b(int pp, int rank, int m) {
  const int warmup = std::min(pp - rank - 1, m);
  std::vector<Action> out;
  for (int mb = 0; mb < warmup; ++mb) out.push_back({ActionType::kForward, mb, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({ActionType::kForward, warmup + i, 0});
    out.push_back({ActionType::kBackward, i, 0});
  }
  for (int mb = m - warmup; mb < m; ++mb) out.push_back({ActionType::kBackward, mb, 0});
  return out;
}

// Megatron's get_model_chunk_id and micro-batch mapping for virtual micro-batch k: groups of pp
// micro-batches sweep chunk 0..v-1 (forward) or v-1..0 (backward) before the next group starts.
Action interleaved_action(int pp, int v, int k, ActionType type) {
  const int in_group = (k / pp) % v;
  const int chunk = type == ActionType::kForward ? in_group : v - 1 - in_group;
  const int microbatch = (k / (pp * v)) * pp + k % pp;
  return {type, microbatch, chunk};
}

// Megatron's forward_backward_pipelining_with_interleaving (without its communication): every
// rank first fills (v-1)*pp chunk-forwards so the last rank can start its last chunk, plus two per
// rank below it: Megatron exchanges a step's activation and gradient in one batched send/recv
// after both computations, so the gradient rank r needs must come from rank r+1's previous step.
// (Under simulate()'s zero-latency, non-blocking sends one per rank would suffice; we keep
// Megatron's count so the runtime may batch its exchanges the same way.)
std::vector<Action> interleaved(int pp, int rank, int m, int v) {
  const int total = m * v;
  const int warmup = std::min((pp - rank - 1) * 2 + (v - 1) * pp, total);
  std::vector<Action> out;
  for (int k = 0; k < warmup; ++k)
    out.push_back(interleaved_action(pp, v, k, ActionType::kForward));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(interleaved_action(pp, v, warmup + k, ActionType::kForward));
    out.push_back(interleaved_action(pp, v, k, ActionType::kBackward));
  }
  for (int k = total - warmup; k < total; ++k)
    out.push_back(interleaved_action(pp, v, k, ActionType::kBackward));
  return out;
}

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024): 1F1B's order of forwards and
// input-gradient passes, each B sent on at once, with rank r keeping up to r weight-gradient passes
// pending (run oldest first). Deferring W on the later ranks lets the gradient wave run back
// through B passes alone, and the pending W's then fill the waits of 1F1B's cool-down; with T_W <=
// min(T_F, T_B) and m >= pp the makespan is m (T_F + T_B + T_W) + (pp-1)(T_F + T_B - T_W), the
// paper's bubble. Rank r holds its pp-r-1 warm-up forwards, the one in the 1F1B slot and r pending
// W's: min(pp, m) activation sets on every rank, 1F1B's peak (its rank 0).
std::vector<Action> zero_bubble_h1(int pp, int rank, int m) {
  const int warmup = std::min(pp - rank - 1, m);
  std::vector<Action> out;
  std::deque<int> pending;  // micro-batches whose W is deferred
  const auto input_grad = [&](int mb) {
    out.push_back({ActionType::kBackwardInput, mb, 0});
    pending.push_back(mb);
    if (static_cast<int>(pending.size()) > rank) {
      out.push_back({ActionType::kBackwardWeight, pending.front(), 0});
      pending.pop_front();
    }
  };
  for (int mb = 0; mb < warmup; ++mb) out.push_back({ActionType::kForward, mb, 0});
  for (int i = 0; i < m - warmup; ++i) {
    out.push_back({ActionType::kForward, warmup + i, 0});
    input_grad(i);
  }
  for (int mb = m - warmup; mb < m; ++mb) input_grad(mb);
  for (int mb : pending) out.push_back({ActionType::kBackwardWeight, mb, 0});
  return out;
}

}  // namespace

ActionComm action_comm(int pp, int v, int rank, const Action& a) {
  const int stage = virtual_stage(pp, rank, a.chunk), last = pp * v - 1;
  ActionComm c;
  if (a.type == ActionType::kBackwardWeight) return c;
  if (a.type == ActionType::kForward) {
    if (stage > 0) c.recv_from = stage_rank(pp, stage - 1);
    if (stage < last) c.send_to = stage_rank(pp, stage + 1);
  } else {
    if (stage < last) c.recv_from = stage_rank(pp, stage + 1);
    if (stage > 0) c.send_to = stage_rank(pp, stage - 1);
  }
  return c;
}

std::string validate_schedule(ScheduleKind kind, int pp, int m, int v) {
  std::ostringstream s;
  const char* name = name_of(kind);
  if (pp < 1) {
    s << "pipeline size pp must be >= 1 (got " << pp << ")";
  } else if (m < 1) {
    s << "number of micro-batches must be >= 1 (got " << m << ")";
  } else if (v < 1) {
    s << "model chunks per rank must be >= 1 (got " << v << ")";
  } else if (kind != ScheduleKind::kInterleaved && v != 1) {
    s << "schedule " << name << " runs one model chunk per rank, got " << v
      << "; use schedule interleaved for more";
  } else if (kind == ScheduleKind::kInterleaved && pp < 2) {
    s << "schedule interleaved needs pp >= 2 (got pp = " << pp << "); use 1f1b";
  } else if (kind == ScheduleKind::kInterleaved && v < 2) {
    s << "schedule interleaved needs >= 2 model chunks per rank (got " << v << "); use 1f1b";
  } else if (kind == ScheduleKind::kInterleaved && m % pp != 0) {
    // Megatron's mapping walks micro-batches in groups of pp per chunk, so a partial group would
    // leave (chunk, micro-batch) pairs unscheduled.
    const int below = m / pp * pp;
    s << "schedule interleaved needs the number of micro-batches to be a multiple of pp = " << pp
      << " (got " << m << "); nearest valid: ";
    if (below > 0) s << below << " or ";
    s << below + pp;
  }
  return s.str();
}

std::vector<Action> make_schedule(ScheduleKind kind, int pp, int rank, int m, int v) {
  const std::string invalid = validate_schedule(kind, pp, m, v);
  if (!invalid.empty()) throw InputError(invalid);
  if (rank < 0 || rank >= pp)
    throw std::out_of_range("pipeline rank " + std::to_string(rank) + " outside 0.." +
                            std::to_string(pp - 1));
  switch (kind) {
    case ScheduleKind::kGpipe:
      return gpipe(m);
    case ScheduleKind::kOneFOneB:
      return one_f_one_b(pp, rank, m);
    case ScheduleKind::kInterleaved:
      return interleaved(pp, rank, m, v);
    case ScheduleKind::kZeroBubbleH1:
      return zero_bubble_h1(pp, rank, m);
  }
  return {};
}

int activation_change(const Action& a) {
  switch (a.type) {
    case ActionType::kForward:
      return 1;
    case ActionType::kBackward:
    case ActionType::kBackwardWeight:
      return -1;
    case ActionType::kBackwardInput:
      return 0;
  }
  return 0;
}

int max_in_flight(const std::vector<Action>& actions, int chunk) {
  int live = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.chunk != chunk) continue;
    live += activation_change(a);
    peak = std::max(peak, live);
  }
  return peak;
}

int max_deferred_weight_grads(const std::vector<Action>& actions, int chunk) {
  int pending = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.chunk != chunk) continue;
    if (a.type == ActionType::kBackwardInput) peak = std::max(peak, ++pending);
    if (a.type == ActionType::kBackwardWeight) --pending;
  }
  return peak;
}

}  // namespace trident::pipeline
