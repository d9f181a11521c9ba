// HDF5 helper implementations.
#include "io/hdf5.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <vector>

#include "core/error.hpp"

namespace trident {
namespace {

// Collects the "error message = '...'" a low-level (file driver) error records: the system's.
herr_t find_system_error(unsigned, const H5E_error2_t* err, void* out) {
  const std::string desc = err->desc ? err->desc : "";
  const std::string key = "error message = '";
  const size_t at = desc.find(key);
  auto& found = *static_cast<std::string*>(out);
  if (found.empty() && at != std::string::npos) {
    const size_t begin = at + key.size(), end = desc.find('\'', begin);
    found = desc.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  }
  return 0;
}

thread_local const h5::WritingFile* writing = nullptr;

// Why a write into `dir` fails, by trying one: "" when a test write of 1 MiB succeeds.
std::string test_write_error(const std::filesystem::path& dir) {
  const std::string probe = (dir / fmt::format(".trident_write_test.{}", getpid())).string();
  // Exclusive and never through a link: the probe's name is predictable.
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  const std::vector<char> block(1 << 20, 0);
  int error = 0;
  if (write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size()) || fsync(fd) != 0)
    error = errno ? errno : ENOSPC;  // a short write: the device filled up
  close(fd);
  unlink(probe.c_str());
  return error ? std::strerror(error) : "";
}

std::string hint_for(const std::string& cause) {
  if (cause.find("No space left") != std::string::npos)
    return "the file system is full: free space, or point run.out_dir (or the path given) at "
           "another one";
  if (cause.find("quota") != std::string::npos)
    return "your disk quota is used up: free space or write elsewhere";
  if (cause.find("Read-only") != std::string::npos ||
      cause.find("Permission denied") != std::string::npos)
    return "the path is not writable by this user";
  if (cause.empty())
    return "check the path is writable and the file is not open in another program";
  return "";
}

}  // namespace

std::string hdf5_system_error() {
  std::string found;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, find_system_error, &found);
  return found;
}

void check_hdf5(long long rc, const char* call, const char* file, int line) {
  if (rc >= 0) return;
  std::string cause = hdf5_system_error();
  std::string subject = "the file";
  if (writing) {
    subject = writing->path;
    const std::filesystem::path dir = std::filesystem::path(writing->path).parent_path();
    if (cause.empty()) cause = test_write_error(dir.empty() ? "." : dir);
    if (writing->remove_on_failure) unlink(writing->path.c_str());
  }
  fatal(call, file, line,
        cause.empty() ? "HDF5 returned an error (see the HDF5 error stack above)"
                      : fmt::format("HDF5 could not write or read {}: {}", subject, cause),
        hint_for(cause));
}

}  // namespace trident

namespace trident::h5 {

WritingFile::WritingFile(const std::string& file, bool remove)
    : path(file), remove_on_failure(remove), outer_(writing) {
  writing = this;
}
WritingFile::~WritingFile() {
  writing = outer_;
}

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}
QuietErrors::~QuietErrors() {
  H5Eset_auto2(H5E_DEFAULT, func_, data_);
}

Handle create_file(const std::string& path) {
  // Never through a link: what is at the name goes (a link itself, not what it points to), and
  // the file is created exclusively, so that one planted since fails instead of being followed.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      throw InputError(fmt::format("cannot write '{}': it is a directory", path));
    unlink(path.c_str());
  }
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) {
    const std::string cause = hdf5_system_error();
    fatal("H5Fcreate", __FILE__, __LINE__,
          "cannot create " + path + (cause.empty() ? "" : ": " + cause),
          cause.empty() ? "check that the directory exists and is writable" : hint_for(cause));
  }
  return Handle(id, H5Fclose);
}

Handle open_file_quiet(const std::string& path) {
  QuietErrors quiet;
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  return Handle(id, H5Fclose);
}

Handle create_group(hid_t parent, const std::string& name) {
  const hid_t id = H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  TRIDENT_H5(id);
  return Handle(id, H5Gclose);
}

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  // Variable-length UTF-8, which h5py reads back as str (fixed-length comes back as bytes).
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  TRIDENT_H5(H5Tset_size(type, H5T_VARIABLE));
  TRIDENT_H5(H5Tset_cset(type, H5T_CSET_UTF8));
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attr(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  TRIDENT_H5(static_cast<hid_t>(attr));
  const char* data = value.c_str();
  TRIDENT_H5(H5Awrite(attr, type, &data));
}

