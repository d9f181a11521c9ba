// Corpus preparation: plain text -> byte-level train/val token files, with progress output.
#pragma once

#include <string>

namespace trident {

struct PrepareOptions {
  std::string text_path;  // UTF-8 text; "-" reads standard input
  std::string out_dir = "data";
  std::string name = "corpus";
  double val_fraction = 0.05;
  // Input read at most: beyond it prepare stops with an error rather than grow without bound
  // (`--text /dev/zero`). The token files' int32 count caps it at 2^31 - 1 bytes.
  long long max_bytes = 1LL << 30;
  // Bytes an id is stored in: 2 (llm.c's format) or 4 (trident's 32-bit files, which any
  // vocabulary fits).
  int token_bytes = 2;
};

// Writes <out_dir>/<name>_train.bin and _val.bin (vocabulary: the 256 byte values). The last
// val_fraction of the text is the validation split, so the two never overlap.
void prepare_byte_corpus(const PrepareOptions& options);

}  // namespace trident
