// Token file reading/writing with header checks, their identity, and the hashed batch sampler.
#include "io/dataset.hpp"

#include <fmt/format.h>
#include <xxhash.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/output_file.hpp"
#include "core/paths.hpp"

namespace trident {

std::vector<uint16_t> read_token_file(const std::string& path) {
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
  if (header[1] != kTokenFileVersion)
    throw InputError(
        fmt::format("data file '{}' has version {}; only version {} (uint16 "
                    "tokens) is supported",
                    path, header[1], kTokenFileVersion));
  const int64_t count = header[2];
  const auto bytes = std::filesystem::file_size(path);
  const uint64_t expected = kTokenHeaderInts * sizeof(int32_t) + count * sizeof(uint16_t);
  if (count < 0 || bytes != expected)
    throw InputError(
        fmt::format("data file '{}' header says {} tokens ({} bytes) but the file "
                    "has {} bytes: truncated or corrupt",
                    path, count, expected, bytes));
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  if (std::fread(tokens.data(), sizeof(uint16_t), tokens.size(), f.get()) != tokens.size())
    throw InputError(fmt::format("data file '{}' could not be read completely", path));
  return tokens;
}

void write_tokens(OutputFile& out, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    throw InputError(
        fmt::format("'{}': {} tokens exceed the format's int32 count", out.path(), tokens.size()));
  int32_t header[kTokenHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  out.write(header, sizeof(header));
  out.write(tokens.data(), tokens.size() * sizeof(uint16_t));
}

void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  OutputFile out(path);
  write_tokens(out, tokens);
  out.commit();
}

std::string data_identity(const std::string& role, const std::string& path,
                          const std::vector<uint16_t>& tokens) {
  const uint64_t hash = XXH3_64bits(tokens.data(), tokens.size() * sizeof(uint16_t));
  return fmt::format("{} {} xxh3_64:{:016x} {}", role, tokens.size(), hash, path);
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

BatchSampler::BatchSampler(const std::vector<uint16_t>& tokens, uint64_t seed, uint64_t stream,
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
