#include "huge_pages.h"

#include <gnu/libc-version.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

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

[[maybe_unused]] bool glibc_has_hugetlb_tunable() {
  int major = 0, minor = 0;
  if (std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor) != 2) return false;
  return major > 2 || (major == 2 && minor >= 35);
}

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

void reexec_with_huge_pages(int argc, char** argv) {
#ifndef WMAP_FOREIGN_ALLOCATOR
  decision = "off (only inspect and plan use them; load maps its parameter buffers huge itself)";
  if (!metadata_command(argc, argv)) return;
  const char* opt = std::getenv("WMAP_HUGE_PAGES");
  decision = "off (WMAP_HUGE_PAGES=0)";
  if (opt != nullptr && std::strcmp(opt, "0") == 0) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.hugetlb") != nullptr) {
    decision = std::string("as GLIBC_TUNABLES says (") + tunables + ")";
    return;
  }
  decision = "off (glibc older than 2.35 or transparent huge pages [never])";
  if (!glibc_has_hugetlb_tunable() || !kernel_allows_thp()) return;
  decision = "off (could not re-execute /proc/self/exe)";
  std::string value = tunables != nullptr && *tunables ? std::string(tunables) + ":" : std::string();
  value += "glibc.malloc.hugetlb=1";
  // The resolved path, not /proc/self/exe, so that the process keeps its name (ps, top, perf).
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof self - 1) return;
  self[n] = '\0';
  if (::setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  ::execv(self, argv);
  // exec failed (no /proc, a noexec mount): carry on with 4 KiB pages, as before.
  if (tunables != nullptr) {
    ::setenv("GLIBC_TUNABLES", tunables, 1);
  } else {
    ::unsetenv("GLIBC_TUNABLES");
  }
#else
  (void)argc;
  (void)argv;
#endif
}

}  // namespace wmap::cli
