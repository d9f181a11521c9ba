// Corpus preparation: one id per byte, or a Hugging Face tokenizer's ids per document.
#include "io/prepare.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "core/error.hpp"
#include "core/paths.hpp"
#include "io/dataset.hpp"
#include "io/hf_tokenizer.hpp"

namespace trident {

namespace {

void check_options(const PrepareOptions& o) {
  if (o.token_bytes != 0 && o.token_bytes != 2 && o.token_bytes != 4)
    throw InputError(fmt::format("--token-bytes {} must be 2 or 4", o.token_bytes));
  if (o.val_fraction <= 0 || o.val_fraction >= 1)
    throw InputError(fmt::format("--val-fraction {} must be in (0, 1)", o.val_fraction));
  if (const std::string bad = path_component_problem(o.name); !bad.empty())
    throw InputError(
        fmt::format("--name '{}' {}: it must be a file name prefix inside --out-dir", o.name, bad));
  std::error_code ec;
  if (o.text_path != "-" && std::filesystem::is_directory(o.text_path, ec))
    throw InputError(fmt::format("--text '{}' is a directory; give a text file", o.text_path));
  if (o.max_bytes < 1024 || o.max_bytes > INT32_MAX)
    throw InputError(
        fmt::format("--max-bytes {} must be between 1024 and {} (the token files' "
                    "int32 count)",
                    o.max_bytes, INT32_MAX));
  if (!o.doc_separator.empty() && o.tokenizer.empty())
    throw InputError("--doc-separator needs --tokenizer (byte-level files hold the text as it is)");
}

std::string read_text(const PrepareOptions& o) {
  std::ifstream file;
  if (o.text_path != "-") {
    file.open(o.text_path, std::ios::binary);
    if (!file) throw InputError(fmt::format("text file '{}' cannot be opened", o.text_path));
  }
  std::istream& in = o.text_path == "-" ? std::cin : file;
  std::string text;
  std::vector<char> block(1 << 20);
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    text.append(block.data(), static_cast<size_t>(in.gcount()));
    if (text.size() > static_cast<size_t>(o.max_bytes))
      throw InputError(
          fmt::format("--text '{}' holds more than --max-bytes = {} bytes: raise "
                      "--max-bytes (up to {}), or split the text",
                      o.text_path, o.max_bytes, INT32_MAX));
  }
  if (in.bad())
    throw InputError(fmt::format("reading '{}' failed: {}", o.text_path, explain_errno(errno)));
  if (text.size() < 1024)
    throw InputError(
        fmt::format("'{}' holds {} bytes; a corpus needs at least 1024", o.text_path, text.size()));
  return text;
}

std::vector<uint32_t> byte_ids(const std::string& text) {
  std::vector<uint32_t> tokens(text.size());
  const size_t chunk = std::max<size_t>(text.size() / 10, 1);
  for (size_t i = 0; i < text.size(); ++i) {
    tokens[i] = static_cast<unsigned char>(text[i]);
    if ((i + 1) % chunk == 0)
      std::fprintf(stderr, "prepare: tokenised %zu / %zu bytes (%.0f%%)\n", i + 1, text.size(),
                   100.0 * (i + 1) / text.size());
  }
  return tokens;
}

std::vector<std::string> documents_of(const std::string& text, const std::string& separator) {
  if (separator.empty()) return {text};
  std::vector<std::string> documents;
  for (size_t start = 0;;) {
    const size_t end = text.find(separator, start);
    std::string document = text.substr(start, end == std::string::npos ? end : end - start);
    if (!document.empty()) documents.push_back(std::move(document));
    if (end == std::string::npos) return documents;
    start = end + separator.size();
  }
}

// Every document's ids framed by the tokenizer's prefix and suffix and closed by its EOS; batches
// of about a MiB of text go to the tokenizer at a time, each followed by a progress line.
std::vector<uint32_t> tokenizer_ids(const std::string& text, const PrepareOptions& o,
                                    HfTokenizer& tokenizer) {
  const std::vector<std::string> documents = documents_of(text, o.doc_separator);
  constexpr size_t kBatchBytes = 1 << 20;
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint32_t> tokens;
  size_t done_bytes = 0;
  for (size_t first = 0; first < documents.size();) {
    std::vector<std::string> batch;
    size_t batch_bytes = 0;
    while (first < documents.size() && (batch.empty() || batch_bytes < kBatchBytes)) {
      batch_bytes += documents[first].size();
      batch.push_back(documents[first++]);
    }
    for (const std::vector<uint32_t>& ids : tokenizer.encode(batch)) {
      const auto& prefix = tokenizer.document_prefix();
      const auto& suffix = tokenizer.document_suffix();
      tokens.insert(tokens.end(), prefix.begin(), prefix.end());
      tokens.insert(tokens.end(), ids.begin(), ids.end());
      tokens.insert(tokens.end(), suffix.begin(), suffix.end());
      if (tokenizer.eos() && (suffix.empty() || suffix.back() != *tokenizer.eos()))
        tokens.push_back(*tokenizer.eos());
    }
    done_bytes += batch_bytes;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr,
                 "prepare: tokenised %zu / %zu documents, %zu / %zu bytes (%.0f%%), %zu tokens, "
                 "%.0f tokens/s\n",
                 first, documents.size(), done_bytes, text.size(), 100.0 * done_bytes / text.size(),
                 tokens.size(), tokens.size() / std::max(seconds, 1e-9));
  }
  return tokens;
}

}  // namespace

