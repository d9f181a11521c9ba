// Token files (llm.c .bin format) and the layout-independent batch sampler.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/dataset.hpp"

using namespace trident;

namespace {
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("trident_test_" + name)).string();
}
TokenIds ramp(size_t n, uint32_t vocab = 50257, int bytes_per_id = 2) {
  TokenIds t{std::vector<uint32_t>(n), bytes_per_id};
  for (size_t i = 0; i < n; ++i) t.ids[i] = static_cast<uint32_t>((i * 7919) % vocab);
  return t;
}
void write_raw(const std::string& path, const std::vector<int32_t>& header, size_t tokens) {
  std::ofstream f(path, std::ios::binary);
  std::vector<int32_t> h(256, 0);
  std::copy(header.begin(), header.end(), h.begin());
  f.write(reinterpret_cast<const char*>(h.data()), 1024);
  std::vector<uint16_t> t(tokens, 1);
  f.write(reinterpret_cast<const char*>(t.data()), t.size() * 2);
}
}  // namespace

TEST(TokenFile, RoundTripsAndMatchesLlmcLayout) {
  const std::string path = temp_path("roundtrip.bin");
  const auto tokens = ramp(1000);
  write_token_file(path, tokens);
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 2000u);
  std::ifstream f(path, std::ios::binary);
  int32_t header[3];
  f.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 1000);
  EXPECT_EQ(read_token_file(path), tokens);
  std::filesystem::remove(path);
}

// Version 2 holds 32-bit ids (a vocabulary past 65,536); version 1 (llm.c's) stays what 16-bit
// ids write, so files written before 32-bit ids read as they were and hash as they did.
TEST(TokenFile, ThirtyTwoBitIdsRoundTripInVersionTwo) {
  const std::string path = temp_path("roundtrip32.bin");
  const TokenIds tokens = ramp(1000, 128256, 4);
  write_token_file(path, tokens);
  EXPECT_EQ(std::filesystem::file_size(path), 1024u + 4000u);
  std::ifstream f(path, std::ios::binary);
  int32_t header[3];
  f.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[1], 2);
  EXPECT_EQ(read_token_file(path), tokens);
  // The same ids hash differently in another width: the identity is of the file as stored.
  TokenIds narrow = ramp(1000);
  TokenIds wide = narrow;
  wide.bytes_per_id = 4;
  EXPECT_NE(data_identity("train", "t", narrow), data_identity("train", "t", wide));
  // A 16-bit file cannot hold an id past 65,535: refused, the file untouched.
  EXPECT_THROW(write_token_file(path, ramp(1000, 128256, 2)), InputError);
  EXPECT_EQ(read_token_file(path), tokens);
  std::filesystem::remove(path);
}

TEST(TokenFile, AnIdPastTheVocabularyIsNamedWithItsFileAndPosition) {
  TokenIds tokens = ramp(100, 1000, 4);
  EXPECT_EQ(token_past_vocabulary(tokens, 1000, "d.bin"), "");
  tokens.ids[57] = 70000;
  EXPECT_EQ(token_past_vocabulary(tokens, 70000, "d.bin"),
            "data file 'd.bin' holds token 70000 at position 57 but model.vocab_size = 70000");
}

TEST(TokenFile, RejectsBadHeadersWithTheFileName) {
  const std::string path = temp_path("bad.bin");
  auto message = [&] {
    try {
      read_token_file(path);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  write_raw(path, {12345, 1, 10}, 10);
  EXPECT_NE(message().find("magic"), std::string::npos) << message();
  write_raw(path, {20240520, 3, 10}, 10);
  EXPECT_NE(message().find("version"), std::string::npos) << message();
  write_raw(path, {20240520, 1, 10}, 6);
  EXPECT_NE(message().find("truncated"), std::string::npos) << message();
  EXPECT_NE(message().find(path), std::string::npos);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "short";
  EXPECT_NE(message().find("header"), std::string::npos) << message();
  std::filesystem::remove(path);
  EXPECT_NE(message().find("cannot be opened"), std::string::npos) << message();
}

TEST(BatchSampler, BatchIsAPureFunctionOfSeedAndStepWhateverTheSlicing) {
  const auto tokens = ramp(5000);
  const int T = 8;
  BatchSampler a(tokens.ids, 42, 1, T, "a.bin"), b(tokens.ids, 42, 1, T, "b.bin"),
      other_seed(tokens.ids, 43, 1, T, "c.bin");
  std::vector<int32_t> whole_in(4 * T), whole_tg(4 * T), part_in(2 * T), part_tg(2 * T);
  a.fill(17, 0, 4, whole_in.data(), whole_tg.data());
  b.fill(17, 2, 2, part_in.data(), part_tg.data());  // e.g. dp rank 1 of 2
  for (int i = 0; i < 2 * T; ++i) {
    EXPECT_EQ(part_in[i], whole_in[2 * T + i]);
    EXPECT_EQ(part_tg[i], whole_tg[2 * T + i]);
  }
  // Targets are the inputs shifted by one token.
  for (int s = 0; s < 4; ++s)
    for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(whole_tg[s * T + t], whole_in[s * T + t + 1]);
  std::vector<int32_t> next_in(4 * T), next_tg(4 * T), seed_in(4 * T), seed_tg(4 * T);
  a.fill(18, 0, 4, next_in.data(), next_tg.data());
  other_seed.fill(17, 0, 4, seed_in.data(), seed_tg.data());
  EXPECT_NE(next_in, whole_in);
  EXPECT_NE(seed_in, whole_in);
}

TEST(BatchSampler, RejectsDataShorterThanASequence) {
  const auto tokens = ramp(8);
  try {
    BatchSampler(tokens.ids, 1, 1, 8, "short.bin");
    FAIL() << "a data file shorter than seq_len + 1 tokens was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("data file 'short.bin' has"), std::string::npos)
        << e.what();
  }
}

// What a resume compares: token counts and hashes per role, not paths (a moved file is the same
// data); a recorded text that is garbage, or lacks a role, changes nothing.
TEST(DataIdentity, NamesTheFirstFileWhoseTokensChanged) {
  const auto tokens = ramp(100);
  auto swapped = tokens;
  std::swap(swapped.ids[3], swapped.ids[40]);
  const std::string recorded = data_identity("train", "a/train.bin", tokens) + "\n" +
                               data_identity("val", "a/val.bin", tokens);
  EXPECT_EQ(recorded.rfind("train 100 xxh3_64:", 0), 0u) << recorded;
  EXPECT_EQ(data_identity_change(recorded, data_identity("train", "b/moved.bin", tokens)), "");
  const std::string shuffled =
      data_identity_change(recorded, data_identity("val", "a/val.bin", swapped));
  EXPECT_EQ(shuffled.rfind("val data file 'a/val.bin' holds other tokens", 0), 0u) << shuffled;
  const std::string shorter = data_identity_change(
      recorded,
      data_identity("train", "a/train.bin",
                    TokenIds{std::vector<uint32_t>(tokens.ids.begin(), tokens.ids.end() - 1), 2}));
  EXPECT_EQ(shorter.rfind("train data file 'a/train.bin' holds 99 tokens; the checkpoint was "
                          "trained on 100",
                          0),
            0u)
      << shorter;
  EXPECT_EQ(data_identity_change("\x01 garbage\n\n  \nval", data_identity("val", "v", swapped)),
            "");
  EXPECT_EQ(
      data_identity_change(data_identity("train", "t", tokens), data_identity("val", "v", swapped)),
      "");
}
