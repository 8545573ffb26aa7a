#pragma once
// Anonymous memory on transparent huge pages, for the buffers that take a load's bytes: host
// parameter buffers (device/host_device.cc) and the pread path's staging (exec/staging_buffer.h).
// On the VMs we measure on a fresh 4 KiB page costs ~1-15 us to fault in, and one 2 MiB fault
// replaces 512 of them; transposes reading rows pages apart also stop missing the TLB
// (docs/performance.md). WMAP_HUGE_PAGES=0 turns it off. Internal; header-only.

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

#include "wmap/util/env.h"

namespace wmap {

constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

inline bool huge_pages_wanted() {
  static const bool wanted = env_switch_on("WMAP_HUGE_PAGES");
  return wanted;
}

// `bytes` rounded up to whole huge pages (`mapped`), mapped at a 2 MiB boundary and advised
// MADV_HUGEPAGE (advice: 4 KiB pages still work); nullptr when the mapping fails (the caller
// falls back to the heap). Free with munmap(data, mapped).
inline std::byte* map_huge(uint64_t bytes, uint64_t& mapped) {
  mapped = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* raw = ::mmap(nullptr, mapped + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  if (aligned > base) ::munmap(raw, aligned - base);
  if (const uintptr_t tail = base + mapped + kHugePageBytes - (aligned + mapped); tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + mapped), tail);
  }
  ::madvise(reinterpret_cast<void*>(aligned), mapped, MADV_HUGEPAGE);
  return reinterpret_cast<std::byte*>(aligned);
}

}  // namespace wmap
