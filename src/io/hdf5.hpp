// Small RAII and attribute helpers over the HDF5 C API, with every call checked.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

// Aborts the job (see fatal()) when an HDF5 call returned a negative status, with the cause the
// HDF5 error stack records from the system (a full disk, a quota, a read-only path) and a hint
// for it.
void check_hdf5(long long rc, const char* call, const char* file, int line);
// The system error behind the current HDF5 error stack ("No space left on device"), or "".
std::string hdf5_system_error();

}  // namespace trident

#define TRIDENT_H5(call) \
  ::trident::check_hdf5(static_cast<long long>(call), #call, __FILE__, __LINE__)

namespace trident::h5 {

// Owns an HDF5 identifier and closes it with the matching H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  operator hid_t() const { return id_; }
  void reset() { close(); }
  // Closes now and returns HDF5's status: closing a dataset writes its cached chunks, so a write
  // can fail here (a full disk) after every H5Dwrite succeeded.
  herr_t close() {
    const herr_t status = id_ >= 0 && close_ ? close_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return status;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// Creates `path` exclusively after removing what is there (a link itself, never its target).
Handle create_file(const std::string& path);
// Opens read-only; returns an invalid handle (no error stack printed) when it cannot.
Handle open_file_quiet(const std::string& path);
Handle create_group(hid_t parent, const std::string& name);

void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr(hid_t obj, const std::string& name, double value);
// Readers throw InputError (the file is user input) when the attribute is missing or mistyped.
std::string read_attr_string(hid_t obj, const std::string& name, const std::string& file);
// Whether `obj` has an attribute `name` (files of older versions lack some).
bool has_attr(hid_t obj, const std::string& name);
int64_t read_attr_int(hid_t obj, const std::string& name, const std::string& file);
double read_attr_double(hid_t obj, const std::string& name, const std::string& file);

// Dataset `name` under parent ("group/tensor" allowed), opened after checking that every link on
// the way is a hard link (a soft or external link could pull data from elsewhere, even another
// file), that it holds float32 elements, and that its shape equals `shape`, before anything of
// its size is allocated: InputError naming the dataset otherwise.
Handle open_tensor(hid_t parent, const std::string& name, const std::vector<int64_t>& shape,
                   const std::string& file);
// Reads a dataset that open_tensor accepts.
void read_floats(hid_t parent, const std::string& name, const std::vector<int64_t>& shape,
                 float* data, const std::string& file);

// While alive, names the file this thread is writing: a failed HDF5 call whose error stack names
// no system error (MPI-IO reports "MPI_ERR_OTHER") then finds the cause by a test write into the
// file's directory, and a partly written file marked `remove_on_failure` (a checkpoint's .tmp)
// is removed before the job ends.
class WritingFile {
 public:
  explicit WritingFile(const std::string& path, bool remove_on_failure = false);
  ~WritingFile();
  WritingFile(const WritingFile&) = delete;
  WritingFile& operator=(const WritingFile&) = delete;

  std::string path;
  bool remove_on_failure;

 private:
  const WritingFile* outer_;
};

// Silences HDF5's automatic error-stack printing for the lifetime of the object.
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace trident::h5
