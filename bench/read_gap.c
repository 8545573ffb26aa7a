// Reading through gaps or around them: what PlanOptions::max_read_gap decides, measured.
//
// A rank that keeps RUN bytes of every STRIDE bytes of a file (a row-parallel slice: TP8 o_proj
// keeps 1 KiB of every 8 KiB row) can read the whole span in large preads and copy its runs out
// ("through", what wmap does when the gap STRIDE - RUN is at most max_read_gap), or pread each
// run straight into its place ("per-run"). Each way is timed warm (the file in the page cache)
// and cold (its pages dropped first with posix_fadvise(DONTNEED)), best of --runs, interleaved.
// The destination is touched before timing (a load's parameter buffers are mapped already).
//
//   read_gap [--runs N] [--chunk-mib N] FILE RUN STRIDE
//
// Prints one JSON line per (cache, way): seconds, read calls, bytes asked for, and the bytes the
// kernel fetched from storage (/proc/self/io read_bytes; page granular, readahead included).
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// Bytes this process caused to be read from storage so far (0 where not accounted).
static uint64_t storage_read_bytes(void) {
  FILE* f = fopen("/proc/self/io", "r");
  if (!f) return 0;
  char line[256];
  uint64_t v = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "read_bytes: ", 12) == 0) v = strtoull(line + 12, NULL, 10);
  }
  fclose(f);
  return v;
}

struct Result {
  double seconds;
  uint64_t calls, asked, storage;
};

static int fail(const char* what) {
  perror(what);
  exit(1);
}

static struct Result run_once(int fd, uint64_t size, uint64_t run, uint64_t stride, int cold, int through,
                              char* dst, char* staging, uint64_t chunk) {
  if (cold && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) fail("posix_fadvise");
  const uint64_t rows = size / stride;
  struct Result r = {0, 0, 0, 0};
  const uint64_t io0 = storage_read_bytes();
  const double t0 = now();
  if (through) {
    const uint64_t rows_per_chunk = chunk / stride;
    for (uint64_t row = 0; row < rows; row += rows_per_chunk) {
      const uint64_t n = rows - row < rows_per_chunk ? rows - row : rows_per_chunk;
      const uint64_t len = (n - 1) * stride + run;
      if (pread(fd, staging, len, (off_t)(row * stride)) != (ssize_t)len) fail("pread");
      r.calls++;
      r.asked += len;
      for (uint64_t i = 0; i < n; ++i) memcpy(dst + (row + i) * run, staging + i * stride, run);
    }
  } else {
    for (uint64_t row = 0; row < rows; ++row) {
      if (pread(fd, dst + row * run, run, (off_t)(row * stride)) != (ssize_t)run) fail("pread");
      r.calls++;
      r.asked += run;
    }
  }
  r.seconds = now() - t0;
  r.storage = storage_read_bytes() - io0;
  return r;
}

int main(int argc, char** argv) {
  int runs = 5;
  uint64_t chunk = 16u << 20;
  int a = 1;
  for (; a + 1 < argc && argv[a][0] == '-' && argv[a][1] == '-'; a += 2) {
    if (strcmp(argv[a], "--runs") == 0) {
      runs = atoi(argv[a + 1]);
    } else if (strcmp(argv[a], "--chunk-mib") == 0) {
      chunk = strtoull(argv[a + 1], NULL, 10) << 20;
    } else {
      fprintf(stderr, "unknown option %s\n", argv[a]);
      return 2;
    }
  }
  if (argc - a != 3 || runs < 1) {
    fprintf(stderr, "usage: %s [--runs N] [--chunk-mib N] FILE RUN STRIDE\n", argv[0]);
    return 2;
  }
  const uint64_t run = strtoull(argv[a + 1], NULL, 10), stride = strtoull(argv[a + 2], NULL, 10);
  if (run == 0 || stride < run || chunk < stride) {
    fprintf(stderr, "need 0 < RUN <= STRIDE <= chunk\n");
    return 2;
  }
  const int fd = open(argv[a], O_RDONLY);
  if (fd < 0) fail(argv[a]);
  const off_t end = lseek(fd, 0, SEEK_END);
  if (end < (off_t)stride) fail("file shorter than one stride");
  const uint64_t size = (uint64_t)end / stride * stride;
  char* dst = malloc(size / stride * run);
  char* staging = malloc(chunk);
  if (!dst || !staging) fail("malloc");
  memset(dst, 1, size / stride * run);
  memset(staging, 1, chunk);
  for (int cold = 0; cold <= 1; ++cold) {
    struct Result best[2];
    for (int r = 0; r < runs; ++r) {
      for (int through = 0; through <= 1; ++through) {
        if (!cold && r == 0) run_once(fd, size, run, stride, 0, 1, dst, staging, chunk);  // warm the cache
        const struct Result x = run_once(fd, size, run, stride, cold, through, dst, staging, chunk);
        if (r == 0 || x.seconds < best[through].seconds) best[through] = x;
      }
    }
    for (int through = 0; through <= 1; ++through) {
      const struct Result x = best[through];
      printf("{\"cache\":\"%s\",\"way\":\"%s\",\"run\":%llu,\"stride\":%llu,\"seconds\":%.6f,\"calls\":%llu,"
             "\"asked_bytes\":%llu,\"storage_bytes\":%llu,\"kept_bytes\":%llu}\n",
             cold ? "cold" : "warm", through ? "through" : "per-run", (unsigned long long)run,
             (unsigned long long)stride, x.seconds, (unsigned long long)x.calls, (unsigned long long)x.asked,
             (unsigned long long)x.storage, (unsigned long long)(size / stride * run));
    }
  }
  free(dst);
  free(staging);
  close(fd);
  return 0;
}
