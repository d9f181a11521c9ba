// OutputFile: exclusive temporaries, links replaced and never followed, inputs never overwritten,
// and what was there kept when a write does not complete.
#include "core/output_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.hpp"

using namespace trident;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("trident_output_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void put(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// How many entries `dir` holds.
size_t entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(OutputFile, WritesThroughATemporaryAndLeavesNothingElse) {
  const fs::path dir = fresh_dir("plain"), target = dir / "out.bin";
  put(target, "old");
  {
    OutputFile out(target.string());
    EXPECT_EQ(fs::path(out.temporary()).parent_path(), dir);
    EXPECT_TRUE(fs::is_regular_file(out.temporary()));
    out.write("new ");
    out.write(std::string(100000, 'x'));
    EXPECT_EQ(read(target), "old");  // nothing replaced before commit
    out.commit();
  }
  EXPECT_EQ(read(target), "new " + std::string(100000, 'x'));
  EXPECT_EQ(entries(dir), 1u);
}

// A link at the target is replaced by the file; what it pointed to is untouched.
TEST(OutputFile, ALinkAtTheTargetIsReplacedNotFollowed) {
  const fs::path dir = fresh_dir("link"), victim = dir / "victim.txt", target = dir / "out.json";
  put(victim, "precious");
  fs::create_symlink(victim, target);
  write_text_file(target.string(), "{}\n");
  EXPECT_EQ(read(victim), "precious");
  EXPECT_FALSE(fs::is_symlink(target));
  EXPECT_EQ(read(target), "{}\n");
}

// An output that is an input of the command, by any name, is refused before anything is written.
TEST(OutputFile, AnOutputThatIsAnInputIsRefused) {
  const fs::path dir = fresh_dir("input"), input = dir / "model.safetensors";
  put(input, "weights");
  fs::create_symlink(input, dir / "alias");
  fs::create_hard_link(input, dir / "hard");
  for (const fs::path& out : {input, dir / "alias", dir / "hard"}) {
    const std::string why = refusal([&] { OutputFile file(out.string(), {input.string()}); });
    EXPECT_NE(why.find("is the input '" + input.string() + "'"), std::string::npos)
        << out << ": " << why;
  }
  EXPECT_EQ(read(input), "weights");
  EXPECT_EQ(entries(dir), 3u);
  EXPECT_EQ(output_names_an_input((dir / "other").string(), {input.string()}), "");
}

TEST(OutputFile, ADirectoryThatIsMissingOrATargetThatIsNotAFileIsNamed) {
  const fs::path dir = fresh_dir("missing");
  const std::string missing = (dir / "no" / "out.h5").string();
  EXPECT_NE(refusal([&] { OutputFile f(missing); }).find("'" + missing + "'"), std::string::npos);
  fs::create_directory(dir / "sub");
  EXPECT_NE(refusal([&] { OutputFile f((dir / "sub").string()); }).find("a directory"),
            std::string::npos);
  ASSERT_EQ(mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_NE(refusal([&] { OutputFile f((dir / "fifo").string()); }).find("not a regular file"),
            std::string::npos);
  EXPECT_NE(refusal([] { OutputFile f(""); }), "");
}

// A command that fails half-way (the OutputFile destroyed uncommitted) leaves the earlier file.
TEST(OutputFile, AnUncommittedWriteLeavesTheEarlierFile) {
  const fs::path dir = fresh_dir("abandon"), target = dir / "tokens.bin";
  put(target, "earlier");
  {
    OutputFile out(target.string());
    out.write("half of a new one");
  }
  EXPECT_EQ(read(target), "earlier");
  EXPECT_EQ(entries(dir), 1u);
}

// A library's temporary: a fresh name that does not exist; one planted there as a link (or
// anything but a regular file) is refused at commit, and nothing it points to is renamed in.
TEST(OutputFile, ALibrarysTemporaryMustBeAFileItMade) {
  const fs::path dir = fresh_dir("library"), target = dir / "step_000002.h5";
  {
    OutputFile out(target.string(), {}, OutputFile::Creator::kLibrary);
    EXPECT_FALSE(fs::exists(out.temporary()));
    put(out.temporary(), "hdf5 bytes");
    out.commit();
  }
  EXPECT_EQ(read(target), "hdf5 bytes");
  const fs::path victim = dir / "victim";
  put(victim, "precious");
  {
    OutputFile out((dir / "next.h5").string(), {}, OutputFile::Creator::kLibrary);
    fs::create_symlink(victim, out.temporary());
    EXPECT_NE(refusal([&] { out.commit(); }), "");
  }
  EXPECT_EQ(read(victim), "precious");
  EXPECT_FALSE(fs::exists(dir / "next.h5"));
}
