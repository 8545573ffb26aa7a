#pragma once
// A progress line on stderr for operations that take more than a second: nothing is printed
// before the first second, so quick operations stay silent. Not thread-safe: update from one
// thread (the caller's), or serialise the calls. With the unit kBytes the line shows GB done,
// the rate in GB/s and the time left (ETA).

#include <chrono>
#include <cstdint>
#include <string>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

class Progress {
 public:
  static constexpr const char* kBytes = "bytes";
  Progress(std::string label, uint64_t total, bool enabled, std::string unit = "");
  ~Progress();
  void update(uint64_t done);
  void finish();
  // Process-wide switch set by `-q`.
  static void set_quiet(bool quiet);
  static bool quiet();

 private:
  void print(uint64_t done, bool final);

  std::string label_;
  std::string unit_;
  uint64_t total_;
  bool enabled_;
  bool printed_ = false;
  bool tty_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace wmap
WMAP_PUBLIC_END
