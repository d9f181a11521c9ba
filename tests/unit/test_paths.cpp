// Paths, the run lock and host memory: names inside their directory, segments, locks, cgroups.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/paths.hpp"
#include "core/run_lock.hpp"
#include "train/run_directory.hpp"

using namespace trident;

namespace {
std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("trident_test_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}
}  // namespace

TEST(Paths, NamesAreOnePathComponent) {
  EXPECT_EQ(path_component_problem("small"), "");
  EXPECT_EQ(path_component_problem("run-1.a_b"), "");
  for (const std::string bad : {"", ".", "..", "a/b", "/abs", "../x"})
    EXPECT_NE(path_component_problem(bad), "") << "'" << bad << "'";
  EXPECT_EQ(path_component_problem(std::string(kMaxNameBytes, 'x')), "");
  EXPECT_NE(path_component_problem(std::string(kMaxNameBytes + 1, 'x')), "");
}

TEST(Paths, TimingsSegmentNumbers) {
  EXPECT_EQ(timings_segment("timings.h5"), 1);
  EXPECT_EQ(timings_segment("timings.2.h5"), 2);
  EXPECT_EQ(timings_segment("timings.17.h5"), 17);
  // A stray name with more digits than a segment has is not one (it overflowed stoi).
  EXPECT_EQ(timings_segment("timings.99999999999.h5"), 0);
  for (const char* other : {"timings.h5.tmp", "timings.x.h5", "old_timings.h5", "timings.h",
                            "timings.before_step_5.h5", "run.lock"})
    EXPECT_EQ(timings_segment(other), 0) << other;
}

TEST(Paths, DirectoryErrorsNameTheCause) {
  const auto dir = fresh_dir("paths");
  std::ofstream(dir / "file") << "x";
  try {
    make_directories(dir / "file" / "sub", "the run directory");
    FAIL() << "created a directory below a file";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a component of the path is a file"), std::string::npos)
        << e.what();
  }
  try {
    make_directories(dir / "file", "the run directory");
    FAIL() << "a file taken for a directory";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("it is a file, not a directory"), std::string::npos);
  }
  EXPECT_EQ(not_a_file((dir / "file").string()), "");
  EXPECT_EQ(not_a_file(dir.string()), "is a directory, not a file");
  EXPECT_EQ(not_a_file((dir / "none").string()), "does not exist");
  std::filesystem::remove_all(dir);
}

TEST(RunLock, HeldUntilReleasedAndStaleLocksAreTakenOver) {
  const auto dir = fresh_dir("lock");
  const std::string path = (dir / "run.lock").string();
  std::vector<std::string> notes;
  const auto note = [&](const std::string& line) { notes.push_back(line); };
  {
    const RunLock held(path, "run directory x", note);
    std::ifstream record(path);
    std::string text((std::istreambuf_iterator<char>(record)), {});
    EXPECT_NE(text.find("pid=" + std::to_string(getpid())), std::string::npos) << text;
    // This process is alive: a second taker is refused, naming it.
    try {
      const RunLock second(path, "run directory x", note);
      FAIL() << "a held lock was taken twice";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("run directory x is in use by another run (pid " +
                                           std::to_string(getpid())),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(path)) << "released locks are removed";
  EXPECT_TRUE(notes.empty());
  // A holder on this host whose process is gone.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ofstream(path) << "host=" << host << " pid=999999999 started=x\n";
  { const RunLock taken(path, "run directory x", note); }
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("its process is gone"), std::string::npos) << notes[0];
  std::filesystem::remove_all(dir);
}

// The cgroup memory limit the memory check honours: v2's memory.max and v1's
// memory.limit_in_bytes, the tightest over the process's cgroup and its parents; "max" and v1's
// 2^63 are no limit.
TEST(HostMemory, CgroupLimitIsTheTightestOverTheCgroupAndItsParents) {
  const auto root = fresh_dir("cgroup");
  const auto write = [&](const std::filesystem::path& file, const std::string& text) {
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text << "\n";
  };
  std::string file;
  EXPECT_EQ(cgroup_memory_limit("0::/job/step\n", root.string(), file), 0.0);
  write(root / "job/step/memory.max", "max");
  write(root / "job/memory.max", "4294967296");
  EXPECT_EQ(cgroup_memory_limit("0::/job/step\n", root.string(), file), 4294967296.0);
  EXPECT_EQ(file, (root / "job/memory.max").string());
  write(root / "job/step/memory.max", "1073741824");
  EXPECT_EQ(cgroup_memory_limit("0::/job/step\n", root.string(), file), 1073741824.0);
  EXPECT_EQ(file, (root / "job/step/memory.max").string());

  const std::string v1 = "12:pids:/\n4:memory:/slurm/uid_0/job_7\n1:cpu,cpuacct:/\n0::/\n";
  write(root / "memory/memory.limit_in_bytes", "9223372036854771712");
  write(root / "memory/slurm/uid_0/job_7/memory.limit_in_bytes", "9223372036854771712");
  EXPECT_EQ(cgroup_memory_limit(v1, (root / "none").string(), file), 0.0);
  std::filesystem::remove_all(root / "job");
  EXPECT_EQ(cgroup_memory_limit(v1, root.string(), file), 0.0);
  write(root / "memory/slurm/memory.limit_in_bytes", "2147483648");
  EXPECT_EQ(cgroup_memory_limit(v1, root.string(), file), 2147483648.0);
  EXPECT_EQ(file, (root / "memory/slurm/memory.limit_in_bytes").string());
  std::filesystem::remove_all(root);
}
