#include "reliability/reliability_util.h"

#include <unistd.h>

#include <fstream>

namespace wmap::test {

uint64_t rss_pages() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident;
}

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

}  // namespace wmap::test
