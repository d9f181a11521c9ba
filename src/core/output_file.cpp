// OutputFile: exclusive temporaries, checked writes, sync and rename.
#include "core/output_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <random>

#include "core/error.hpp"
#include "core/paths.hpp"

namespace trident {

namespace {

namespace fs = std::filesystem;

std::string directory_of(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  return dir.empty() ? "." : dir.string();
}

// A name beside `path` that no one can predict: a link planted for it in advance is unlikely,
// and O_EXCL refuses one anyway.
std::string temporary_name(const std::string& path) {
  std::random_device entropy;
  const uint64_t salt = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  const fs::path p(path);
  return (p.parent_path() /
          fmt::format(".{}.{}.{:016x}.tmp", p.filename().string(), getpid(), salt))
      .string();
}

void sync_directory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // the rename happened; a directory we cannot open cannot be synced
  fsync(fd);
  close(fd);
}

}  // namespace

std::string output_names_an_input(const std::string& output,
                                  const std::vector<std::string>& inputs) {
  struct stat out {};
  if (stat(output.c_str(), &out) != 0) return "";  // nothing there (or a dangling link) yet
  for (const std::string& input : inputs) {
    struct stat in {};
    if (!input.empty() && stat(input.c_str(), &in) == 0 && in.st_dev == out.st_dev &&
        in.st_ino == out.st_ino)
      return fmt::format("is the input '{}'", input);
  }
  return "";
}

OutputFile::OutputFile(std::string path, const std::vector<std::string>& inputs, Creator creator)
    : path_(std::move(path)) {
  if (path_.empty()) throw InputError("an output file's path is empty");
  const std::string dir = directory_of(path_);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0)
    throw InputError(fmt::format(
        "cannot write '{}': its directory '{}' {}", path_, dir,
        errno == ENOENT ? "does not exist" : "cannot be read: " + explain_errno(errno)));
  if (!S_ISDIR(st.st_mode))
    throw InputError(fmt::format("cannot write '{}': '{}' is not a directory", path_, dir));
  if (lstat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    throw InputError(fmt::format("cannot write '{}': it is {}", path_,
                                 S_ISDIR(st.st_mode) ? "a directory" : "not a regular file"));
  const std::string overlap = output_names_an_input(path_, inputs);
  if (!overlap.empty())
    throw InputError(fmt::format("cannot write '{}': it {} of this command", path_, overlap));
  temporary_ = temporary_name(path_);
  if (creator == Creator::kLibrary) return;
  fd_ = open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd_ < 0)
    throw InputError(fmt::format("cannot write '{}': creating '{}' failed: {}", path_, temporary_,
                                 explain_errno(errno)));
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlink(temporary_.c_str());
}

void OutputFile::fail(const std::string& doing, int error) {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  unlink(temporary_.c_str());
  committed_ = true;  // nothing left to remove
  throw InputError(fmt::format("writing '{}' failed ({}): {}", path_, doing, explain_errno(error)));
}

void OutputFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) throw std::logic_error("OutputFile::write on a file this class did not create");
  const char* at = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, at, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write", n < 0 ? errno : ENOSPC);
    at += n;
    bytes -= static_cast<size_t>(n);
  }
}

void OutputFile::commit() {
  if (committed_) throw std::logic_error("OutputFile::commit twice");
  if (fd_ < 0) {  // made by a library: a regular file, synced through a descriptor of our own
    struct stat st {};
    if (lstat(temporary_.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      fail("the library's file", errno != 0 ? errno : EINVAL);
    fd_ = open(temporary_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd_ < 0) fail("reopen", errno);
  }
  if (fsync(fd_) != 0) fail("fsync", errno);
  const int closed = close(fd_);
  fd_ = -1;
  if (closed != 0) fail("close", errno);
  if (rename(temporary_.c_str(), path_.c_str()) != 0) fail("rename", errno);
  committed_ = true;
  sync_directory(directory_of(path_));
}

void write_text_file(const std::string& path, std::string_view text,
                     const std::vector<std::string>& inputs) {
  OutputFile out(path, inputs);
  out.write(text);
  out.commit();
}

}  // namespace trident
