#include "huge_pages.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "wmap/util/env.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define WMAP_FOREIGN_ALLOCATOR 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define WMAP_FOREIGN_ALLOCATOR 1
#endif

namespace wmap::cli {
namespace {

// Address space the main heap grows by at once; only the pages touched are ever backed.
// The 409k-tensor plan peaks at ~200 MB.
[[maybe_unused]] constexpr size_t kHugeHeapBytes = size_t{1} << 30;
[[maybe_unused]] constexpr int kDefaultMmapMax = 65536;  // glibc's DEFAULT_MMAP_MAX

[[maybe_unused]] bool kernel_allows_thp() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  return std::getline(in, mode) && mode.find("[never]") == std::string::npos;
}

// The subcommand is the first argument that is not an option (the CLI's global options are
// flags without values).
[[maybe_unused]] bool metadata_command(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    return std::strcmp(argv[i], "inspect") == 0 || std::strcmp(argv[i], "plan") == 0;
  }
  return false;
}

std::string decision = "off (sanitizer build: not glibc's allocator)";

}  // namespace

const char* huge_pages_decision() { return decision.c_str(); }

void use_huge_pages_for_metadata(int argc, char** argv) {
#ifndef WMAP_FOREIGN_ALLOCATOR
  decision = "off (only inspect and plan use them; load maps its parameter buffers huge itself)";
  if (!metadata_command(argc, argv)) return;
  decision = "off (WMAP_HUGE_PAGES=0)";
  if (!env_switch_on("WMAP_HUGE_PAGES")) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.hugetlb") != nullptr) {
    decision = std::string("as GLIBC_TUNABLES says (") + tunables + ")";
    return;
  }
  decision = "off (transparent huge pages [never])";
  if (!kernel_allows_thp()) return;
  // Grow the heap once by the whole reserve: one block just over the top chunk's free space
  // makes sbrk extend by it plus M_TOP_PAD. Freed at once, it stays as the top chunk.
  if (::mallopt(M_TOP_PAD, static_cast<int>(kHugeHeapBytes)) == 0 || ::mallopt(M_TRIM_THRESHOLD, INT_MAX) == 0 ||
      ::mallopt(M_MMAP_MAX, 0) == 0) {
    decision = "off (mallopt refused)";
    return;
  }
  void* probe = std::malloc(size_t{1} << 20);
  char* const top = static_cast<char*>(::sbrk(0));
  ::mallopt(M_TOP_PAD, 128 << 10);  // glibc's default again: later growth (past the reserve) as usual
  char* const start = static_cast<char*>(probe);
  const uintptr_t huge = uintptr_t{2} << 20;
  char* const first = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(start) + huge - 1) / huge * huge);
  if (probe == nullptr || top == reinterpret_cast<char*>(-1) || top < first + huge) {
    // sbrk could not grow (RLIMIT_DATA, strict overcommit): malloc went on without it, and
    // carries on with its usual settings.
    std::free(probe);
    ::mallopt(M_MMAP_MAX, kDefaultMmapMax);
    decision = "off (the heap could not grow by the reserve; malloc carries on with 4 KiB pages)";
    return;
  }
  const size_t len = static_cast<size_t>(top - first) / huge * huge;
  if (::madvise(first, len, MADV_HUGEPAGE) != 0) {
    std::free(probe);
    ::mallopt(M_MMAP_MAX, kDefaultMmapMax);
    decision = std::string("off (madvise(MADV_HUGEPAGE) failed: ") + std::strerror(errno) + ")";
    return;
  }
  std::free(probe);
  decision = "on (" + std::to_string(len >> 20) + " MiB of malloc's main heap advised MADV_HUGEPAGE)";
#else
  (void)argc;
  (void)argv;
#endif
}

}  // namespace wmap::cli
