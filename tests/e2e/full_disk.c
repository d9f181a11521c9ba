/* Test helper (LD_PRELOAD): a file system that fills up. Writes to files opened under
 * $TRIDENT_FULL_DISK_DIR fail with ENOSPC once they have grown those files by
 * $TRIDENT_FULL_DISK_BYTES bytes, as they would on a full disk, where rewriting bytes a file
 * already holds still succeeds (HDF5 rewrites its metadata in place, and only the new chunks it
 * writes when it closes a dataset fail); statvfs of a path under the directory reports the bytes
 * left as free (unless TRIDENT_FULL_DISK_HIDDEN=1); other files are untouched. With
 * TRIDENT_FULL_DISK_READONLY=1 the directory is a read-only file system instead: opening a file
 * there for writing and making a directory there fail with EROFS. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { kMaxFd = 65536 };
static unsigned char watched[kMaxFd];
static long long budget = -1; /* bytes left; -1: not configured */
static const char* dir = NULL;

static void configure(void) {
  if (dir) return;
  dir = getenv("TRIDENT_FULL_DISK_DIR");
  const char* bytes = getenv("TRIDENT_FULL_DISK_BYTES");
  budget = bytes ? atoll(bytes) : -1;
  if (!dir) dir = "";
}

static int under_dir(const char* path) {
  configure();
  return dir[0] && path && strncmp(path, dir, strlen(dir)) == 0;
}

static void watch(int fd, const char* path) {
  if (fd >= 0 && fd < kMaxFd) watched[fd] = under_dir(path);
}

static int read_only(const char* path) {
  const char* flag = getenv("TRIDENT_FULL_DISK_READONLY");
  return flag && strcmp(flag, "1") == 0 && under_dir(path);
}

/* Whether a write of n bytes to fd at offset (-1: the file position) may go ahead; sets errno
 * when not. Only the bytes past the file's end, and those into the holes of a sparse file
 * (storage a file was extended to but never given, as a checkpoint's datasets are before their
 * ranks write them), use the budget. */
static int allowed(int fd, long long offset, size_t n) {
  if (fd < 0 || fd >= kMaxFd || !watched[fd] || budget < 0) return 1;
  if (offset < 0) offset = lseek(fd, 0, SEEK_CUR);
  long long growth = (long long)n;
  struct stat st;
  if (offset >= 0 && fstat(fd, &st) == 0) {
    const long long size = (long long)st.st_size, end = offset + (long long)n;
    const long long from = offset > size ? offset : size;
    growth = end > from ? end - from : 0;
    /* The holes in [offset, min(end, size)), found with SEEK_HOLE and SEEK_DATA; the file
     * position, which write() uses, is put back. */
    const off_t position = lseek(fd, 0, SEEK_CUR);
    const long long limit = end < size ? end : size;
    for (long long at = offset; at < limit;) {
      const off_t hole = lseek(fd, at, SEEK_HOLE);
      if (hole < 0 || hole >= limit) break;
      off_t data = lseek(fd, hole, SEEK_DATA);
      if (data < 0) data = size; /* ENXIO: no data after the hole */
      growth += (data < limit ? data : limit) - hole;
      at = data;
    }
    if (position >= 0) lseek(fd, position, SEEK_SET);
  }
  if (growth > budget) {
    errno = ENOSPC;
    return 0;
  }
  budget -= growth;
  return 1;
}

typedef int (*open_fn)(const char*, int, ...);

