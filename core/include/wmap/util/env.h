#pragma once
// Settings read from the environment, parsed one way: an unset variable is nullopt; a set one
// must be a plain decimal integer in [min, max], else kInvalidArgument naming the variable, its
// value and what it expects ("WMAP_LOAD_WORKERS='x': expected an integer 1..4096 (load workers)").
// Front ends read them (CLI, Python, the loader's cache), never a constructor deep inside.

#include <cstdint>
#include <optional>
#include <string_view>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

std::optional<uint64_t> env_integer(const char* name, uint64_t min, uint64_t max, std::string_view what);

// A byte count: digits with an optional binary suffix K, M, G or T (KiB ... TiB), e.g. "64G".
std::optional<uint64_t> env_bytes(const char* name, std::string_view what);

// A switch that is on unless set to "0" (WMAP_HUGE_PAGES).
bool env_switch_on(const char* name);

}  // namespace wmap
WMAP_PUBLIC_END
