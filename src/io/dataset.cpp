// Token file reading/writing (16- and 32-bit ids) with header checks, their identity, and the
// hashed batch sampler.
#include "io/dataset.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/output_file.hpp"
#include "core/paths.hpp"

namespace trident {

TokenIds read_token_file(const std::string& path) {
  if (const std::string why = not_a_file(path); !why.empty() && why != "does not exist")
    throw InputError(fmt::format("data file '{}' {}", path, why));
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f)
    throw InputError(fmt::format(
        "data file '{}' cannot be opened (create it with `make data`, or set data.train / "
        "data.val)",
        path));
  int32_t header[kTokenHeaderInts];
  if (std::fread(header, sizeof(int32_t), kTokenHeaderInts, f.get()) != kTokenHeaderInts)
    throw InputError(fmt::format("data file '{}' is shorter than the 1024-byte header", path));
  if (header[0] != kTokenFileMagic)
    throw InputError(fmt::format("data file '{}' has magic {} but a token file has {}", path,
                                 header[0], kTokenFileMagic));
  if (header[1] != kTokenFileVersion16 && header[1] != kTokenFileVersion32)
    throw InputError(fmt::format(
        "data file '{}' has version {}; versions {} (uint16 ids, llm.c's) and {} (uint32 ids) "
        "are supported",
        path, header[1], kTokenFileVersion16, kTokenFileVersion32));
  TokenIds tokens;
  tokens.bytes_per_id = header[1] == kTokenFileVersion16 ? 2 : 4;
  const int64_t count = header[2];
  const auto bytes = std::filesystem::file_size(path);
  const uint64_t expected =
      kTokenHeaderInts * sizeof(int32_t) + static_cast<uint64_t>(count) * tokens.bytes_per_id;
  if (count < 0 || bytes != expected)
    throw InputError(
        fmt::format("data file '{}' header says {} tokens ({} bytes) but the file "
                    "has {} bytes: truncated or corrupt",
                    path, count, expected, bytes));
  tokens.ids.resize(static_cast<size_t>(count));
  bool read = true;
  if (tokens.bytes_per_id == 4) {
    read = std::fread(tokens.ids.data(), 4, tokens.ids.size(), f.get()) == tokens.ids.size();
  } else {
    std::vector<uint16_t> narrow(tokens.ids.size());
    read = std::fread(narrow.data(), 2, narrow.size(), f.get()) == narrow.size();
    std::copy(narrow.begin(), narrow.end(), tokens.ids.begin());
  }
  if (!read) throw InputError(fmt::format("data file '{}' could not be read completely", path));
  return tokens;
}

namespace {

// The ids as the file stores them (2 or 4 bytes each).
std::vector<unsigned char> stored_bytes(const TokenIds& tokens) {
  std::vector<unsigned char> bytes(tokens.ids.size() * tokens.bytes_per_id);
  if (tokens.bytes_per_id == 4) {
    std::memcpy(bytes.data(), tokens.ids.data(), bytes.size());
  } else {
    for (size_t i = 0; i < tokens.ids.size(); ++i) {
      const auto id = static_cast<uint16_t>(tokens.ids[i]);
      std::memcpy(bytes.data() + 2 * i, &id, 2);
    }
  }
  return bytes;
}

}  // namespace

