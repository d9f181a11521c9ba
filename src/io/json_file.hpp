// JSON that others wrote (Hugging Face config.json and indexes, safetensors headers), read with
// bounds: regular files only, a size cap, a nesting cap.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace trident {

// Deeper nesting than any config, index or header has; a document nested deeper is refused
// while it is parsed, before a value that deep exists (the library's recursion stays bounded).
constexpr int kMaxJsonDepth = 64;

// `text` parsed as a JSON object; InputError "<origin>: ..." when it is not valid JSON, not an
// object, or nested deeper than kMaxJsonDepth.
nlohmann::json parse_json_object(const std::string& text, const std::string& origin);

// The JSON object in the file `path`: InputError naming it when it is not a regular file (a FIFO
// or a device would block or never end), holds more than `max_bytes`, or is not parsed above.
nlohmann::json read_json_object(const std::string& path, size_t max_bytes = size_t{64} << 20);

// The text of that file, checked as read_json_object checks it: for copying a file as it is.
std::string read_json_text(const std::string& path, size_t max_bytes = size_t{64} << 20);

}  // namespace trident
