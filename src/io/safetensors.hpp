// Hugging Face safetensors files, read with every offset checked and written: the byte format only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/output_file.hpp"

namespace trident {

// One tensor of a safetensors file: its dtype name ("F32", "BF16", ...), shape and byte range
// [begin, end) in the data that follows the header.
struct SafeTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  int64_t numel() const;
};

// Bytes per element of a safetensors dtype name; 0 for a name the format does not define.
int safetensors_dtype_bytes(const std::string& dtype);

// A safetensors file opened for reading. The constructor reads the 8-byte header length and the
// JSON header (nlohmann) and checks, before anything of a tensor's size is allocated: the header
// length against the file and a 100 MB cap, that the header is a JSON object of tensors (plus an
// optional "__metadata__" of strings), each with a known dtype, a shape of non-negative integers
// and data offsets whose length is the shape's element count times the dtype's size; and that the
// tensors tile the data exactly: no overlap, no gap, nothing past the end of the file. InputError
// naming the file and the tensor otherwise.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, SafeTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor `name`; InputError naming the file when it has none.
  const SafeTensor& at(const std::string& name) const;
  // The tensor's bytes, as stored (little-endian).
  std::vector<char> read(const std::string& name) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafeTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: name, dtype name, shape and its little-endian bytes.
struct SafeTensorData {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

// Writes `tensors` in the order given (header padded with spaces to a multiple of 8 bytes, as
// Hugging Face's writer does) into `out`, which the caller commits; or to `path` (an OutputFile).
// InputError on a write error.
void write_safetensors(OutputFile& out, const std::vector<SafeTensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, const std::vector<SafeTensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace trident
