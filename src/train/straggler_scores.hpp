// Straggler scores: how fast each rank computes against the fastest rank doing the same work.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

namespace trident {

// A rank whose score falls below this is named in the step line (issue 52: a node that runs slow).
constexpr double kStragglerScore = 0.75;

// Per rank, over a sliding window of steps: the median of its compute seconds (the compute phases'
// CPU seconds on the host, their wall seconds on a device: PhaseTimer::compute_seconds), and its
// score, the smallest such median among the ranks of its section (one pipeline stage: the ranks
// that do the same work) over its own. 1: as fast as the fastest; 0.5: twice as slow. Medians
// ignore a step or two that a rank lost to something else; waits inside collectives are left out,
// since a fast rank waits for a slow one there. CPU seconds on the host: ranks that share cores
// take turns on them, and their wall seconds follow whom they share with, step by step.
class StragglerScores {
 public:
  // `section_of_rank`: each rank's section (its pipeline stage).
  StragglerScores(std::vector<int> section_of_rank, int window);
  // One step's compute seconds of every rank; each rank's score.
  std::vector<double> add(const std::vector<double>& compute_seconds);

 private:
  std::vector<int> section_;
  size_t window_;
  std::vector<std::deque<double>> compute_;  // per rank, the window's compute seconds
};

}  // namespace trident