template <typename T>
static void write_scalar_attr(hid_t obj, const std::string& name, hid_t type, T value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attr(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  TRIDENT_H5(static_cast<hid_t>(attr));
  TRIDENT_H5(H5Awrite(attr, type, &value));
}

void write_attr(hid_t obj, const std::string& name, int64_t value) {
  write_scalar_attr(obj, name, H5T_NATIVE_INT64, value);
}
void write_attr(hid_t obj, const std::string& name, double value) {
  write_scalar_attr(obj, name, H5T_NATIVE_DOUBLE, value);
}

namespace {

// The largest string attribute read (a checkpoint's config is a few KiB): a crafted file's
// fixed-length string type may claim gigabytes.
constexpr size_t kMaxStringAttribute = size_t{16} << 20;

// Attribute `name` of obj, opened after checking that it holds exactly one element (a scalar, or
// an array of one) of a class in `classes`: a crafted file may store an array where trident
// writes a scalar, and reading it into room for one value would overrun that room.
Handle scalar_attribute(hid_t obj, const std::string& name, const std::string& file,
                        std::initializer_list<H5T_class_t> classes, const char* what) {
  Handle attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (attr < 0) throw InputError(fmt::format("'{}': attribute '{}' is missing", file, name));
  Handle space(H5Aget_space(attr), H5Sclose);
  const H5S_class_t shape = space < 0 ? H5S_NO_CLASS : H5Sget_simple_extent_type(space);
  const hssize_t elements = shape == H5S_NO_CLASS ? -1 : H5Sget_simple_extent_npoints(space);
  if ((shape != H5S_SCALAR && shape != H5S_SIMPLE) || elements != 1)
    throw InputError(fmt::format("'{}': attribute '{}' should hold one value ({}) but holds {}",
                                 file, name, what,
                                 elements < 0 ? "none readable" : std::to_string(elements)));
  Handle type(H5Aget_type(attr), H5Tclose);
  const H5T_class_t found = type < 0 ? H5T_NO_CLASS : H5Tget_class(type);
  if (std::find(classes.begin(), classes.end(), found) == classes.end())
    throw InputError(fmt::format("'{}': attribute '{}' is not {}", file, name, what));
  return attr;
}

}  // namespace

std::string read_attr_string(hid_t obj, const std::string& name, const std::string& file) {
  QuietErrors quiet;
  const Handle attr = scalar_attribute(obj, name, file, {H5T_STRING}, "a string");
  Handle type(H5Aget_type(attr), H5Tclose);
  if (H5Tis_variable_str(type) > 0) {
    char* data = nullptr;  // one element: checked above
    if (H5Aread(attr, type, &data) < 0 || data == nullptr)
      throw InputError(fmt::format("'{}': attribute '{}' cannot be read", file, name));
    const size_t length = strnlen(data, kMaxStringAttribute + 1);
    std::string value(data, std::min(length, kMaxStringAttribute));
    H5free_memory(data);
    if (length > kMaxStringAttribute)
      throw InputError(fmt::format("'{}': attribute '{}' is longer than {} MiB", file, name,
                                   kMaxStringAttribute >> 20));
    return value;
  }
  const size_t size = H5Tget_size(type);
  if (size == 0 || size > kMaxStringAttribute)
    throw InputError(fmt::format("'{}': attribute '{}' is a string of {} bytes (at most {} MiB)",
                                 file, name, size, kMaxStringAttribute >> 20));
  std::string value(size, '\0');
  if (H5Aread(attr, type, value.data()) < 0)
    throw InputError(fmt::format("'{}': attribute '{}' cannot be read", file, name));
  while (!value.empty() && value.back() == '\0') value.pop_back();
  return value;
}

bool has_attr(hid_t obj, const std::string& name) {
  QuietErrors quiet;
  return H5Aexists(obj, name.c_str()) > 0;
}

int64_t read_attr_int(hid_t obj, const std::string& name, const std::string& file) {
  QuietErrors quiet;
  const Handle attr = scalar_attribute(obj, name, file, {H5T_INTEGER}, "an integer");
  int64_t value = 0;
  if (H5Aread(attr, H5T_NATIVE_INT64, &value) < 0)
    throw InputError(fmt::format("'{}': attribute '{}' is not a 64-bit integer", file, name));
  return value;
}

double read_attr_double(hid_t obj, const std::string& name, const std::string& file) {
  QuietErrors quiet;
  const Handle attr = scalar_attribute(obj, name, file, {H5T_FLOAT, H5T_INTEGER}, "a number");
  double value = 0;
  if (H5Aread(attr, H5T_NATIVE_DOUBLE, &value) < 0)
    throw InputError(fmt::format("'{}': attribute '{}' is not a number", file, name));
  return value;
}

Handle open_tensor(hid_t parent, const std::string& name, const std::vector<int64_t>& shape,
                   const std::string& file) {
  QuietErrors quiet;
  for (size_t end = name.find('/');; end = name.find('/', end + 1)) {
    const std::string prefix = name.substr(0, end);
    if (H5Lexists(parent, prefix.c_str(), H5P_DEFAULT) <= 0)
      throw InputError(fmt::format("'{}': dataset '{}' is missing", file, name));
    H5L_info_t link{};
    if (H5Lget_info(parent, prefix.c_str(), &link, H5P_DEFAULT) < 0 || link.type != H5L_TYPE_HARD)
      throw InputError(fmt::format(
          "'{}': '{}' (of dataset '{}') is {} link, not an object of "
          "this file",
          file, prefix, name, link.type == H5L_TYPE_EXTERNAL ? "an external" : "a soft"));
    if (end == std::string::npos) break;
  }
  Handle dset(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (dset < 0) throw InputError(fmt::format("'{}': '{}' is not a dataset", file, name));
  Handle type(H5Dget_type(dset), H5Tclose);
  if (type < 0 || H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != sizeof(float))
    throw InputError(fmt::format("'{}': dataset '{}' does not hold float32 values", file, name));
  Handle space(H5Dget_space(dset), H5Sclose);
  const int rank = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  if (rank < 0 || dims.size() != shape.size() ||
      !std::equal(dims.begin(), dims.end(), shape.begin(),
                  [](hsize_t a, int64_t b) { return static_cast<int64_t>(a) == b; }))
    throw InputError(
        fmt::format("'{}': dataset '{}' has a different shape than this model "
                    "expects (a checkpoint of a different model?)",
                    file, name));
  return dset;
}

void read_floats(hid_t parent, const std::string& name, const std::vector<int64_t>& shape,
                 float* data, const std::string& file) {
  const Handle dset = open_tensor(parent, name, shape, file);
  QuietErrors quiet;
  if (H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw InputError(
        fmt::format("'{}': dataset '{}' cannot be read (truncated or corrupt)", file, name));
}

}  // namespace trident::h5
