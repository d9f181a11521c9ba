// runs/<name>/timings.h5: per-step, per-rank phase seconds and step metrics, flushed each row.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/hdf5.hpp"

namespace trident {

struct StepRecord {
  int64_t step = 0;
  double loss = 0, val_loss = 0, lr = 0, grad_norm = 0;
  double loss_scale = 1;  // fp16 dynamic loss scale used by this step
  int64_t skipped = 0;    // 1 when the step made no update (fp16 overflow)
  int64_t tokens = 0;
  double step_seconds_max = 0, step_seconds_min = 0;
  double bubble = 0;                   // mean share of the step ranks spent waiting on the pipeline
  std::vector<double> phase_seconds;   // [ranks * phases]
  std::vector<double> peak_mem_bytes;  // [ranks]
  std::vector<double> peak_mem_by_category;  // [ranks * memory categories]
};

// Written by one rank. Every dataset is chunked and extendible along steps and flushed after
// each row, so a killed run keeps every completed step.
class TimingsWriter {
 public:
  // `predicted_memory` [ranks * memory categories]: the memory model's bytes per rank.
  TimingsWriter(const std::string& path, int ranks,
                const std::map<std::string, std::string>& attributes,
                const std::vector<double>& predicted_memory);
  void append(const StepRecord& r);

 private:
  void append_row(const std::string& name, const void* row, hid_t type);
  h5::Handle file_;
  int ranks_;
  hsize_t rows_ = 0;
};

}  // namespace trident
