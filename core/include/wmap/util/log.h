#pragma once
// wmap's logger: spdlog writing to stderr, one line per message. Thread-safe.

#include <spdlog/spdlog.h>

namespace wmap {
spdlog::logger& log();
}
