// A Hugging Face model's own tokenizer (its directory's tokenizer.json), for prepare and generate.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace trident {

// What TextStream needs of a tokenizer.
class TextDecoder {
 public:
  virtual ~TextDecoder() = default;
  // The text of `ids`; an incomplete or invalid UTF-8 sequence comes out as U+FFFD.
  virtual std::string decode(const std::vector<uint32_t>& ids) = 0;
  // A byte-fallback token (<0xNN>): its text depends on the byte tokens next to it.
  virtual bool byte_token(uint32_t id) const = 0;
};

// Encodes and decodes with the npm tokenizers (Hugging Face's Rust implementation) run by
// tools/bpe/tokenizer_service.mjs in a node child process: whatever tokenizer.json describes
// (byte-level BPE, BPE with byte fallback, added tokens), offline. One child per instance,
// stopped by the destructor.
class HfTokenizer : public TextDecoder {
 public:
  // `model_dir` holds tokenizer.json (and tokenizer_config.json, special_tokens_map.json where
  // present). InputError when it does not, when node or the npm package is missing, or when the
  // service refuses the files (its message on standard error).
  explicit HfTokenizer(const std::string& model_dir);
  ~HfTokenizer() override;
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  const std::string& dir() const { return dir_; }
  // Its largest id + 1 (added tokens included): the vocabulary a model needs for its ids.
  int64_t vocab_size() const { return vocab_size_; }
  // What a document starts and ends with: tokenizer_config.json's add_bos_token / add_eos_token
  // where it says, else what tokenizer.json's post-processor adds (Llama: BOS first).
  const std::vector<uint32_t>& document_prefix() const { return prefix_; }
  const std::vector<uint32_t>& document_suffix() const { return suffix_; }
  std::optional<uint32_t> eos() const { return eos_; }
  bool byte_token(uint32_t id) const override { return byte_ids_.count(id) > 0; }

  // Each text's ids, no special tokens added. The texts must be UTF-8 (see utf8_problem).
  std::vector<std::vector<uint32_t>> encode(const std::vector<std::string>& texts);
  // The text of `ids`, special tokens spelled out.
  std::string decode(const std::vector<uint32_t>& ids) override;

 private:
  std::string exchange(const std::string& request_line);

  std::string dir_;
  pid_t child_ = -1;
  int socket_ = -1;
  std::string buffered_;  // read past the last line returned
  int64_t vocab_size_ = 0;
  std::vector<uint32_t> prefix_, suffix_;
  std::optional<uint32_t> eos_;
  std::set<uint32_t> byte_ids_;
};

// Where `text` stops being UTF-8 ("byte 17 (0xff) is not UTF-8"), or "" when all of it is.
std::string utf8_problem(const std::string& text);

// Emits decoded text as ids come, never splitting a UTF-8 character or a token whose text depends
// on the next one: every push decodes the ids since the stream began (after up to 5 of the
// context's, those before a trailing byte-fallback run, so that a SentencePiece word keeps its
// leading space and no sampled byte rewrites the prompt) and emits what follows the text so far,
// once that text is still its prefix, it does not end in an incomplete character and the last id
// is not a byte-fallback token (a run of those decodes as a group: one invalid byte turns every
// byte of the run into U+FFFD, so its text is final only when the run ends).
class TextStream {
 public:
  TextStream(TextDecoder& tokenizer, const std::vector<uint32_t>& context);
  // The new text `id` completes (often "", sometimes several characters).
  std::string push(uint32_t id);
  // Whatever is left, incomplete characters replaced.
  std::string finish();

 private:
  std::string advance(bool final);

  static constexpr size_t kContextIds = 5;  // ids of the context that every decode starts with
  TextDecoder& tokenizer_;
  std::vector<uint32_t> ids_;
  std::string emitted_;  // the decoded text of ids_ so far, the context's text first
};

}  // namespace trident
