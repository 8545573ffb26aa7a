#pragma once
// wmap's log: one line per message on stderr ("wmap: warning: ..."). Thread-safe. The messages
// are formatted by the caller; the logging library behind it (spdlog) is the core's own
// dependency, not its users'.

#include <cstdint>
#include <string_view>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

enum class LogLevel : uint8_t { kDebug, kInfo, kWarn, kOff };

// Messages below `level` are dropped (default kInfo).
void set_log_level(LogLevel level);
void log_debug(std::string_view message);
void log_info(std::string_view message);
void log_warn(std::string_view message);

}  // namespace wmap
WMAP_PUBLIC_END