void write_tokens(OutputFile& out, const TokenIds& tokens) {
  if (tokens.ids.size() > static_cast<size_t>(INT32_MAX))
    throw InputError(fmt::format("'{}': {} tokens exceed the format's int32 count", out.path(),
                                 tokens.ids.size()));
  if (tokens.bytes_per_id != 2 && tokens.bytes_per_id != 4)
    throw std::logic_error("write_tokens: ids are stored in 2 or 4 bytes");
  if (tokens.bytes_per_id == 2)
    for (size_t i = 0; i < tokens.ids.size(); ++i)
      if (tokens.ids[i] > UINT16_MAX)
        throw InputError(fmt::format(
            "'{}': token {} at position {} does not fit 16 bits: write 32-bit ids (version {})",
            out.path(), tokens.ids[i], i, kTokenFileVersion32));
  int32_t header[kTokenHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = tokens.bytes_per_id == 2 ? kTokenFileVersion16 : kTokenFileVersion32;
  header[2] = static_cast<int32_t>(tokens.ids.size());
  out.write(header, sizeof(header));
  const std::vector<unsigned char> bytes = stored_bytes(tokens);
  out.write(bytes.data(), bytes.size());
}

void write_token_file(const std::string& path, const TokenIds& tokens) {
  OutputFile out(path);
  write_tokens(out, tokens);
  out.commit();
}

std::string token_past_vocabulary(const TokenIds& tokens, int64_t vocab_size,
                                  const std::string& path) {
  for (size_t i = 0; i < tokens.ids.size(); ++i)
    if (tokens.ids[i] >= vocab_size)
      return fmt::format("data file '{}' holds token {} at position {} but model.vocab_size = {}",
                         path, tokens.ids[i], i, vocab_size);
  return "";
}

std::string data_identity(const std::string& role, const std::string& path,
                          const TokenIds& tokens) {
  const std::vector<unsigned char> bytes = stored_bytes(tokens);
  const uint64_t hash = XXH3_64bits(bytes.data(), bytes.size());
  return fmt::format("{} {} xxh3_64:{:016x} {}", role, tokens.ids.size(), hash, path);
}

std::string data_identity_change(const std::string& recorded, const std::string& current) {
  // role -> (tokens, hash, path)
  const auto parse = [](const std::string& text) {
    std::map<std::string, std::array<std::string, 3>> files;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream words(line);
      std::string role, tokens, hash, path;
      if (words >> role >> tokens >> hash) {
        std::getline(words >> std::ws, path);
        files[role] = {tokens, hash, path};
      }
    }
    return files;
  };
  const auto before = parse(recorded);
  for (const auto& [role, now] : parse(current)) {
    const auto it = before.find(role);
    if (it == before.end()) continue;
    const auto& then = it->second;
    if (then[0] != now[0])
      return fmt::format(
          "{} data file '{}' holds {} tokens; the checkpoint was trained on {} "
          "('{}')",
          role, now[2], now[0], then[0], then[2]);
    if (then[1] != now[1])
      return fmt::format(
          "{} data file '{}' holds other tokens than the checkpoint was trained on "
          "('{}': same count, {} then, {} now)",
          role, now[2], then[2], then[1], now[1]);
  }
  return "";
}

BatchSampler::BatchSampler(const std::vector<uint32_t>& tokens, uint64_t seed, uint64_t stream,
                           int seq_len, const std::string& source)
    : tokens_(tokens), seed_(seed), stream_(stream), T_(seq_len) {
  if (tokens.size() < static_cast<size_t>(seq_len) + 1)
    throw InputError(fmt::format(
        "data file '{}' has {} tokens, fewer than train.seq_len + 1 = {}: prepare more text or "
        "lower train.seq_len",
        source, tokens.size(), seq_len + 1));
}

void BatchSampler::fill(int64_t step, int first, int count, int32_t* inputs,
                        int32_t* targets) const {
  const uint64_t positions = tokens_.size() - static_cast<size_t>(T_);  // valid starts
  const uint64_t step_key = mix64(mix64(seed_ ^ mix64(stream_)) ^ static_cast<uint64_t>(step));
  for (int j = 0; j < count; ++j) {
    const uint64_t i = static_cast<uint64_t>(first + j);
    const size_t start = static_cast<size_t>(mix64(step_key ^ mix64(i + 1)) % positions);
    for (int t = 0; t < T_; ++t) {
      inputs[j * T_ + t] = tokens_[start + t];
      targets[j * T_ + t] = tokens_[start + t + 1];
    }
  }
}

}  // namespace trident
