// safetensors reading (every offset checked before any tensor is read) and writing.
#include "io/safetensors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/paths.hpp"
#include "io/json_file.hpp"

namespace trident {
namespace {

// Hugging Face's reader refuses longer headers too; a header is a few bytes per tensor.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// a * b, or false when it overflows int64.
bool multiply(int64_t a, int64_t b, int64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

}  // namespace

int64_t SafeTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int safetensors_dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int> bytes{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  const auto it = bytes.find(dtype);
  return it == bytes.end() ? 0 : it->second;
}

namespace {

// The JSON header of the safetensors file at `path`, every length checked against the file's size;
// `data_start` and `data_bytes` receive where the tensors' bytes begin and how many there are.
std::string read_header(const std::string& path, uint64_t& data_start, uint64_t& data_bytes) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError(fmt::format("safetensors file '{}' does not exist or is not a file", path));
  const uint64_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (!in || ec) throw InputError(fmt::format("cannot open '{}': {}", path, explain_errno(errno)));
  unsigned char prefix[8] = {};
  if (size < 8 || !in.read(reinterpret_cast<char*>(prefix), 8))
    throw InputError(fmt::format(
        "'{}' is not a safetensors file: {} bytes, shorter than the 8-byte header length", path,
        size));
  const uint64_t header_bytes = read_u64_le(prefix);
  if (header_bytes > size - 8)
    throw InputError(fmt::format(
        "'{}': the header length {} runs past the end of the file ({} bytes after the length)",
        path, header_bytes, size - 8));
  if (header_bytes > kMaxHeaderBytes)
    throw InputError(fmt::format("'{}': a header of {} bytes exceeds the {} bytes allowed", path,
                                 header_bytes, kMaxHeaderBytes));
  std::string header(static_cast<size_t>(header_bytes), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_bytes)))
    throw InputError(fmt::format("'{}': cannot read its {}-byte header", path, header_bytes));
  data_start = 8 + header_bytes;
  data_bytes = size - data_start;
  return header;
}

// Tensor `name`'s header entry: a known dtype, a shape whose element count does not overflow, and
// data offsets inside the data that hold exactly its bytes.
SafeTensor parse_tensor(const std::string& path, const std::string& name,
                        const nlohmann::json& entry, uint64_t data_bytes) {
  const auto bad = [&](const std::string& why) {
    return InputError(fmt::format("'{}': tensor '{}': {}", path, name, why));
  };
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets"))
    throw bad("expected an object with dtype, shape and data_offsets");
  SafeTensor t;
  if (!entry["dtype"].is_string()) throw bad("dtype is not a string");
  t.dtype = entry["dtype"].get<std::string>();
  const int element_bytes = safetensors_dtype_bytes(t.dtype);
  if (element_bytes == 0) throw bad(fmt::format("unknown dtype '{}'", t.dtype));
  if (!entry["shape"].is_array()) throw bad("shape is not an array");
  int64_t elements = 1;
  for (const auto& d : entry["shape"]) {
    if (!d.is_number_unsigned()) throw bad("shape holds something other than a size");
    const uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        !multiply(elements, static_cast<int64_t>(dim), elements))
      throw bad("its shape's element count overflows");
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    throw bad("data_offsets is not a pair of byte offsets");
  t.begin = offsets[0].get<uint64_t>();
  t.end = offsets[1].get<uint64_t>();
  if (t.begin > t.end)
    throw bad(fmt::format("data_offsets [{}, {}] run backwards", t.begin, t.end));
  if (t.end > data_bytes)
    throw bad(fmt::format("data_offsets [{}, {}] run past the end of the file ({} data bytes)",
                          t.begin, t.end, data_bytes));
  int64_t bytes = 0;
  if (!multiply(elements, element_bytes, bytes) || static_cast<uint64_t>(bytes) != t.end - t.begin)
    throw bad(fmt::format("data_offsets [{}, {}] hold {} bytes, but {} x {} elements of {} take {}",
                          t.begin, t.end, t.end - t.begin, element_bytes, elements, t.dtype,
                          bytes));
  return t;
}

// The tensors tile the data: sorted by offset, each starts where the previous ends, the last at
// the end of the file.
void require_tiling(const std::string& path, const std::map<std::string, SafeTensor>& tensors,
                    uint64_t data_bytes) {
  std::vector<std::pair<std::string, const SafeTensor*>> order;
  for (const auto& [name, t] : tensors) order.emplace_back(name, &t);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second->begin != b.second->begin ? a.second->begin < b.second->begin
                                              : a.second->end < b.second->end;
  });
  uint64_t expected = 0;
  std::string previous;
  for (const auto& [name, t] : order) {
    if (t->begin < expected)
      throw InputError(fmt::format("'{}': tensor '{}' at bytes [{}, {}] overlaps tensor '{}'", path,
                                   name, t->begin, t->end, previous));
    if (t->begin > expected)
      throw InputError(fmt::format("'{}': bytes [{}, {}] before tensor '{}' belong to no tensor",
                                   path, expected, t->begin, name));
    expected = t->end;
    previous = name;
  }
  if (expected != data_bytes)
    throw InputError(
        fmt::format("'{}': its last {} bytes belong to no tensor", path, data_bytes - expected));
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  uint64_t data_bytes = 0;
  const std::string header = read_header(path, data_start_, data_bytes);
  const nlohmann::json json = parse_json_object(header, path + " (header)");
  for (const auto& [name, entry] : json.items()) {
    if (name != "__metadata__") {
      tensors_.emplace(name, parse_tensor(path, name, entry, data_bytes));
      continue;
    }
    if (!entry.is_object())
      throw InputError(fmt::format("'{}': __metadata__ is not an object of strings", path));
    for (const auto& [key, value] : entry.items()) {
      if (!value.is_string())
        throw InputError(fmt::format("'{}': __metadata__ entry '{}' is not a string", path, key));
      metadata_[key] = value.get<std::string>();
    }
  }
  require_tiling(path, tensors_, data_bytes);
}

const SafeTensor& SafetensorsFile::at(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw InputError(fmt::format("'{}' has no tensor '{}'", path_, name));
  return it->second;
}

std::vector<char> SafetensorsFile::read(const std::string& name) const {
  const SafeTensor& t = at(name);
  std::ifstream in(path_, std::ios::binary);
  std::vector<char> bytes(static_cast<size_t>(t.end - t.begin));
  in.seekg(static_cast<std::streamoff>(data_start_ + t.begin));
  if (!in || !in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())))
    throw InputError(
        fmt::format("'{}': cannot read tensor '{}' (was the file truncated?)", path_, name));
  return bytes;
}

void write_safetensors(OutputFile& out, const std::vector<SafeTensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafeTensorData& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  out.write(length, 8);
  out.write(text);
  for (const SafeTensorData& t : tensors) out.write(t.bytes.data(), t.bytes.size());
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  OutputFile out(path);
  write_safetensors(out, tensors, metadata);
  out.commit();
}

}  // namespace trident
