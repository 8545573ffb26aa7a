#include "staging_ring.h"

#include <algorithm>
#include <cassert>

#include "wmap/util/error.h"

namespace wmap {

StagingRing::StagingRing(std::unique_ptr<SlabAllocator> allocator, uint64_t slab_bytes, uint32_t max_slabs)
    : allocator_(std::move(allocator)), slab_bytes_(slab_bytes), max_slabs_(std::max<uint32_t>(max_slabs, 1)) {
  assert(slab_bytes_ >= kAlign);
  slabs_.reserve(max_slabs_);
}

StagingRing::~StagingRing() {
  for (Slab& s : slabs_) {
    for (auto& f : s.fences) f->wait();
    allocator_->free(s.base);
  }
}

uint32_t StagingRing::preallocate(std::string* error) {
  std::vector<std::byte*> got;
  while (slabs_.size() + got.size() < max_slabs_) {
    try {
      got.push_back(allocator_->allocate(slab_bytes_));
    } catch (const std::exception& e) {
      if (error) *error = e.what();
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::byte* base : got) slabs_.push_back({base, 0, 0, 0, {}});
  max_slabs_ = std::max<uint32_t>(static_cast<uint32_t>(slabs_.size()), 1);
  return static_cast<uint32_t>(slabs_.size());
}

uint32_t StagingRing::slabs_allocated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<uint32_t>(slabs_.size());
}

bool StagingRing::reset_if_idle(Slab& s) {
  if (s.live != 0) return false;
  std::erase_if(s.fences, [](const std::shared_ptr<Fence>& f) { return f->done(); });
  if (!s.fences.empty()) return false;
  s.used = 0;
  return true;
}

uint32_t StagingRing::filling_slabs() const {
  return static_cast<uint32_t>(
      std::count_if(slabs_.begin(), slabs_.end(), [](const Slab& s) { return s.filling > 0; }));
}

int StagingRing::find_room(uint64_t bytes, bool filling) {
  // Leases held across a fill may not take the last slab: acquire() must always find one whose
  // leases are all short-lived.
  const bool may_take_new_slab = !filling || filling_slabs() + 1 < max_slabs_;
  const uint64_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  for (size_t i = 0; i < slabs_.size(); ++i) {
    Slab& s = slabs_[i];
    if (filling && s.filling == 0 && !may_take_new_slab) continue;
    reset_if_idle(s);
    if (s.used + need <= slab_bytes_) return static_cast<int>(i);
  }
  if (slabs_.size() < max_slabs_ && may_take_new_slab) {
    slabs_.push_back({allocator_->allocate(slab_bytes_), 0, 0, 0, {}});
    return static_cast<int>(slabs_.size() - 1);
  }
  return -1;
}

StagingRing::Lease StagingRing::place(uint32_t slab, uint64_t bytes, bool filling) {
  Slab& s = slabs_[slab];
  Lease lease{s.base + s.used, bytes, slab, filling};
  s.used += (bytes + kAlign - 1) / kAlign * kAlign;
  ++s.live;
  if (filling) ++s.filling;
  return lease;
}

StagingRing::Lease StagingRing::try_acquire(uint64_t bytes) {
  if (bytes == 0 || bytes > slab_bytes_) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  const int i = find_room(bytes, true);
  return i < 0 ? Lease{} : place(static_cast<uint32_t>(i), bytes, true);
}

StagingRing::Lease StagingRing::acquire(uint64_t bytes) {
  if (bytes == 0 || bytes > slab_bytes_) {
    throw Error(ErrorCode::kInternal, "staging: a chunk of " + std::to_string(bytes) +
                                          " bytes does not fit a slab of " + std::to_string(slab_bytes_));
  }
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    const int i = find_room(bytes, false);
    if (i >= 0) return place(static_cast<uint32_t>(i), bytes, false);
    // An idle slab waits only for copies already queued: wait for them outside the lock.
    auto idle =
        std::find_if(slabs_.begin(), slabs_.end(), [](const Slab& s) { return s.live == 0 && !s.fences.empty(); });
    if (idle != slabs_.end()) {
      const auto fences = idle->fences;
      lock.unlock();
      for (const auto& f : fences) f->wait();
      lock.lock();
      continue;
    }
    released_.wait(lock);
  }
}

void StagingRing::release(const Lease& lease, std::shared_ptr<Fence> fence) {
  if (!lease) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Slab& s = slabs_[lease.slab];
    assert(s.live > 0);
    --s.live;
    if (lease.held_across_fill) --s.filling;
    if (fence) {
      // A slab that never goes idle would otherwise collect fences without bound.
      if (s.fences.size() >= 64) std::erase_if(s.fences, [](const std::shared_ptr<Fence>& f) { return f->done(); });
      s.fences.push_back(std::move(fence));
    }
  }
  released_.notify_all();
}

}  // namespace wmap
