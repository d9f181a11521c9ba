// File-backed float arrays with checked positional I/O.
#include "core/file_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <type_traits>

#include "core/error.hpp"

namespace trident {

namespace {
[[noreturn]] void io_failure(const char* call, const std::string& path) {
  fatal(call, __FILE__, __LINE__, path + ": " + std::strerror(errno),
        "check offload.nvme_dir exists, is writable and has room for the optimizer states");
}
}  // namespace

FileStore::FileStore(const std::string& path, int64_t count) : path_(path), count_(count) {
  // A scratch file of this run: what is at the name goes (a link itself, never its target), and
  // the file is created exclusively, so that one planted since fails instead of being followed.
  ::unlink(path.c_str());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0) io_failure("open", path);
  // The blocks are reserved now (zeros: fresh moments), so a file system without room for them
  // fails here, before step 1, not at the first optimizer step or checkpoint.
  const off_t bytes = static_cast<off_t>(count * sizeof(float));
  if (bytes > 0) {
    const int error = ::posix_fallocate(fd_, 0, bytes);
    if (error != 0) {
      errno = error;
      io_failure("posix_fallocate", path);
    }
  }
}

FileStore::~FileStore() {
  if (fd_ >= 0) ::close(fd_);
  ::unlink(path_.c_str());
}

namespace {
// Positional I/O of a whole range, retrying short transfers.
template <typename Buffer, typename Call>
void transfer(int fd, Buffer* data, int64_t offset, int64_t count, Call call, const char* name,
              const std::string& path) {
  auto* p = reinterpret_cast<std::conditional_t<std::is_const_v<Buffer>, const char, char>*>(data);
  size_t left = static_cast<size_t>(count) * sizeof(float);
  off_t at = static_cast<off_t>(offset * sizeof(float));
  while (left > 0) {
    const ssize_t done = call(fd, p, left, at);
    if (done <= 0) io_failure(name, path);
    p += done;
    at += done;
    left -= static_cast<size_t>(done);
  }
}
}  // namespace

void FileStore::read(int64_t offset, int64_t count, float* dst) const {
  transfer(fd_, dst, offset, count, ::pread, "pread", path_);
}

void FileStore::write(int64_t offset, int64_t count, const float* src) {
  transfer(fd_, src, offset, count, ::pwrite, "pwrite", path_);
}

}  // namespace trident
