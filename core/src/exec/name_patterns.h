#pragma once
// A list of RE2 patterns matched in full against parameter names (engine-owned names, a caller's
// ignore= list). Compiled once; a pattern that does not compile is kInvalidArgument naming it.
#include <re2/re2.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "wmap/util/error.h"

namespace wmap::exec_detail {

class NamePatterns {
 public:
  NamePatterns(const std::vector<std::string>& patterns, const char* what) {
    for (const auto& p : patterns) {
      auto re = std::make_unique<RE2>(p, RE2::Quiet);
      if (!re->ok())
        throw Error(ErrorCode::kInvalidArgument,
                    std::string(what) + " pattern '" + p + "' does not compile: " + re->error());
      res_.push_back(std::move(re));
    }
  }
  bool match(const std::string& name) const {
    return std::any_of(res_.begin(), res_.end(), [&](const auto& re) { return RE2::FullMatch(name, *re); });
  }

 private:
  std::vector<std::unique_ptr<RE2>> res_;
};

}  // namespace wmap::exec_detail
