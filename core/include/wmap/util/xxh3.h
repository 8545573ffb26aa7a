#pragma once
// XXH3-64 of a byte range (Debian's libxxhash): a non-cryptographic digest that runs near memory
// bandwidth, for checking that bytes held in memory did not change (the weight cache).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

uint64_t xxh3_64(std::span<const std::byte> bytes);
std::string xxh3_hex(uint64_t digest);  // 16 lowercase hex digits

}  // namespace wmap
WMAP_PUBLIC_END
