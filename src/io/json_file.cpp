// Bounded JSON reading: regular files, a size cap, a nesting cap.
#include "io/json_file.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/paths.hpp"

namespace trident {

nlohmann::json parse_json_object(const std::string& text, const std::string& origin) {
  // The callback sees every value as it opens; refusing depth kMaxJsonDepth + 1 there stops the
  // parser before it nests further.
  const nlohmann::json::parser_callback_t bounded = [&](int depth, nlohmann::json::parse_event_t,
                                                        nlohmann::json&) {
    if (depth > kMaxJsonDepth)
      throw InputError(
          fmt::format("'{}': JSON nested deeper than {} levels", origin, kMaxJsonDepth));
    return true;
  };
  nlohmann::json json = nlohmann::json::parse(text, bounded, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    throw InputError(fmt::format("'{}' is not a JSON object", origin));
  return json;
}

std::string read_json_text(const std::string& path, size_t max_bytes) {
  if (const std::string why = not_a_file(path); !why.empty())
    throw InputError(fmt::format("'{}' {}", path, why));
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw InputError(fmt::format("cannot read '{}': {}", path, explain_errno(ec.value())));
  if (size > max_bytes)
    throw InputError(
        fmt::format("'{}' holds {} bytes; a JSON file here may hold {}", path, size, max_bytes));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (!in || !(text << in.rdbuf()))
    throw InputError(fmt::format("cannot read '{}': {}", path, explain_errno(errno)));
  parse_json_object(text.str(), path);
  return text.str();
}

nlohmann::json read_json_object(const std::string& path, size_t max_bytes) {
  return parse_json_object(read_json_text(path, max_bytes), path);
}

}  // namespace trident
