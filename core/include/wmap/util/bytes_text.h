#pragma once
// Byte counts in messages: "3.50 GiB (3758096384 bytes)", exact and readable at once.

#include <cstdint>
#include <string>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

std::string bytes_text(uint64_t bytes);

}  // namespace wmap
WMAP_PUBLIC_END
