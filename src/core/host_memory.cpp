// Host memory bounds: /proc, the cgroup file systems and getrlimit.
#include "core/host_memory.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace trident {
namespace {

constexpr double kGiB = 1073741824.0;

// A limit file's value in bytes; 0 for "max", a missing file or v1's "no limit" (2^63 rounded
// down to a page).
double read_limit(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(value > 0) || value >= 0x1p62) return 0;
  return value;
}

}  // namespace

double cgroup_memory_limit(const std::string& proc_self_cgroup, const std::string& cgroup_root,
                           std::string& file) {
  double tightest = 0;
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy:controllers:path"; v2 has hierarchy 0 and no controllers.
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    std::filesystem::path base;
    const char* name = nullptr;
    if (controllers.empty()) {
      base = cgroup_root;
      name = "memory.max";
    } else {
      std::istringstream list(controllers);
      std::string c;
      bool memory = false;
      while (std::getline(list, c, ',')) memory = memory || c == "memory";
      if (!memory) continue;
      base = std::filesystem::path(cgroup_root) / controllers;
      name = "memory.limit_in_bytes";
    }
    // The cgroup itself and each parent: a parent's limit binds its children too.
    for (std::filesystem::path p = std::filesystem::path(path).relative_path();;
         p = p.parent_path()) {
      const std::filesystem::path candidate = base / p / name;
      const double limit = read_limit(candidate);
      if (limit > 0 && (tightest == 0 || limit < tightest)) {
        tightest = limit;
        file = candidate.lexically_normal().string();
      }
      if (p.empty()) break;
    }
  }
  return tightest;
}

std::vector<HostMemoryBound> host_memory_bounds() {
  std::vector<HostMemoryBound> bounds;
  const double page = static_cast<double>(sysconf(_SC_PAGE_SIZE));
  const double physical = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * page;
  bounds.push_back({physical, fmt::format("the node's {:.1f} GiB", physical / kGiB), true});
  std::ifstream in("/proc/self/cgroup");
  const std::string cgroups((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string file;
  if (const double limit = cgroup_memory_limit(cgroups, "/sys/fs/cgroup", file);
      limit > 0 && limit < physical)
    bounds.push_back({limit,
                      fmt::format("the cgroup memory limit of {:.1f} GiB ({})", limit / kGiB, file),
                      true});
  struct rlimit as {};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    std::ifstream statm("/proc/self/statm");
    double mapped_pages = 0;
    statm >> mapped_pages;
    const double limit = static_cast<double>(as.rlim_cur);
    const double left = std::max(0.0, limit - mapped_pages * page);
    bounds.push_back({left,
                      fmt::format("the {:.1f} GiB of address space that ulimit -v = {:.1f} GiB "
                                  "leaves this process",
                                  left / kGiB, limit / kGiB),
                      false});
  }
  return bounds;
}

}  // namespace trident
