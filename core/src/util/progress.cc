#include "wmap/util/progress.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace wmap {
namespace {
std::atomic<bool> g_quiet{false};
constexpr auto kDelay = std::chrono::seconds(1);
constexpr auto kTtyPeriod = std::chrono::milliseconds(200);
constexpr auto kLogPeriod = std::chrono::seconds(5);
}  // namespace

void Progress::set_quiet(bool quiet) { g_quiet = quiet; }
bool Progress::quiet() { return g_quiet; }

Progress::Progress(std::string label, uint64_t total, bool enabled, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(enabled && !g_quiet),
      tty_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() { finish(); }

void Progress::update(uint64_t done) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < kDelay) return;
  if (printed_ && now - last_ < (tty_ ? kTtyPeriod : kLogPeriod)) return;
  last_ = now;
  print(done, false);
}

void Progress::finish() {
  if (!enabled_) return;
  if (printed_) print(total_, true);
  enabled_ = false;
}

void Progress::print(uint64_t done, bool final) {
  printed_ = true;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double pct = total_ ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0;
  if (unit_ == kBytes) {
    const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
    char eta[32] = "";
    if (!final && rate > 0 && done < total_)
      std::snprintf(eta, sizeof eta, ", ETA %.1fs", static_cast<double>(total_ - done) / rate);
    std::fprintf(stderr, "%swmap: %s %.2f/%.2f GB (%.0f%%) %.2f GB/s, %.1fs%s%s", tty_ ? "\r" : "", label_.c_str(),
                 static_cast<double>(done) / 1e9, static_cast<double>(total_) / 1e9, pct, rate / 1e9, secs, eta,
                 (final || !tty_) ? "\n" : (tty_ ? "   " : ""));
  } else {
    std::fprintf(stderr, "%swmap: %s %llu/%llu%s (%.0f%%, %.1fs)%s", tty_ ? "\r" : "", label_.c_str(),
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_), unit_.c_str(), pct,
                 secs, (final || !tty_) ? "\n" : "");
  }
  std::fflush(stderr);
}

}  // namespace wmap
