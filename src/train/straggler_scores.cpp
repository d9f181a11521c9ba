// Straggler scores from the gathered compute seconds: windowed medians, compared within a stage.
#include "train/straggler_scores.hpp"

#include <algorithm>
#include <map>

namespace trident {

namespace {

double median(std::vector<double> values) {
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<ptrdiff_t>(mid), values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double upper = values[mid];
  return (*std::max_element(values.begin(), values.begin() + static_cast<ptrdiff_t>(mid)) + upper) /
         2;
}

}  // namespace

StragglerScores::StragglerScores(std::vector<int> section_of_rank, int window)
    : section_(std::move(section_of_rank)),
      window_(static_cast<size_t>(std::max(window, 1))),
      compute_(section_.size()) {}

std::vector<double> StragglerScores::add(const std::vector<double>& compute_seconds) {
  const size_t ranks = section_.size();
  std::vector<double> medians(ranks);
  std::map<int, double> fastest;  // per section
  for (size_t r = 0; r < ranks; ++r) {
    compute_[r].push_back(compute_seconds[r]);
    if (compute_[r].size() > window_) compute_[r].pop_front();
    medians[r] = median({compute_[r].begin(), compute_[r].end()});
    const auto [at, fresh] = fastest.emplace(section_[r], medians[r]);
    if (!fresh) at->second = std::min(at->second, medians[r]);
  }
  std::vector<double> scores(ranks, 1.0);
  for (size_t r = 0; r < ranks; ++r)
    if (medians[r] > 0) scores[r] = fastest.at(section_[r]) / medians[r];
  return scores;
}

}  // namespace trident
