// Float arrays in files (NVMe offload of optimizer states and ZeRO-3 parameters), read and
// written in blocks through a bounded buffer, so they do not count as resident memory.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

class FileStore {
 public:
  // Creates (truncates) `path` holding `count` zero floats; the file is removed on destruction.
  FileStore(const std::string& path, int64_t count);
  ~FileStore();
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  void read(int64_t offset, int64_t count, float* dst) const;
  void write(int64_t offset, int64_t count, const float* src);
  int64_t size() const { return count_; }

 private:
  std::string path_;
  int64_t count_;
  int fd_ = -1;
};

}  // namespace trident
