#include "wmap/spec/module_list.h"

#include <fnmatch.h>
#include <re2/re2.h>

#include <memory>
#include <unordered_map>

namespace wmap {

bool ModuleList::contains(std::string_view linear) const {
  const std::string name(linear);
  for (const std::string& pattern : patterns) {
    if (style == Style::kSubstring) {
      if (!pattern.empty() && name.find(pattern) != std::string::npos) return true;
      continue;
    }
    if (style == Style::kCompressedTensors) {
      if (pattern.rfind("re:", 0) == 0) {
        // Asked once per linear of the model: each pattern is compiled once per thread.
        thread_local std::unordered_map<std::string, std::unique_ptr<RE2>> compiled;
        auto& re = compiled[pattern];
        if (!re) re = std::make_unique<RE2>("^(?:" + pattern.substr(3) + ")", RE2::Quiet);
        if (re->ok() && RE2::PartialMatch(name, *re)) return true;
      } else if (pattern == name) {
        return true;
      }
      continue;
    }
    for (std::string module = name;;) {
      if (fnmatch(pattern.c_str(), module.c_str(), 0) == 0) return true;
      const size_t dot = module.rfind('.');
      if (dot == std::string::npos) break;
      module.resize(dot);
    }
  }
  return false;
}

}  // namespace wmap
