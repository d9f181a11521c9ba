// Corpus preparation: plain text -> train/val token files (bytes, or a Hugging Face tokenizer).
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
  // vocabulary fits); 0: 2 where the vocabulary fits 16 bits, else 4.
  int token_bytes = 0;
  // A Hugging Face model directory whose tokenizer.json encodes the text; "": one id per byte.
  std::string tokenizer;
  // With a tokenizer: the text is cut into documents at each occurrence of this string (which is
  // dropped); "": the whole text is one document. Each document gets the tokenizer's prefix and
  // suffix (BOS, ...) and ends with its EOS.
  std::string doc_separator;
};

// Writes <out_dir>/<name>_train.bin and _val.bin: the text's bytes as ids (vocabulary 256), or
// its tokens by `tokenizer`. The last val_fraction of the ids is the validation split, so the two
// never overlap. Progress and throughput go to standard error.
void prepare_corpus(const PrepareOptions& options);

}  // namespace trident
