// `trident doctor RUN_DIR`: the ranks' flight records merged, and the rank the others wait for.
#pragma once

#include <string>
#include <vector>

namespace trident {

// A rank that others wait for in an operation it never issued, and is itself waiting in none:
// the rank that hangs (or died, or lags far behind).
struct HangingRank {
  int rank = -1;
  std::string host, axis, op;  // the operation the others waited for longest
  int step = 0;
  std::string phase;  // where the rank was when it wrote its record
};

// Reads <run_dir>/flight/rank_*.jsonl (or run_dir itself when it holds them), prints per
// communicator the first operation not every member completed (who waits, who never issued it)
// and then the ranks that hang, and returns those. InputError when a record cannot be read.
std::vector<HangingRank> flight_report(const std::string& run_dir);

}  // namespace trident
