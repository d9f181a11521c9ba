// The host memory a process may use: physical memory, its cgroup's limit and `ulimit -v`.
#pragma once

#include <string>
#include <vector>

namespace trident {

// One bound on this process's host memory and what sets it.
struct HostMemoryBound {
  double bytes = 0;
  std::string what;    // "the node's 23.4 GiB", "the cgroup limit 4.0 GiB (<file>)", ...
  bool shared = true;  // by every rank on the node (memory, a cgroup), or this process's own
};

// The tightest memory limit of the cgroups named by `proc_self_cgroup` (the text of
// /proc/self/cgroup) and their parents under `cgroup_root`: cgroup v2's memory.max, v1's
// memory.limit_in_bytes. 0 when none is set; `file` names the limiting file.
double cgroup_memory_limit(const std::string& proc_self_cgroup, const std::string& cgroup_root,
                           std::string& file);

// The bounds that apply to this process now: the node's physical memory, its cgroup's limit, and
// the address space `ulimit -v` leaves it (the limit less what it has mapped already).
std::vector<HostMemoryBound> host_memory_bounds();

}  // namespace trident
