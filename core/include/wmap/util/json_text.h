#pragma once
// Small helpers to emit JSON text (escaping), shared by every writer of JSON in wmap.

#include <string>
#include <string_view>

namespace wmap {
void append_json_string(std::string& out, std::string_view s);
std::string json_string(std::string_view s);
}
