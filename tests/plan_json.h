#pragma once
// A plan's JSON as `wmap plan --json` prints it, and its parameters by name: for the tests that
// check what a plan names (formats, conversions, companions).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace wmap::test {

inline nlohmann::json plan_json(const std::filesystem::path& ckpt, const std::string& layout) {
  const auto r = run_wmap("plan " + shell_quote(ckpt.string()) + " --json " + layout);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

inline std::map<std::string, nlohmann::json> params_of(const nlohmann::json& plan) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& p : plan["params"]) out[p["name"]] = p;
  return out;
}

}  // namespace wmap::test
