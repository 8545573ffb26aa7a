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

bool glibc_has_hugetlb_tunable() {
  int major = 0, minor = 0;
  if (std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor) != 2) return false;
  return major > 2 || (major == 2 && minor >= 35);
}

bool kernel_allows_thp() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  return std::getline(in, mode) && mode.find("[never]") == std::string::npos;
}

}  // namespace

void reexec_with_huge_pages(char** argv) {
#ifndef WMAP_FOREIGN_ALLOCATOR
  const char* opt = std::getenv("WMAP_HUGE_PAGES");
  if (opt != nullptr && std::strcmp(opt, "0") == 0) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.hugetlb") != nullptr) return;
  if (!glibc_has_hugetlb_tunable() || !kernel_allows_thp()) return;
  std::string value = tunables != nullptr && *tunables ? std::string(tunables) + ":" : std::string();
  value += "glibc.malloc.hugetlb=1";
  if (::setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc, a noexec mount): carry on with 4 KiB pages, as before.
  if (tunables != nullptr) {
    ::setenv("GLIBC_TUNABLES", tunables, 1);
  } else {
    ::unsetenv("GLIBC_TUNABLES");
  }
#else
  (void)argv;
#endif
}

}  // namespace wmap::cli
