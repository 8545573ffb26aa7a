#pragma once
// Small helpers to emit JSON text (escaping), shared by every writer of JSON in wmap.

#include <string>
#include <string_view>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {
void append_json_string(std::string& out, std::string_view s);
std::string json_string(std::string_view s);
}  // namespace wmap
WMAP_PUBLIC_END
