/* Test helper (LD_PRELOAD): a file system that fills up. Writes to files opened under
 * $TRIDENT_FULL_DISK_DIR fail with ENOSPC once they have grown those files by
 * $TRIDENT_FULL_DISK_BYTES bytes, as they would on a full disk, where rewriting bytes a file
 * already holds still succeeds (HDF5 rewrites its metadata in place, and only the new chunks it
 * writes when it closes a dataset fail); statvfs of a path under the directory reports the bytes
 * left as free (unless TRIDENT_FULL_DISK_HIDDEN=1); other files are untouched. The budget is
 * each process's own, or with TRIDENT_FULL_DISK_SHARED=<file> one for every process that names
 * the file (the ranks of a job writing their parts of one checkpoint), which every byte written
 * uses. With TRIDENT_FULL_DISK_MBPS, each write to a file there first waits its bytes / MBPS
 * MB/s (per process): a file system of a set bandwidth (bench/checkpoint_async.sh), alone (no
 * TRIDENT_FULL_DISK_BYTES: no budget) or filling up. With
 * TRIDENT_FULL_DISK_READONLY=1 the directory is a read-only file system instead: opening a file
 * there for writing and making a directory there fail with EROFS. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { kMaxFd = 65536 };
static unsigned char watched[kMaxFd];
static long long budget = -1; /* bytes the file system holds; -1: not configured */
static long long used_here = 0;
static long long* used_shared = NULL; /* with TRIDENT_FULL_DISK_SHARED: every process's bytes */
static const char* dir = NULL;

static void configure(void) {
  if (dir) return;
  dir = getenv("TRIDENT_FULL_DISK_DIR");
  const char* bytes = getenv("TRIDENT_FULL_DISK_BYTES");
  budget = bytes ? atoll(bytes) : -1;
  if (!dir) dir = "";
  /* One file system for all the processes of a job (the ranks), as a real disk is: the bytes used
   * are a counter in a file they all map. */
  const char* shared = getenv("TRIDENT_FULL_DISK_SHARED");
  if (shared && budget >= 0) {
    const int fd = (int)syscall(SYS_openat, AT_FDCWD, shared, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 &&
        (st.st_size >= (off_t)sizeof(long long) || ftruncate(fd, sizeof(long long)) == 0)) {
      void* at = mmap(NULL, sizeof(long long), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (at != MAP_FAILED) used_shared = (long long*)at;
    }
    if (fd >= 0) close(fd);
  }
}

/* With TRIDENT_FULL_DISK_MBPS: a write of n bytes first waits n / (MBPS x 1e6) seconds. */
static void take_time(size_t n) {
  static double bytes_per_second = -1;
  if (bytes_per_second < 0) {
    const char* mbps = getenv("TRIDENT_FULL_DISK_MBPS");
    bytes_per_second = mbps ? atof(mbps) * 1e6 : 0;
  }
  if (bytes_per_second <= 0) return;
  const double seconds = (double)n / bytes_per_second;
  struct timespec left = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&left, &left) != 0) {
  }
}

static long long used(void) {
  return used_shared ? __atomic_load_n(used_shared, __ATOMIC_SEQ_CST) : used_here;
}

/* Takes n bytes of the budget, or returns 0 when they are not left. */
static int take(long long n) {
  if (!used_shared) {
    if (used_here + n > budget) return 0;
    used_here += n;
    return 1;
  }
  long long now = __atomic_load_n(used_shared, __ATOMIC_SEQ_CST);
  do {
    if (now + n > budget) return 0;
  } while (!__atomic_compare_exchange_n(used_shared, &now, now + n, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST));
  return 1;
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
 * when not. Only the bytes past the file's end use a process's own budget; a shared budget counts
 * every byte, since the processes write into the holes of a file another made as long as it will
 * be (a checkpoint's datasets, allocated by rank 0, written by every rank). */
static int allowed(int fd, long long offset, size_t n) {
  if (fd < 0 || fd >= kMaxFd || !watched[fd]) return 1;
  take_time(n);
  if (budget < 0) return 1;
  long long growth = (long long)n;
  struct stat st;
  if (!used_shared && fstat(fd, &st) == 0) {
    if (offset < 0) offset = lseek(fd, 0, SEEK_CUR);
    const long long from = offset > st.st_size ? offset : (long long)st.st_size;
    const long long end = offset + (long long)n;
    growth = offset >= 0 ? (end > from ? end - from : 0) : (long long)n;
  }
  if (!take(growth)) {
    errno = ENOSPC;
    return 0;
  }
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
#define BUDGET_STATVFS(symbol, stat_type, count_type)                                     \
  int symbol(const char* path, struct stat_type* st) {                                    \
    static int (*real)(const char*, struct stat_type*) = NULL;                            \
    if (!real) real = (int (*)(const char*, struct stat_type*))dlsym(RTLD_NEXT, #symbol); \
    const int rc = real(path, st);                                                        \
    if (rc == 0 && reports_budget(path))                                                  \
      st->f_bavail = st->f_bfree =                                                        \
          (count_type)(budget - used()) / (st->f_frsize ? st->f_frsize : 1);              \
    return rc;                                                                            \
  }
BUDGET_STATVFS(statvfs, statvfs, fsblkcnt_t)
BUDGET_STATVFS(statvfs64, statvfs64, fsblkcnt64_t)
