#pragma once
// Whether a destination's pages are faulted in (MADV_POPULATE_WRITE) before the bytes land
// (ExecOptions::prefault; issue 42, item 1). Measured (docs/performance.md "Fresh buffers: when to
// prefault"): a pread into fresh memory lets the kernel fault each page inside the syscall, which
// beats populating first wherever 4 KiB faults are cheap (~1.4 us on the 2-vCPU VM: 1 GB load
// 0.30 s off vs 0.33 s on) and on huge-page buffers always (one fault per 2 MiB: 0.16 s off vs
// 0.24 s on, populate stalls on compaction); only where a 4 KiB fault is expensive (11-15 us on
// a PVM guest) does populating first pay (0.93 s vs 1.32 s). So by default (auto): huge-page
// buffers never, caller-owned buffers never (a refit's are touched already), 4 KiB buffers wmap
// allocated when this machine's measured fault cost is above kExpensiveFaultMicros.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace wmap::exec_detail {

constexpr double kExpensiveFaultMicros = 4.0;

// What a fresh 4 KiB anonymous page costs to fault in by a write, in microseconds: measured once
// per process (128 pages of a private mapping advised MADV_NOHUGEPAGE, the faster of two passes).
// Header-only, like the rest of this file, so the tests drive the policy with a given cost.
inline double fresh_page_fault_micros() {
  static const double micros = [] {
    constexpr size_t kPages = 128;
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    double best = -1;
    for (int pass = 0; pass < 2; ++pass) {
      void* raw = ::mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (raw == MAP_FAILED) return 0.0;
      ::madvise(raw, kPages * page, MADV_NOHUGEPAGE);
      auto* p = static_cast<volatile char*>(raw);
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < kPages; ++i) p[i * page] = 1;
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      ::munmap(raw, kPages * page);
      best = best < 0 ? us : std::min(best, us);
    }
    return best / kPages;
  }();
  return micros;
}

class PrefaultPolicy {
 public:
  // `requested`: ExecOptions::prefault (nullopt: auto). `fault_micros`: the machine's cost,
  // measured when null and needed (auto).
  explicit PrefaultPolicy(std::optional<bool> requested, std::optional<double> fault_micros = std::nullopt)
      : forced_(requested.has_value()), forced_on_(requested.value_or(false)) {
    if (forced_) {
      decision_ = forced_on_ ? "on (requested)" : "off (requested)";
      return;
    }
    const double us = fault_micros ? *fault_micros : fresh_page_fault_micros();
    small_pages_ = us > kExpensiveFaultMicros;
    char text[200];
    std::snprintf(text, sizeof text,
                  "auto: 4 KiB buffers %s (a fresh page faults in %.1f us; populated first above %.0f us), "
                  "huge-page and caller buffers off",
                  small_pages_ ? "on" : "off", us, kExpensiveFaultMicros);
    decision_ = text;
  }
  // For a buffer whose host memory is backed by pages of `page_bytes` (DeviceBuffer::page_bytes;
  // 0: caller-owned or unknown).
  bool applies(uint64_t page_bytes) const {
    if (forced_) return forced_on_;
    return small_pages_ && page_bytes > 0 && page_bytes <= 65536;
  }
  // For ExecStats::prefault_decision: "on (requested)", "off (requested)", or auto's rule and
  // the fault cost it was decided from.
  const std::string& decision() const { return decision_; }

 private:
  // Two bools, not an optional<bool>: g++ 12 -O3 reports the optional "maybe uninitialized"
  // once the constructor is inlined (-Werror in CI).
  bool forced_ = false, forced_on_ = false;
  bool small_pages_ = false;  // auto: 4 KiB buffers wmap allocated
  std::string decision_;
};

}  // namespace wmap::exec_detail
