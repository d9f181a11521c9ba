// One way to create an output file: a temporary made exclusively beside the target, written and
// checked, synced, then renamed over it; links never followed, inputs never overwritten.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace trident {

// Every file trident writes goes through here (checkpoints, exports, imports, token files, tables,
// run-directory markers), so that:
//  - the temporary is a fresh name in the target's directory, created with O_CREAT | O_EXCL |
//    O_NOFOLLOW: a link or file planted there makes the command fail, never writes through it;
//  - the target is replaced by rename(), which replaces a link at that name instead of following
//    it, and only after every byte was written and synced: a failed command leaves what was
//    there as it was, and no half-written file;
//  - a target that is (same device and inode) one of the command's `inputs` is refused before
//    anything is written;
//  - every error is an InputError naming the file and the cause (a full disk, no permission).
class OutputFile {
 public:
  // Who creates the temporary: this class (write() fills it), or a library given its name (HDF5,
  // with H5F_ACC_EXCL so that it too refuses an existing name).
  enum class Creator { kThis, kLibrary };

  explicit OutputFile(std::string path, const std::vector<std::string>& inputs = {},
                      Creator creator = Creator::kThis);
  ~OutputFile();  // an uncommitted temporary is removed
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& temporary() const { return temporary_; }

  // All `bytes` or an InputError (kThis only).
  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }

  // Syncs the temporary, renames it over path() and syncs the directory.
  void commit();

 private:
  void fail(const std::string& doing, int error);

  std::string path_, temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

// Why `output` may not be written by a command that reads `inputs` ("is the input '<x>'"), or ""
// when it may: the same file by device and inode, through any link or other name.
std::string output_names_an_input(const std::string& output,
                                  const std::vector<std::string>& inputs);

// Writes `text` to `path` through an OutputFile.
void write_text_file(const std::string& path, std::string_view text,
                     const std::vector<std::string>& inputs = {});

}  // namespace trident
