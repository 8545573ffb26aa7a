#include "wmap/util/log.h"

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

}  // namespace wmap
