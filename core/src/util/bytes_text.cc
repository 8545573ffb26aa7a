#include "wmap/util/bytes_text.h"

#include <cstdio>

namespace wmap {

std::string bytes_text(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return std::string(buf) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace wmap
