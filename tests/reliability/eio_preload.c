// LD_PRELOAD shim for the CLI reliability tests: pread()/pread64() of a file whose path contains
// $WMAP_EIO_FILE (and preadv()/preadv64()/preadv2()) fails with EIO (or $WMAP_EIO_ERRNO) when the read covers byte $WMAP_EIO_OFFSET.
// With WMAP_EIO_TRUNCATE=1 the file is instead truncated to $WMAP_EIO_OFFSET bytes right before
// that read, which then runs (short): a shard that shrinks in the middle of a load.

// Everything else goes to the real functions.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

// The path of the file behind `fd` into `path` (PATH_MAX bytes); 0 when it cannot be read.
static int fd_path(int fd, char* path) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, PATH_MAX - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return 1;
}

static int matches(int fd) {
  const char* want = getenv("WMAP_EIO_FILE");
  char path[PATH_MAX];
  if (want == NULL || *want == '\0' || !fd_path(fd, path)) return 0;
  return strstr(path, want) != NULL;
}

static int faults(int fd, size_t count, off_t offset) {
  const char* at = getenv("WMAP_EIO_OFFSET");
  if (at == NULL || !matches(fd)) return 0;
  const unsigned long long bad = strtoull(at, NULL, 10);
  return bad >= (unsigned long long)offset && bad - (unsigned long long)offset < count;
}

// Truncate mode: shrinks the file behind `fd` and says the read should go ahead.
static int truncated(int fd) {
  const char* t = getenv("WMAP_EIO_TRUNCATE");
  if (t == NULL || strcmp(t, "1") != 0) return 0;
  char path[PATH_MAX];
  if (fd_path(fd, path) && truncate(path, (off_t)strtoull(getenv("WMAP_EIO_OFFSET"), NULL, 10)) != 0) perror("eio_preload: truncate");
  return 1;
}

static int fault_errno(void) {
  const char* e = getenv("WMAP_EIO_ERRNO");
  return e ? atoi(e) : EIO;
}

ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  static ssize_t (*real)(int, void*, size_t, off_t);
  if (!real) real = (ssize_t(*)(int, void*, size_t, off_t))dlsym(RTLD_NEXT, "pread");
  if (faults(fd, count, offset) && !truncated(fd)) {
    errno = fault_errno();
    return -1;
  }
  return real(fd, buf, count, offset);
}

ssize_t pread64(int fd, void* buf, size_t count, off_t offset) {
  static ssize_t (*real)(int, void*, size_t, off_t);
  if (!real) real = (ssize_t(*)(int, void*, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
  if (faults(fd, count, offset) && !truncated(fd)) {
    errno = fault_errno();
    return -1;
  }
  return real(fd, buf, count, offset);
}

static size_t iov_len(const struct iovec* iov, int n) {
  size_t len = 0;
  for (int i = 0; i < n; ++i) len += iov[i].iov_len;
  return len;
}

ssize_t preadv(int fd, const struct iovec* iov, int n, off_t offset) {
  static ssize_t (*real)(int, const struct iovec*, int, off_t);
  if (!real) real = (ssize_t(*)(int, const struct iovec*, int, off_t))dlsym(RTLD_NEXT, "preadv");
  if (faults(fd, iov_len(iov, n), offset) && !truncated(fd)) {
    errno = fault_errno();
    return -1;
  }
  return real(fd, iov, n, offset);
}

ssize_t preadv64(int fd, const struct iovec* iov, int n, off_t offset) {
  static ssize_t (*real)(int, const struct iovec*, int, off_t);
  if (!real) real = (ssize_t(*)(int, const struct iovec*, int, off_t))dlsym(RTLD_NEXT, "preadv64");
  if (faults(fd, iov_len(iov, n), offset) && !truncated(fd)) {
    errno = fault_errno();
    return -1;
  }
  return real(fd, iov, n, offset);
}

ssize_t preadv2(int fd, const struct iovec* iov, int n, off_t offset, int flags) {
  static ssize_t (*real)(int, const struct iovec*, int, off_t, int);
  if (!real) real = (ssize_t(*)(int, const struct iovec*, int, off_t, int))dlsym(RTLD_NEXT, "preadv2");
  if (offset >= 0 && faults(fd, iov_len(iov, n), offset) && !truncated(fd)) {
    errno = fault_errno();
    return -1;
  }
  return real(fd, iov, n, offset, flags);
}
