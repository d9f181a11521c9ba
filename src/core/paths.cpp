// Directory creation with explained system errors.
#include "core/paths.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/error.hpp"

namespace trident {

std::string explain_errno(int error) {
  const std::string cause = std::strerror(error);
  switch (error) {
    case ENOSPC:
      return cause + " (the file system is full: free space or write elsewhere)";
    case EDQUOT:
      return cause + " (your quota is used up: free space or write elsewhere)";
    case EACCES:
    case EPERM:
      return cause + " (this user may not write there)";
    case EROFS:
      return cause + " (the file system is mounted read-only)";
    case ENOTDIR:
      return cause + " (a component of the path is a file)";
    case ENAMETOOLONG:
      return cause + " (shorten run.name or the path)";
    default:
      return cause;
  }
}

std::string path_component_problem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name == "." || name == "..") return "would name a directory outside its own";
  if (name.find('/') != std::string::npos) return "holds a '/'";
  if (name.size() > kMaxNameBytes)
    return fmt::format("has {} bytes; at most {} are allowed", name.size(), kMaxNameBytes);
  return "";
}

std::string not_a_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::regular) return "";
  if (status.type() == std::filesystem::file_type::not_found) return "does not exist";
  if (status.type() == std::filesystem::file_type::directory) return "is a directory, not a file";
  if (ec) return "cannot be read: " + explain_errno(ec.value());
  return "is not a regular file";
}

void make_directories(const std::filesystem::path& dir, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    throw InputError(
        fmt::format("cannot create {} '{}': it is a file, not a directory", what, dir.string()));
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw InputError(
        fmt::format("cannot create {} '{}': {}", what, dir.string(), explain_errno(ec.value())));
}

}  // namespace trident
