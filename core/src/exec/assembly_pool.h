#pragma once
// Host buffers for converted parameters' assembled pieces (PlanRunner): handed out uninitialised
// (every byte is written by a piece before the conversion reads it: the plan's certificate) and
// reused from one parameter to the next, so a buffer is neither zeroed nor faulted in again for
// each parameter. Free buffers are kept up to `keep_bytes` in all (the largest first), the rest
// freed at once; everything goes with the pool, at the end of the load. Thread-safe.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace wmap::exec_detail {

class AssemblyPool {
 public:
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    uint64_t capacity = 0;
    uint64_t size = 0;
    std::span<std::byte> span() const { return {data.get(), size}; }
  };

  explicit AssemblyPool(uint64_t keep_bytes) : keep_bytes_(keep_bytes) {}

  // A buffer of `bytes` (contents undefined): the smallest free one that holds them, else a new one.
  Buffer acquire(uint64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      size_t best = free_.size();
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].capacity >= bytes && (best == free_.size() || free_[i].capacity < free_[best].capacity)) best = i;
      }
      if (best != free_.size()) {
        Buffer b = std::move(free_[best]);
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
        free_bytes_ -= b.capacity;
        b.size = bytes;
        return b;
      }
    }
    Buffer b;
    b.data.reset(new std::byte[bytes ? bytes : 1]);  // default-initialised: not zeroed
    b.capacity = bytes;
    b.size = bytes;
    return b;
  }

  // Back into the pool, or freed when keeping it would pass keep_bytes.
  void release(Buffer& b) {
    if (!b.data) return;
    Buffer out = std::move(b);
    b = Buffer{};
    std::lock_guard<std::mutex> lock(mutex_);
    if (out.capacity > keep_bytes_) return;  // freed as `out` leaves
    free_bytes_ += out.capacity;
    free_.push_back(std::move(out));
    // Over the bound: free the smallest buffers first (the large ones save the most faults).
    while (free_bytes_ > keep_bytes_ && !free_.empty()) {
      size_t smallest = 0;
      for (size_t i = 1; i < free_.size(); ++i) {
        if (free_[i].capacity < free_[smallest].capacity) smallest = i;
      }
      free_bytes_ -= free_[smallest].capacity;
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(smallest));
    }
  }

 private:
  std::mutex mutex_;
  std::vector<Buffer> free_;
  uint64_t free_bytes_ = 0;
  const uint64_t keep_bytes_;
};

}  // namespace wmap::exec_detail