/* open and open64 alike: the real call, then the descriptor watched when under the directory. */
#define WATCHED_OPEN(symbol)                                             \
  int symbol(const char* path, int flags, ...) {                         \
    static open_fn real = NULL;                                          \
    if (!real) real = (open_fn)dlsym(RTLD_NEXT, #symbol);                \
    va_list ap;                                                          \
    va_start(ap, flags);                                                 \
    const mode_t mode = (flags & O_CREAT) ? (mode_t)va_arg(ap, int) : 0; \
    va_end(ap);                                                          \
    if ((flags & (O_WRONLY | O_RDWR | O_CREAT)) && read_only(path)) {    \
      errno = EROFS;                                                     \
      return -1;                                                         \
    }                                                                    \
    const int fd = real(path, flags, mode);                              \
    watch(fd, path);                                                     \
    return fd;                                                           \
  }
WATCHED_OPEN(open)
WATCHED_OPEN(open64)

ssize_t write(int fd, const void* buf, size_t n) {
  static ssize_t (*real)(int, const void*, size_t) = NULL;
  if (!real) real = (ssize_t(*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
  return allowed(fd, -1, n) ? real(fd, buf, n) : -1;
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t offset) {
  static ssize_t (*real)(int, const void*, size_t, off_t) = NULL;
  if (!real) real = (ssize_t(*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
  return allowed(fd, offset, n) ? real(fd, buf, n, offset) : -1;
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t offset) {
  static ssize_t (*real)(int, const void*, size_t, off_t) = NULL;
  if (!real) real = (ssize_t(*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
  return allowed(fd, offset, n) ? real(fd, buf, n, offset) : -1;
}

int mkdir(const char* path, mode_t mode) {
  static int (*real)(const char*, mode_t) = NULL;
  if (!real) real = (int (*)(const char*, mode_t))dlsym(RTLD_NEXT, "mkdir");
  if (read_only(path)) {
    errno = EROFS;
    return -1;
  }
  return real(path, mode);
}

/* posix_fallocate reserves blocks without a write: the bytes past the end use the budget. It
 * returns the error rather than setting errno. */
#define BUDGET_FALLOCATE(symbol)                                              \
  int symbol(int fd, off_t offset, off_t len) {                               \
    static int (*real)(int, off_t, off_t) = NULL;                             \
    if (!real) real = (int (*)(int, off_t, off_t))dlsym(RTLD_NEXT, #symbol);  \
    return allowed(fd, offset, (size_t)len) ? real(fd, offset, len) : ENOSPC; \
  }
BUDGET_FALLOCATE(posix_fallocate)
BUDGET_FALLOCATE(posix_fallocate64)

static size_t total(const struct iovec* iov, int count) {
  size_t n = 0;
  for (int i = 0; i < count; ++i) n += iov[i].iov_len;
  return n;
}

ssize_t writev(int fd, const struct iovec* iov, int count) {
  static ssize_t (*real)(int, const struct iovec*, int) = NULL;
  if (!real) real = (ssize_t(*)(int, const struct iovec*, int))dlsym(RTLD_NEXT, "writev");
  return allowed(fd, -1, total(iov, count)) ? real(fd, iov, count) : -1;
}

ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t offset) {
  static ssize_t (*real)(int, const struct iovec*, int, off_t) = NULL;
  if (!real) real = (ssize_t(*)(int, const struct iovec*, int, off_t))dlsym(RTLD_NEXT, "pwritev");
  return allowed(fd, offset, total(iov, count)) ? real(fd, iov, count, offset) : -1;
}

ssize_t pwritev64(int fd, const struct iovec* iov, int count, off_t offset) {
  static ssize_t (*real)(int, const struct iovec*, int, off_t) = NULL;
  if (!real) real = (ssize_t(*)(int, const struct iovec*, int, off_t))dlsym(RTLD_NEXT, "pwritev64");
  return allowed(fd, offset, total(iov, count)) ? real(fd, iov, count, offset) : -1;
}

/* Whether statvfs of path reports the budget as its free space; not with
 * TRIDENT_FULL_DISK_HIDDEN=1: a quota or a file system that over-commits, which statvfs does not
 * show, so only the write itself fails. */
static int reports_budget(const char* path) {
  configure();
  const char* hidden = getenv("TRIDENT_FULL_DISK_HIDDEN");
  return dir[0] && budget >= 0 && strncmp(path, dir, strlen(dir)) == 0 &&
         !(hidden && strcmp(hidden, "1") == 0);
}

/* statvfs and statvfs64 alike: the real call, then the budget reported as the free space. */
#define BUDGET_STATVFS(symbol, stat_type, count_type)                                      \
  int symbol(const char* path, struct stat_type* st) {                                     \
    static int (*real)(const char*, struct stat_type*) = NULL;                             \
    if (!real) real = (int (*)(const char*, struct stat_type*))dlsym(RTLD_NEXT, #symbol);  \
    const int rc = real(path, st);                                                         \
    if (rc == 0 && reports_budget(path))                                                   \
      st->f_bavail = st->f_bfree = (count_type)budget / (st->f_frsize ? st->f_frsize : 1); \
    return rc;                                                                             \
  }
BUDGET_STATVFS(statvfs, statvfs, fsblkcnt_t)
BUDGET_STATVFS(statvfs64, statvfs64, fsblkcnt64_t)
