#pragma once
// SHA-256 digests as lowercase hex (OpenSSL's libcrypto). Thread-safe.

#include <string>
#include <string_view>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {
std::string sha256_hex(std::string_view data);
}
WMAP_PUBLIC_END
