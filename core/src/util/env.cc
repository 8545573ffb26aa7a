// Environment settings, parsed in one place.
#include "wmap/util/env.h"

#include <cstdlib>
#include <string>

#include "wmap/util/error.h"

namespace wmap {

namespace {

// Digits only, at most 19 of them (no overflow of uint64_t).
std::optional<uint64_t> parse_digits(std::string_view s) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  return std::stoull(std::string(s));
}

}  // namespace

std::optional<uint64_t> env_integer(const char* name, uint64_t min, uint64_t max, std::string_view what) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  const auto n = parse_digits(v);
  if (!n || *n < min || *n > max) {
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + v + "': expected an integer " +
                                                 std::to_string(min) + ".." + std::to_string(max) + " (" +
                                                 std::string(what) + ")");
  }
  return n;
}

std::optional<uint64_t> env_bytes(const char* name, std::string_view what) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  std::string_view s(v);
  unsigned shift = 0;
  if (!s.empty()) {
    const size_t at = std::string_view("KMGT").find(s.back());
    if (at != std::string_view::npos) {
      shift = 10 * static_cast<unsigned>(at + 1);
      s.remove_suffix(1);
    }
  }
  const auto n = parse_digits(s);
  if (!n || (shift && *n > (UINT64_MAX >> shift))) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(name) + "='" + v +
                    "': expected a byte count: digits, optionally followed by K, M, G or T (" + std::string(what) +
                    ")");
  }
  return *n << shift;
}

bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string_view(v) != "0";
}

}  // namespace wmap
