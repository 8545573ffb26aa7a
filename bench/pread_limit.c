// The fresh-memory read limit of this machine: every shard read with pread(2), on every core, into
// one freshly mapped (never touched) buffer, and nothing else: no parsing, no planning. A host load
// must at least fault in the pages it fills and copy the bytes into them, so this is the bound a
// whole-process `wmap load` at TP=1 is measured against (bench/load_bench.py builds and runs it).
//
//   pread_limit [--threads N] [--chunk-mib N] [--huge] [--populate] [--touched] [--mmap-copy] FILE...
//
// The ways to get the pages, each timed: faulted by the kernel inside pread (default); populated
// first, every thread its own chunks (--populate: madvise(MADV_POPULATE_WRITE), Linux 5.14+);
// transparent huge pages (--huge: madvise(MADV_HUGEPAGE)). On VMs where a 4 KiB fault costs
// ~10 us the variants differ several-fold, so the bench reports the best as the limit.
// --touched writes the buffer once before the clock starts: the refit case (a destination the
// engine allocated and filled before), with no fault left inside the timed reads. --mmap-copy
// copies each chunk out of a fresh MAP_SHARED mapping of the file (memcpy, page-table faults on
// the source) instead of pread: another way to the same bytes, which on some machines beats the
// kernel's copy into touched memory. Prints one JSON line: bytes, seconds (from
// the first open to the last byte read, in-process), threads.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

typedef struct {
  int fd;
  uint64_t size, base;  // base: where the file's bytes start in the buffer
  const char* path;
} File;

static File* files;
static int nfiles;
static uint64_t chunk;
static char* buf;
static _Atomic uint64_t next_chunk;
static uint64_t total_chunks;
static uint64_t* first_chunk;  // first global chunk of each file
static int populate, mmap_copy;
static const char** maps;  // --mmap-copy: each file mapped whole

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void* worker(void* arg) {
  (void)arg;
  for (;;) {
    const uint64_t c = atomic_fetch_add(&next_chunk, 1);
    if (c >= total_chunks) return NULL;
    int f = 0;
    while (f + 1 < nfiles && first_chunk[f + 1] <= c) ++f;
    uint64_t off = (c - first_chunk[f]) * chunk;
    uint64_t end = off + chunk < files[f].size ? off + chunk : files[f].size;
    if (populate && madvise(buf + files[f].base + off, end - off, MADV_POPULATE_WRITE) != 0) {
      // Page-aligned ranges only: round inward; the kernel faults the edges during pread.
      const uintptr_t a = ((uintptr_t)(buf + files[f].base + off) + 4095) & ~(uintptr_t)4095;
      const uintptr_t b = (uintptr_t)(buf + files[f].base + end) & ~(uintptr_t)4095;
      if (b > a && madvise((void*)a, b - a, MADV_POPULATE_WRITE) != 0) {
        fprintf(stderr, "pread_limit: madvise(MADV_POPULATE_WRITE): %s\n", strerror(errno));
        exit(1);
      }
    }
    if (mmap_copy) {
      memcpy(buf + files[f].base + off, maps[f] + off, end - off);
      continue;
    }
    while (off < end) {
      const ssize_t n = pread(files[f].fd, buf + files[f].base + off, end - off, (off_t)off);
      if (n <= 0) {
        fprintf(stderr, "pread_limit: %s: pread at %llu: %s\n", files[f].path, (unsigned long long)off,
                n == 0 ? "unexpected end of file" : strerror(errno));
        exit(1);
      }
      off += (uint64_t)n;
    }
  }
}

int main(int argc, char** argv) {
  long threads = sysconf(_SC_NPROCESSORS_ONLN);
  uint64_t chunk_mib = 8;
  int huge = 0, touched = 0, i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; ++i) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = atol(argv[++i]);
    } else if (strcmp(argv[i], "--chunk-mib") == 0 && i + 1 < argc) {
      chunk_mib = strtoull(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--huge") == 0) {
      huge = 1;
    } else if (strcmp(argv[i], "--populate") == 0) {
      populate = 1;
    } else if (strcmp(argv[i], "--touched") == 0) {
      touched = 1;
    } else if (strcmp(argv[i], "--mmap-copy") == 0) {
      mmap_copy = 1;
    } else {
      fprintf(stderr, "usage: pread_limit [--threads N] [--chunk-mib N] [--huge] [--populate] [--touched] [--mmap-copy] FILE...\n");
      return 2;
    }
  }
  if (i == argc || threads < 1 || chunk_mib < 1) {
    fprintf(stderr, "usage: pread_limit [--threads N] [--chunk-mib N] [--huge] [--populate] [--touched] [--mmap-copy] FILE...\n");
    return 2;
  }
  double t0 = now();
  nfiles = argc - i;
  files = calloc((size_t)nfiles, sizeof(File));
  first_chunk = calloc((size_t)nfiles + 1, sizeof(uint64_t));
  maps = calloc((size_t)nfiles, sizeof(char*));
  chunk = chunk_mib << 20;
  uint64_t total = 0;
  for (int f = 0; f < nfiles; ++f) {
    struct stat st;
    files[f].path = argv[i + f];
    files[f].fd = open(files[f].path, O_RDONLY | O_CLOEXEC);
    if (files[f].fd < 0 || fstat(files[f].fd, &st) != 0) {
      fprintf(stderr, "pread_limit: %s: %s\n", files[f].path, strerror(errno));
      return 1;
    }
    files[f].size = (uint64_t)st.st_size;
    files[f].base = total;
    first_chunk[f] = total_chunks;
    total_chunks += (files[f].size + chunk - 1) / chunk;
    total += files[f].size;
    if (mmap_copy && files[f].size > 0) {
      maps[f] = mmap(NULL, files[f].size, PROT_READ, MAP_SHARED, files[f].fd, 0);
      if (maps[f] == MAP_FAILED) {
        fprintf(stderr, "pread_limit: %s: mmap: %s\n", files[f].path, strerror(errno));
        return 1;
      }
    }
  }
  buf = mmap(NULL, total ? total : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) {
    fprintf(stderr, "pread_limit: mmap of %llu bytes: %s\n", (unsigned long long)total, strerror(errno));
    return 1;
  }
  if (huge) madvise(buf, total, MADV_HUGEPAGE);
  if (touched) {
    memset(buf, 1, total);
    t0 = now();
  }
  pthread_t* pool = calloc((size_t)threads, sizeof(pthread_t));
  for (long t = 1; t < threads; ++t) pthread_create(&pool[t], NULL, worker, NULL);
  worker(NULL);
  for (long t = 1; t < threads; ++t) pthread_join(pool[t], NULL);
  const double secs = now() - t0;
  printf("{\"bytes\": %llu, \"seconds\": %.6f, \"threads\": %ld, \"huge\": %s, \"populate\": %s, \"touched\": %s, "
         "\"mmap_copy\": %s}\n",
         (unsigned long long)total, secs, threads, huge ? "true" : "false", populate ? "true" : "false",
         touched ? "true" : "false", mmap_copy ? "true" : "false");
  return 0;
}
