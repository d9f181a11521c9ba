// The node child that runs a Hugging Face tokenizer, and streaming decode on top of it.
#include "io/hf_tokenizer.hpp"

#include <fmt/format.h>
#include <iconv.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/build_options.hpp"
#include "core/error.hpp"
#include "core/paths.hpp"

extern char** environ;

namespace trident {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string service_script() {
  const char* set = std::getenv("TRIDENT_TOKENIZER_SERVICE");
  return set && *set ? set : TRIDENT_SOURCE_DIR "/tools/bpe/tokenizer_service.mjs";
}

std::vector<uint32_t> ids_of(const json& list) {
  return list.get<std::vector<uint32_t>>();
}

}  // namespace

std::string utf8_problem(const std::string& text) {
  iconv_t cd = iconv_open(
      "UTF-32LE", "UTF-8");  // UTF-32 refuses what UTF-8 to UTF-8 lets through (past U+10FFFF)
  if (cd == reinterpret_cast<iconv_t>(-1))
    throw std::runtime_error("iconv cannot convert UTF-8 to UTF-32 here");
  char* in = const_cast<char*>(text.data());
  size_t in_left = text.size();
  std::string problem;
  char scratch[1 << 16];
  while (in_left > 0 && problem.empty()) {
    char* out = scratch;
    size_t out_left = sizeof scratch;
    if (iconv(cd, &in, &in_left, &out, &out_left) != static_cast<size_t>(-1) || errno == E2BIG)
      continue;
    const size_t at = static_cast<size_t>(in - text.data());
    problem =
        fmt::format("byte {} (0x{:02x}) {}", at, static_cast<unsigned char>(text[at]),
                    errno == EINVAL ? "starts a character the text ends inside" : "is not UTF-8");
  }
  iconv_close(cd);
  return problem;
}

HfTokenizer::HfTokenizer(const std::string& model_dir) : dir_(model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec))
    throw InputError(
        fmt::format("tokenizer '{}' is not a directory: give a Hugging Face model "
                    "directory that holds tokenizer.json",
                    model_dir));
  if (const std::string bad = not_a_file((fs::path(model_dir) / "tokenizer.json").string());
      !bad.empty())
    throw InputError(fmt::format("tokenizer '{}': its tokenizer.json {}", model_dir, bad));
  const std::string script = service_script();
  const fs::path modules = fs::path(script).parent_path() / "node_modules" / "tokenizers";
  if (!fs::is_regular_file(script, ec) || !fs::is_directory(modules, ec))
    throw InputError(fmt::format(
        "the tokenizer service '{}' needs the npm package tokenizers beside it: run `npm install "
        "--prefix {}` (or `make tokenizers`)",
        script, fs::path(script).parent_path().string()));

  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0)
    throw std::runtime_error(fmt::format("socketpair: {}", explain_errno(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDOUT_FILENO);
  std::string node = "node";
  std::vector<char*> argv{node.data(), const_cast<char*>(script.c_str()),
                          const_cast<char*>(model_dir.c_str()), nullptr};
  const int spawned = posix_spawnp(&child_, "node", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(ends[1]);
  socket_ = ends[0];
  if (spawned != 0) {
    close(socket_);
    throw InputError(fmt::format("cannot start node for the tokenizer: {} (apt-get install nodejs)",
                                 explain_errno(spawned)));
  }
  const json hello = json::parse(exchange(""));
  vocab_size_ = hello.at("vocab_size").get<int64_t>();
  prefix_ = ids_of(hello.at("prefix"));
  suffix_ = ids_of(hello.at("suffix"));
  if (!hello.at("eos").is_null()) eos_ = hello.at("eos").get<uint32_t>();
  for (const uint32_t id : ids_of(hello.at("byte_ids"))) byte_ids_.insert(id);
}

HfTokenizer::~HfTokenizer() {
  if (socket_ >= 0) close(socket_);  // the service's input ends, and it exits
  if (child_ > 0) waitpid(child_, nullptr, 0);
}

// Sends one request line (none for "") and returns the reply line.
std::string HfTokenizer::exchange(const std::string& request_line) {
  for (size_t sent = 0; sent < request_line.size();) {
    const ssize_t n =
        send(socket_, request_line.data() + sent, request_line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the service has gone; the read below says why
    sent += static_cast<size_t>(n);
  }
  for (;;) {
    if (const size_t end = buffered_.find('\n'); end != std::string::npos) {
      std::string line = buffered_.substr(0, end);
      buffered_.erase(0, end + 1);
      return line;
    }
    char block[1 << 16];
    const ssize_t n = read(socket_, block, sizeof block);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffered_.append(block, static_cast<size_t>(n));
  }
  int status = 0;
  waitpid(child_, &status, 0);
  child_ = -1;
  throw InputError(
      fmt::format("the tokenizer of '{}' stopped ({}); its message, if any, is above", dir_,
                  WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                                    : fmt::format("signal {}", WTERMSIG(status))));
}

std::vector<std::vector<uint32_t>> HfTokenizer::encode(const std::vector<std::string>& texts) {
  const json reply = json::parse(exchange(json{{"encode", texts}}.dump() + "\n"));
  std::vector<std::vector<uint32_t>> ids;
  for (const json& one : reply.at("ids")) ids.push_back(ids_of(one));
  return ids;
}

std::string HfTokenizer::decode(const std::vector<uint32_t>& ids) {
  return json::parse(exchange(json{{"decode", ids}}.dump() + "\n")).at("text").get<std::string>();
}

TextStream::TextStream(TextDecoder& tokenizer, const std::vector<uint32_t>& context)
    : tokenizer_(tokenizer) {
  // The context's last ids before any trailing byte-fallback run: a sampled byte would otherwise
  // join that run and rewrite the prompt's text (one invalid byte turns the run into U+FFFD).
  auto end = context.end();
  while (end != context.begin() && tokenizer.byte_token(*(end - 1))) --end;
  ids_.assign(end - std::min<ptrdiff_t>(end - context.begin(), kContextIds), end);
  emitted_ = tokenizer.decode(ids_);
}

std::string TextStream::push(uint32_t id) {
  ids_.push_back(id);
  return tokenizer_.byte_token(id) ? "" : advance(false);
}

std::string TextStream::finish() {
  return advance(true);
}

std::string TextStream::advance(bool final) {
  const std::string text = tokenizer_.decode(ids_);
  static const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD: a character not complete
  const bool incomplete =
      text.size() >= kReplacement.size() &&
      text.compare(text.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
  if (text.size() <= emitted_.size() || text.compare(0, emitted_.size(), emitted_) != 0 ||
      (incomplete && !final))
    return "";
  std::string fresh = text.substr(emitted_.size());
  emitted_ = text;
  return fresh;
}

}  // namespace trident
