#pragma once
// A bounded ring of reused staging slabs (pinned host memory for the CUDA device) and the fences
// that say when the copies out of them are done. No CUDA here: the allocator and the fences are
// interfaces, so the bound, the reuse and the ordering are tested on the CPU (staging_ring_test.cc).
//
// A lease is a region of one slab. Two kinds:
// - try_acquire(): never blocks; held while a parameter is filled (reads land in it directly).
//   Such leases never occupy every slab, so one slab always stays for acquire().
// - acquire(): blocks until room; held only for one chunk's copy, so it always makes progress
//   (it waits on fences of copies already queued, never on other leases' owners).
// release(lease, fence) returns the region; it is reused once the fence is done. At most
// max_slabs slabs of slab_bytes are ever allocated, lazily. Thread-safe.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include "wmap/util/export.h"

namespace wmap {

class WMAP_API StagingRing {
 public:
  class Fence {
   public:
    virtual ~Fence() = default;
    virtual bool done() = 0;  // non-blocking
    virtual void wait() = 0;
  };
  class SlabAllocator {
   public:
    virtual ~SlabAllocator() = default;
    virtual std::byte* allocate(uint64_t bytes) = 0;  // throws on failure
    virtual void free(std::byte* slab) noexcept = 0;
  };
  struct Lease {
    std::byte* data = nullptr;
    uint64_t size = 0;
    uint32_t slab = 0;
    bool held_across_fill = false;  // from try_acquire()
    explicit operator bool() const { return data != nullptr; }
  };

  StagingRing(std::unique_ptr<SlabAllocator> allocator, uint64_t slab_bytes, uint32_t max_slabs);
  ~StagingRing();  // waits for every fence, then frees the slabs
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // Allocates every slab now (before the ring is shared, e.g. when a device opens, so pinning is
  // neither timed with a load nor done under the ring's lock). Stops at the first failure and
  // lowers the bound to what it got; returns that count, with the failure in `error`.
  uint32_t preallocate(std::string* error);

  Lease try_acquire(uint64_t bytes);                               // empty when bytes > slab_bytes or no room now
  Lease acquire(uint64_t bytes);                                   // bytes <= slab_bytes
  void release(const Lease& lease, std::shared_ptr<Fence> fence);  // fence may be null (nothing queued)

  uint64_t slab_bytes() const { return slab_bytes_; }
  uint32_t max_slabs() const { return max_slabs_; }
  uint32_t slabs_allocated() const;

 private:
  struct Slab {
    std::byte* base = nullptr;
    uint64_t used = 0;     // bump offset; reset when idle
    uint32_t live = 0;     // leases not yet released
    uint32_t filling = 0;  // of which from try_acquire()
    std::vector<std::shared_ptr<Fence>> fences;
  };
  static constexpr uint64_t kAlign = 256;  // DMA- and kernel-friendly region starts

  Lease place(uint32_t slab, uint64_t bytes, bool filling);
  bool reset_if_idle(Slab& s);  // true when the slab is empty now
  uint32_t filling_slabs() const;
  int find_room(uint64_t bytes, bool filling);  // a slab index or -1; allocates lazily

  std::unique_ptr<SlabAllocator> allocator_;
  const uint64_t slab_bytes_;
  uint32_t max_slabs_;  // lowered only by preallocate()
  mutable std::mutex mutex_;
  std::condition_variable released_;
  std::vector<Slab> slabs_;
};

}  // namespace wmap
