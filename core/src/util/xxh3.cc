#include "wmap/util/xxh3.h"

#include <xxhash.h>

#include <cstdio>

namespace wmap {

uint64_t xxh3_64(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string xxh3_hex(uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

}  // namespace wmap
