// Token files in llm.c's .bin format, and the layout-independent batch sampler.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/output_file.hpp"

namespace trident {

constexpr int32_t kTokenFileMagic = 20240520;
constexpr int32_t kTokenFileVersion = 1;
constexpr int kTokenHeaderInts = 256;

// Reads a whole token file; throws InputError naming the file on a bad header or size.
std::vector<uint16_t> read_token_file(const std::string& path);
// Writes a token file (header, then the ids) into `out`, which the caller commits; or to `path`.
void write_tokens(OutputFile& out, const std::vector<uint16_t>& tokens);
void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);

// One line naming a token file's contents, recorded in checkpoints so that a resume can refuse
// data that changed under it: "<role> <tokens> xxh3_64:<16 hex digits> <path>" (role: train or
// val; the hash is over the tokens, which every rank reads whole anyway).
std::string data_identity(const std::string& role, const std::string& path,
                          const std::vector<uint16_t>& tokens);
// How `current` (data_identity lines) differs from `recorded`: the first file whose token count
// or hash changed, described for an error; empty when none did. Roles that `recorded` lacks, and
// the paths, are not compared (a moved file is the same data). `recorded` may be anything a
// checkpoint holds.
std::string data_identity_change(const std::string& recorded, const std::string& current);

// The batch of step s is a pure function of (seed, s): sequence i of the global batch starts
// at a position hashed from (seed, stream, s, i). Every layout reads the same tokens.
class BatchSampler {
 public:
  // `source` names the tokens' file in errors.
  BatchSampler(const std::vector<uint16_t>& tokens, uint64_t seed, uint64_t stream, int seq_len,
               const std::string& source);
  // Fills inputs[count*T] and targets[count*T] with global sequences [first, first+count) of
  // the batch of `step`.
  void fill(int64_t step, int first, int count, int32_t* inputs, int32_t* targets) const;

 private:
  const std::vector<uint16_t>& tokens_;
  uint64_t seed_, stream_;
  int T_;
};

}  // namespace trident
