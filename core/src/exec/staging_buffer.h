#pragma once
// One reusable staging buffer of the pread path (work_queues.h's StagingPool): what a transposed
// or converted piece is read into before the load pool copies it out. Its bytes are undefined
// (never zeroed: the read overwrites them), and from 2 MiB up it is a mapping advised
// MADV_HUGEPAGE at a 2 MiB boundary: a transpose's 32x32 tiles read 32 source rows a page or more
// apart, and on 4 KiB pages each tile walked 32+ TLB entries (Llama 4's [H, 2I] experts: the
// tiles' loads missed the dTLB; issue 42, item 3). WMAP_HUGE_PAGES=0 keeps it on 4 KiB pages (util/huge_mapping.h).

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>

#include "huge_mapping.h"

namespace wmap::exec_detail {

class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  StagingBuffer(StagingBuffer&& o) noexcept { swap(o); }
  StagingBuffer& operator=(StagingBuffer&& o) noexcept {
    if (this != &o) {
      free_();
      swap(o);
    }
    return *this;
  }
  ~StagingBuffer() { free_(); }

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // At least `bytes` (contents undefined afterwards when it grew); throws std::bad_alloc.
  void reserve(size_t bytes) {
    if (bytes <= size_) return;
    free_();
    if (bytes >= kHugePageBytes && huge_pages_wanted()) {
      uint64_t len = 0;
      if ((data_ = map_huge(bytes, len)) != nullptr) {
        size_ = len;
        mapped_ = true;
        return;
      }
    }
    data_ = new std::byte[bytes];  // default-initialised: not zeroed
    size_ = bytes;
  }

 private:
  void free_() {
    if (!data_) return;
    if (mapped_) {
      ::munmap(data_, size_);
    } else {
      delete[] data_;
    }
    data_ = nullptr;
    size_ = 0;
    mapped_ = false;
  }
  void swap(StagingBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(mapped_, o.mapped_);
  }

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

}  // namespace wmap::exec_detail
