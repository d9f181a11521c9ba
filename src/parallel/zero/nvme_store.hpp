// Optimizer states on NVMe (or any file system): float arrays in files, read and written in
// blocks through a bounded buffer, so they do not count as resident memory.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

class NvmeStore {
 public:
  // Creates (truncates) `path` holding `count` zero floats; the file is removed on destruction.
  NvmeStore(const std::string& path, int64_t count);
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  void read(int64_t offset, int64_t count, float* dst) const;
  void write(int64_t offset, int64_t count, const float* src);
  int64_t size() const { return count_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int64_t count_;
  int fd_ = -1;
};

}  // namespace trident
