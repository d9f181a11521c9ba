// Byte-level corpus preparation.
#include "io/prepare.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "core/error.hpp"
#include "core/paths.hpp"
#include "io/dataset.hpp"

namespace trident {

void prepare_byte_corpus(const PrepareOptions& o) {
  if (o.token_bytes != 2 && o.token_bytes != 4)
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
  std::vector<uint32_t> tokens(text.size());
  const size_t chunk = std::max<size_t>(text.size() / 10, 1);
  for (size_t i = 0; i < text.size(); ++i) {
    tokens[i] = static_cast<unsigned char>(text[i]);
    if ((i + 1) % chunk == 0)
      std::fprintf(stderr, "prepare: tokenised %zu / %zu bytes (%.0f%%)\n", i + 1, text.size(),
                   100.0 * (i + 1) / text.size());
  }
  const size_t n_val = static_cast<size_t>(tokens.size() * o.val_fraction);
  make_directories(o.out_dir, "the --out-dir");
  const std::string train = (std::filesystem::path(o.out_dir) / (o.name + "_train.bin")).string();
  const std::string val = (std::filesystem::path(o.out_dir) / (o.name + "_val.bin")).string();
  // Both outputs checked against the text before either is written; both replaced or neither.
  OutputFile train_out(train, {o.text_path}), val_out(val, {o.text_path});
  write_tokens(train_out, {{tokens.begin(), tokens.end() - n_val}, o.token_bytes});
  write_tokens(val_out, {{tokens.end() - n_val, tokens.end()}, o.token_bytes});
  train_out.commit();
  val_out.commit();
  std::fprintf(stderr, "prepare: wrote %s (%zu tokens) and %s (%zu tokens)\n", train.c_str(),
               tokens.size() - n_val, val.c_str(), n_val);
}

}  // namespace trident
