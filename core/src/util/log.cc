#include "logger.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace wmap {

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("wmap");
    l->set_pattern("wmap: %^%l%$: %v");
    return l;
  }();
  return *logger;
}

void set_log_level(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: log().set_level(spdlog::level::debug); return;
    case LogLevel::kInfo: log().set_level(spdlog::level::info); return;
    case LogLevel::kWarn: log().set_level(spdlog::level::warn); return;
    case LogLevel::kOff: log().set_level(spdlog::level::off); return;
  }
}

void log_debug(std::string_view message) { log().debug("{}", message); }
void log_info(std::string_view message) { log().info("{}", message); }
void log_warn(std::string_view message) { log().warn("{}", message); }

}  // namespace wmap
