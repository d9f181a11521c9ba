// Text from token ids: UTF-8 validation, and streaming that never splits a character.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/hf_tokenizer.hpp"

using namespace trident;

namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

// A byte-fallback tokenizer's decoder in miniature: ids below 256 are <0xNN> byte tokens, decoded
// as a run (a run that is not UTF-8 gives U+FFFD per byte, as Hugging Face's ByteFallback does);
// id 256 + c is the ASCII character c; a leading space is stripped (its Strip decoder).
class ByteFallbackDecoder : public TextDecoder {
 public:
  std::string decode(const std::vector<uint32_t>& ids) override {
    std::string text, run;
    auto close_run = [&] {
      if (utf8_problem(run).empty())
        text += run;
      else
        for (size_t i = 0; i < run.size(); ++i) text += kReplacement;
      run.clear();
    };
    for (const uint32_t id : ids) {
      if (byte_token(id)) {
        run += static_cast<char>(id);
        continue;
      }
      close_run();
      text += static_cast<char>(id - 256);
    }
    close_run();
    return !text.empty() && text[0] == ' ' ? text.substr(1) : text;
  }
  bool byte_token(uint32_t id) const override { return id < 256; }
  // The ids of `text`: ASCII as characters, everything else as bytes.
  static std::vector<uint32_t> ids(const std::string& text) {
    std::vector<uint32_t> out;
    for (const unsigned char c : text) out.push_back(c < 128 ? 256 + c : c);
    return out;
  }
};

}  // namespace

TEST(Utf8, NamesTheFirstByteThatIsNotUtf8) {
  EXPECT_EQ(utf8_problem("plain ASCII, café, 天地, 🚀"), "");
  EXPECT_EQ(utf8_problem("ab\xff"), "byte 2 (0xff) is not UTF-8");
  EXPECT_EQ(utf8_problem("caf\xc3"), "byte 3 (0xc3) starts a character the text ends inside");
  EXPECT_NE(utf8_problem("\xc0\xaf"), "");          // an overlong '/'
  EXPECT_NE(utf8_problem("x\xed\xa0\x80"), "");     // a UTF-16 surrogate
  EXPECT_NE(utf8_problem("\xf4\x90\x80\x80"), "");  // past U+10FFFF
}

TEST(TextStream, PiecesAreWholeCharactersAndAddUpToTheDecode) {
  ByteFallbackDecoder decoder;
  const std::vector<uint32_t> context = ByteFallbackDecoder::ids(" In the beginning");
  const std::vector<uint32_t> sample =
      ByteFallbackDecoder::ids(" é天🚀 ok\xbf\xbf x 👨‍👩‍👧");
  TextStream stream(decoder, context);
  std::string streamed;
  int pieces = 0;
  for (const uint32_t id : sample) {
    const std::string piece = stream.push(id);
    EXPECT_EQ(utf8_problem(piece), "") << "piece " << pieces << " splits a character";
    pieces += !piece.empty();
    streamed += piece;
  }
  streamed += stream.finish();
  std::vector<uint32_t> all = context;
  all.insert(all.end(), sample.begin(), sample.end());
  EXPECT_EQ(decoder.decode(context) + streamed, decoder.decode(all));
  EXPECT_EQ(streamed, " é天🚀 ok" + kReplacement + kReplacement + " x 👨‍👩‍👧");
  EXPECT_LT(pieces, static_cast<int>(sample.size()));  // held while a character was incomplete
}

TEST(TextStream, ASampledByteDoesNotRewriteThePrompt) {
  // The prompt ends in a character's bytes; a continuation byte sampled after them would turn the
  // whole run into U+FFFD in one decode: the stream prints the prompt's text unchanged and the
  // lone byte as U+FFFD.
  ByteFallbackDecoder decoder;
  TextStream stream(decoder, ByteFallbackDecoder::ids(" And 天"));
  std::string streamed;
  for (const uint32_t id : ByteFallbackDecoder::ids("\xbf, x")) streamed += stream.push(id);
  streamed += stream.finish();
  EXPECT_EQ(streamed, kReplacement + ", x");
}

TEST(TextStream, FinishPrintsAnIncompleteCharacterAsReplacement) {
  ByteFallbackDecoder decoder;
  TextStream stream(decoder, ByteFallbackDecoder::ids(" a"));
  EXPECT_EQ(stream.push(256 + 'b'), "b");
  EXPECT_EQ(stream.push(0xe5), "");  // the first of 天's three bytes
  EXPECT_EQ(stream.push(0xa4), "");
  EXPECT_EQ(stream.finish(), kReplacement + kReplacement);
}
