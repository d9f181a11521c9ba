// Errors: bad user input (exit status 2, nothing written) and checked MPI/HDF5 calls that abort.
#pragma once

#include <stdexcept>
#include <string>

namespace trident {

// Thrown for anything the user can fix: config keys, layouts, files. main() prints the
// message and exits with status 2 before any output is written.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

// Prints "rank R: CALL failed at FILE:LINE: detail (hint)" and aborts the whole MPI job so that
// no rank is left waiting in a collective.
[[noreturn]] void fatal(const char* call, const char* file, int line, const std::string& detail,
                        const std::string& hint = "");

void check_mpi(int rc, const char* call, const char* file, int line);

}  // namespace trident

#define TRIDENT_MPI(call) ::trident::check_mpi((call), #call, __FILE__, __LINE__)
