// `trident ckpt`: inspect a checkpoint, verify its checksums, export it for llm.c.
#pragma once

#include <string>
#include <vector>

#include "io/config.hpp"
#include "io/hdf5.hpp"
#include "model/params.hpp"

namespace trident {

// A checkpoint's parameters for the serial tools: the stored config, validated, and each tensor
// read at its global shape after its shape is checked (before room for it is allocated) and
// checked against its stored checksum (CorruptCheckpoint otherwise), as a resume checks it.
class CheckpointParams {
 public:
  explicit CheckpointParams(const std::string& path);
  const Config& config() const { return config_; }
  const ParamTable& table() const { return table_; }
  std::vector<float> read(const std::string& name) const;

 private:
  std::string path_;
  Config config_;
  ParamTable table_;
  h5::Handle file_;
};

// Prints the stored configuration, the layout that wrote it, step, tensors and sizes, and the
// [model] keys a config must hold to resume from it; `json`: all of it as one JSON object.
void checkpoint_info(const std::string& path, bool json = false);

// Reads every dataset and recomputes its checksum. Prints one line per failing dataset and a
// summary; returns the number of failures. InputError when the file is not a checkpoint.
int checkpoint_verify(const std::string& path);

// Writes the parameters as an llm.c model file (gpt2_124M.bin's layout: a 256-int32 header with
// magic 20240326, version 3, max T, V, L, NH, C, padded V; then fp32 tensors in llm.c's order,
// the token embedding padded to a multiple of 128 rows with zeros).
void export_llmc(const std::string& path, const std::string& out);

}  // namespace trident
