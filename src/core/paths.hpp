// Directories a command writes into, created with an error that names the real cause.
#pragma once

#include <filesystem>
#include <string>

namespace trident {

// Creates `dir` and its parents. Throws InputError "cannot create <what> '<dir>': <cause>" when it
// cannot: a path component that is a file, no permission, a read-only or full file system, a
// name too long.
void make_directories(const std::filesystem::path& dir, const std::string& what);

// The longest run.name or prepare --name: files named after it (NVMe offload files, token files)
// add suffixes, and a file name may have 255 bytes.
constexpr size_t kMaxNameBytes = 200;

// Why `name` cannot be one path component (empty, ".", "..", a '/', longer than kMaxNameBytes), or
// "" when it can: names of runs and corpora must not lead outside the directory they live in.
std::string path_component_problem(const std::string& name);

// Why `path` cannot be read as a file ("does not exist", "is a directory, not a file", ...), or
// "" when it is a regular file.
std::string not_a_file(const std::string& path);

// The system's message for `error` (an errno value), with what to do about it when that is clear.
std::string explain_errno(int error);

}  // namespace trident
