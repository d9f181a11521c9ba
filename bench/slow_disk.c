/* Benchmark helper (LD_PRELOAD): a file system that writes at a set bandwidth, as a parallel file
 * system shared by a job does. Each write, pwrite and writev to a file opened under
 * $TRIDENT_SLOW_DISK_DIR first sleeps its bytes / $TRIDENT_SLOW_DISK_MBPS (MB/s, per process)
 * and then writes; other files and every read are untouched. bench/checkpoint_async.sh runs every
 * side of its comparison under it alike. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { kMaxFd = 65536 };
static unsigned char slowed[kMaxFd];
static const char* dir = NULL;
static double bytes_per_second = 0; /* 0: not configured */

static void configure(void) {
  if (dir) return;
  dir = getenv("TRIDENT_SLOW_DISK_DIR");
  const char* mbps = getenv("TRIDENT_SLOW_DISK_MBPS");
  bytes_per_second = mbps ? atof(mbps) * 1e6 : 0;
  if (!dir) dir = "";
}

static void wait_for(int fd, size_t n) {
  if (fd < 0 || fd >= kMaxFd || !slowed[fd] || bytes_per_second <= 0) return;
  const double seconds = (double)n / bytes_per_second;
  struct timespec left = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  while (nanosleep(&left, &left) != 0) {
  }
}

typedef int (*open_fn)(const char*, int, ...);
#define SLOWED_OPEN(symbol)                                                \
  int symbol(const char* path, int flags, ...) {                           \
    static open_fn real = NULL;                                            \
    if (!real) real = (open_fn)dlsym(RTLD_NEXT, #symbol);                  \
    va_list ap;                                                            \
    va_start(ap, flags);                                                   \
    const mode_t mode = (flags & O_CREAT) ? (mode_t)va_arg(ap, int) : 0;   \
    va_end(ap);                                                            \
    const int fd = real(path, flags, mode);                                \
    configure();                                                           \
    if (fd >= 0 && fd < kMaxFd)                                            \
      slowed[fd] = dir[0] && path && strncmp(path, dir, strlen(dir)) == 0; \
    return fd;                                                             \
  }
SLOWED_OPEN(open)
SLOWED_OPEN(open64)

#define SLOWED_WRITE(symbol, params, args, fd, bytes)               \
  ssize_t symbol params {                                           \
    static ssize_t(*real) params = NULL;                            \
    if (!real) real = (ssize_t(*) params)dlsym(RTLD_NEXT, #symbol); \
    wait_for(fd, bytes);                                            \
    return real args;                                               \
  }

static size_t total(const struct iovec* iov, int count) {
  size_t n = 0;
  for (int i = 0; i < count; ++i) n += iov[i].iov_len;
  return n;
}

SLOWED_WRITE(write, (int fd, const void* buf, size_t n), (fd, buf, n), fd, n)
SLOWED_WRITE(pwrite, (int fd, const void* buf, size_t n, off_t at), (fd, buf, n, at), fd, n)
SLOWED_WRITE(pwrite64, (int fd, const void* buf, size_t n, off_t at), (fd, buf, n, at), fd, n)
SLOWED_WRITE(writev, (int fd, const struct iovec* iov, int count), (fd, iov, count), fd,
             total(iov, count))
SLOWED_WRITE(pwritev, (int fd, const struct iovec* iov, int count, off_t at), (fd, iov, count, at),
             fd, total(iov, count))
