// Implementation of the checked-call helpers: report with rank and location, then MPI_Abort.
#include "core/error.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace trident {

void fatal(const char* call, const char* file, int line, const std::string& detail,
           const std::string& hint) {
  int initialized = 0, rank = -1;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "trident: rank %d: %s failed at %s:%d: %s%s%s\n", rank, call, file, line,
               detail.c_str(), hint.empty() ? "" : "\n  hint: ", hint.c_str());
  std::fflush(stderr);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void check_mpi(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fatal(call, file, line, std::string(msg, static_cast<size_t>(len)));
}

}  // namespace trident
