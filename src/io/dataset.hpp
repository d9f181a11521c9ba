// Token files in llm.c's .bin format (16-bit ids) and its 32-bit extension, and the
// layout-independent batch sampler.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/output_file.hpp"

namespace trident {

// A 1024-byte header of int32: magic, version, token count; then the ids. Version 1 (llm.c's,
// and what trident wrote before 32-bit ids): uint16 ids. Version 2: uint32 ids, for vocabularies
// past 65,536 (Llama 3's 128,256); llm.c does not read it.
constexpr int32_t kTokenFileMagic = 20240520;
constexpr int32_t kTokenFileVersion16 = 1;
constexpr int32_t kTokenFileVersion32 = 2;
constexpr int kTokenHeaderInts = 256;

// A token file's ids, and the width they are stored in (2 or 4 bytes).
struct TokenIds {
  std::vector<uint32_t> ids;
  int bytes_per_id = 2;
  bool operator==(const TokenIds& o) const {
    return ids == o.ids && bytes_per_id == o.bytes_per_id;
  }
};

// Reads a whole token file of either version; throws InputError naming the file on a bad header
// or size.
TokenIds read_token_file(const std::string& path);
// Writes a token file (header, then the ids) into `out`, which the caller commits; or to `path`.
// bytes_per_id 2 writes version 1 (an id past 65,535 is an error), 4 version 2.
void write_tokens(OutputFile& out, const TokenIds& tokens);
void write_token_file(const std::string& path, const TokenIds& tokens);
// The first id at or past `vocab_size`, as an error naming the file and the position (none: "").
std::string token_past_vocabulary(const TokenIds& tokens, int64_t vocab_size,
                                  const std::string& path);

// One line naming a token file's contents, recorded in checkpoints so that a resume can refuse
// data that changed under it: "<role> <tokens> xxh3_64:<16 hex digits> <path>" (role: train or
// val; the hash is over the ids as the file stores them, which every rank reads whole anyway).
std::string data_identity(const std::string& role, const std::string& path, const TokenIds& tokens);
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
  BatchSampler(const std::vector<uint32_t>& tokens, uint64_t seed, uint64_t stream, int seq_len,
               const std::string& source);
  // Fills inputs[count*T] and targets[count*T] with global sequences [first, first+count) of
  // the batch of `step`.
  void fill(int64_t step, int first, int count, int32_t* inputs, int32_t* targets) const;

 private:
  const std::vector<uint32_t>& tokens_;
  uint64_t seed_, stream_;
  int T_;
};

}  // namespace trident
