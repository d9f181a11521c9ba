// The run directory: creation, lock, earlier-run check and timings segment names.
#include "train/run_directory.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <regex>

#include "core/error.hpp"
#include "core/output_file.hpp"
#include "core/paths.hpp"
#include "io/checkpoint.hpp"

namespace trident {

int timings_segment(const std::string& file_name) {
  // Up to six digits: a stray timings.<many digits>.h5 is not a segment trident wrote (and would
  // not fit an int).
  static const std::regex pattern(R"(timings(\.([0-9]{1,6}))?\.h5)");
  std::smatch m;
  if (!std::regex_match(file_name, m, pattern)) return 0;
  return m[2].matched ? std::stoi(m[2].str()) : 1;
}

RunDirectory::RunDirectory(const Config& config, const HostCollectives& world,
                           const Console& console)
    : path_(std::filesystem::path(config.run.out_dir) / config.run.name),
      world_(world),
      console_(console) {
  world_.agree([&] {
    if (world_.rank() != 0) return;
    std::error_code ec;
    for (auto dir = path_; !dir.empty() && !std::filesystem::exists(dir, ec);
         dir = dir.parent_path())
      created_.push_back(dir);
    make_directories(path_, "the run directory");
    lock_ = std::make_unique<RunLock>((path_ / "run.lock").string(),
                                      fmt::format("run directory {}", path_.string()),
                                      [&](const std::string& why) { console_.line(why); });
    std::filesystem::remove(path_ / "stopped", ec);  // an earlier start's stop: not this one's
    struct stat st {};
    if (stat(path_.c_str(), &st) == 0) {
      device_ = st.st_dev;
      inode_ = st.st_ino;
    }
  });
}

void RunDirectory::require_still_there() const {
  world_.agree([&] {
    if (world_.rank() != 0) return;
    struct stat st {};
    if (stat(path_.c_str(), &st) != 0 || st.st_dev != device_ || st.st_ino != inode_)
      throw InputError(fmt::format(
          "the run directory {} was removed or replaced during the run: its timings and "
          "checkpoints are gone",
          path_.string()));
  });
}

void RunDirectory::record_stop(const std::string& line) const {
  if (world_.rank() != 0) return;
  try {
    write_text_file((path_ / "stopped").string(), line + "\n");
  } catch (const InputError&) {
    // The exit status 4 still says it; a launcher that loses it reports 1.
  }
}

RunDirectory::~RunDirectory() {
  lock_.reset();
  for (const auto& dir : created_) rmdir(dir.c_str());  // fails, as it should, unless empty
}

std::vector<std::filesystem::path> RunDirectory::earlier_outputs() const {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path_, ec))
    if (timings_segment(entry.path().filename().string()) > 0) out.push_back(entry.path());
  for (const auto& entry : std::filesystem::directory_iterator(path_ / "checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) == 0) out.push_back(entry.path());
  }
  return out;
}

void RunDirectory::require_fresh(bool overwrite) const {
  world_.agree([&] {
    if (world_.rank() != 0) return;
    const std::vector<std::filesystem::path> earlier = earlier_outputs();
    if (earlier.empty()) return;
    if (!overwrite)
      throw InputError(fmt::format(
          "run directory {} holds an earlier run ({} files: timings, checkpoints); continue it "
          "with --resume auto, choose another run.name, or pass --overwrite to delete its "
          "timings and checkpoints and start afresh",
          path_.string(), earlier.size()));
    for (const auto& file : earlier) {
      std::error_code ec;
      std::filesystem::remove(file, ec);
      if (ec)
        throw InputError(fmt::format("--overwrite: cannot delete '{}': {}", file.string(),
                                     explain_errno(ec.value())));
    }
    console_.line(fmt::format("--overwrite: deleted the earlier run's {} files in {}",
                              earlier.size(), path_.string()));
  });
}

void RunDirectory::require_nothing_after(int64_t step, const std::string& resume) const {
  world_.agree([&] {
    if (world_.rank() != 0) return;
    std::string later;
    for (const std::string& path : complete_checkpoints((path_ / "checkpoints").string()))
      if (checkpoint_step(path) > step)
        later += (later.empty() ? "" : ", ") + std::filesystem::path(path).filename().string();
    if (!later.empty())
      throw InputError(fmt::format(
          "resuming from '{}' (step {}) into {}, which holds later checkpoints ({}) of the run "
          "being rewound: the new run's checkpoints would mix with them and --resume auto would "
          "continue theirs; move them away, or resume into another run.name",
          resume, step, path_.string(), later));
  });
}

void RunDirectory::lock_offload_files(const std::string& prefix) {
  world_.agree([&] {
    const int rank = world_.rank();
    offload_lock_ = std::make_unique<RunLock>(
        prefix + ".lock", fmt::format("the NVMe offload prefix {}", prefix),
        [rank](const std::string& why) {
          std::fprintf(stderr, "rank %d: %s\n", rank, why.c_str());
        });
  });
}

void RunDirectory::remove_dead_offload_files(const std::string& nvme_dir, const std::string& name,
                                             int ranks) {
  world_.agree([&] {
    if (world_.rank() != 0) return;
    const std::string stem = name + ".rank";
    std::map<int, std::vector<std::filesystem::path>> files;  // by rank
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(nvme_dir, ec)) {
      // <name>.rank<digits>.<anything>
      const std::string file = entry.path().filename().string();
      if (file.compare(0, stem.size(), stem) != 0) continue;
      const size_t dot = file.find('.', stem.size());
      const std::string digits = file.substr(stem.size(), dot - stem.size());
      if (dot == std::string::npos || digits.empty() || digits.size() > 8 ||
          digits.find_first_not_of("0123456789") != std::string::npos)
        continue;
      if (const int rank = std::stoi(digits); rank >= ranks) files[rank].push_back(entry.path());
    }
    for (const auto& [rank, paths] : files) {
      const std::string prefix =
          (std::filesystem::path(nvme_dir) / fmt::format("{}.rank{}", name, rank)).string();
      try {
        // Taking the lock proves its holder gone (or takes over a stale one); a live holder
        // throws. Released, and removed, at the end of this scope.
        const RunLock lock(prefix + ".lock", fmt::format("the NVMe offload prefix {}", prefix),
                           [](const std::string&) {});
        double bytes = 0;
        for (const auto& path : paths) {
          if (path.string() == prefix + ".lock") continue;
          bytes += static_cast<double>(std::filesystem::file_size(path, ec));
          std::filesystem::remove(path, ec);
        }
        console_.line(fmt::format(
            "removed {:.1f} MiB of NVMe offload files {}.* of rank {}, left by an earlier run on "
            "more ranks",
            bytes / 1048576.0, prefix, rank));
      } catch (const InputError& e) {
        console_.line(fmt::format("kept the NVMe offload files {}.*: {}", prefix, e.what()));
      }
    }
  });
}

std::filesystem::path RunDirectory::next_timings_segment(int& segment) const {
  segment = 1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path_, ec))
    segment = std::max(segment, timings_segment(entry.path().filename().string()) + 1);
  return path_ / (segment == 1 ? std::string("timings.h5") : fmt::format("timings.{}.h5", segment));
}

}  // namespace trident
