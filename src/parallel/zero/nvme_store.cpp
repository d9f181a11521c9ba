// File-backed float arrays with checked positional I/O.
#include "parallel/zero/nvme_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace trident {

namespace {
[[noreturn]] void io_failure(const char* call, const std::string& path) {
  fatal(call, __FILE__, __LINE__, path + ": " + std::strerror(errno),
        "check offload.nvme_dir exists, is writable and has room for the optimizer states");
}
}  // namespace

NvmeStore::NvmeStore(const std::string& path, int64_t count) : path_(path), count_(count) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd_ < 0) io_failure("open", path);
  if (::ftruncate(fd_, static_cast<off_t>(count * sizeof(float))) != 0)
    io_failure("ftruncate", path);  // a sparse file of zeros: fresh moments
}

NvmeStore::~NvmeStore() {
  if (fd_ >= 0) ::close(fd_);
  ::unlink(path_.c_str());
}

void NvmeStore::read(int64_t offset, int64_t count, float* dst) const {
  char* p = reinterpret_cast<char*>(dst);
  size_t left = static_cast<size_t>(count) * sizeof(float);
  off_t at = static_cast<off_t>(offset * sizeof(float));
  while (left > 0) {
    const ssize_t got = ::pread(fd_, p, left, at);
    if (got <= 0) io_failure("pread", path_);
    p += got;
    at += got;
    left -= static_cast<size_t>(got);
  }
}

void NvmeStore::write(int64_t offset, int64_t count, const float* src) {
  const char* p = reinterpret_cast<const char*>(src);
  size_t left = static_cast<size_t>(count) * sizeof(float);
  off_t at = static_cast<off_t>(offset * sizeof(float));
  while (left > 0) {
    const ssize_t put = ::pwrite(fd_, p, left, at);
    if (put <= 0) io_failure("pwrite", path_);
    p += put;
    at += put;
    left -= static_cast<size_t>(put);
  }
}

}  // namespace trident
