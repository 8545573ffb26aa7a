#pragma once
// The core's logger (spdlog), for the core's own sources: fmt-style formatting at the call site.
// Private to the core (its stages add core/src/util to their include path): users go through
// wmap/util/log.h, which does not expose spdlog.

#include <spdlog/spdlog.h>

#include "wmap/util/log.h"

namespace wmap {
spdlog::logger& log();
}