void prepare_corpus(const PrepareOptions& o) {
  check_options(o);
  const std::string text = read_text(o);
  std::vector<uint32_t> tokens;
  int64_t vocab_size = 256;
  if (o.tokenizer.empty()) {
    tokens = byte_ids(text);
  } else {
    if (const std::string bad = utf8_problem(text); !bad.empty())
      throw InputError(
          fmt::format("--text '{}' is not UTF-8 text: {}; a tokenizer reads UTF-8 "
                      "(convert it first, e.g. with iconv)",
                      o.text_path, bad));
    HfTokenizer tokenizer(o.tokenizer);
    vocab_size = tokenizer.vocab_size();
    std::fprintf(stderr, "prepare: tokenizer %s, %lld ids\n", o.tokenizer.c_str(),
                 static_cast<long long>(vocab_size));
    tokens = tokenizer_ids(text, o, tokenizer);
  }
  const int token_bytes = o.token_bytes != 0 ? o.token_bytes : vocab_size <= 65536 ? 2 : 4;
  if (token_bytes == 2 && vocab_size > 65536)
    throw InputError(
        fmt::format("--token-bytes 2 holds ids below 65,536, but the tokenizer has "
                    "{} ids: use --token-bytes 4",
                    vocab_size));
  const size_t n_val = static_cast<size_t>(tokens.size() * o.val_fraction);
  if (n_val == 0 || n_val == tokens.size())
    throw InputError(fmt::format("'{}' gives {} tokens, too few to split with --val-fraction {}",
                                 o.text_path, tokens.size(), o.val_fraction));
  make_directories(o.out_dir, "the --out-dir");
  const std::string train = (std::filesystem::path(o.out_dir) / (o.name + "_train.bin")).string();
  const std::string val = (std::filesystem::path(o.out_dir) / (o.name + "_val.bin")).string();
  // Both outputs checked against the text before either is written; both replaced or neither.
  OutputFile train_out(train, {o.text_path}), val_out(val, {o.text_path});
  write_tokens(train_out, {{tokens.begin(), tokens.end() - n_val}, token_bytes});
  write_tokens(val_out, {{tokens.end() - n_val, tokens.end()}, token_bytes});
  train_out.commit();
  val_out.commit();
  std::fprintf(stderr, "prepare: wrote %s (%zu tokens) and %s (%zu tokens), %d bytes an id\n",
               train.c_str(), tokens.size() - n_val, val.c_str(), n_val, token_bytes);
}

}  // namespace trident
