// The CUDA device's pinned staging ring, on the CPU: a fake allocator and fake fences stand in
// for cudaHostAlloc and CUDA events, so the bound, the reuse and the ordering are tested on
// machines without a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "staging_ring.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

struct Counts {
  std::atomic<int> slabs{0}, live{0}, max_live{0};
};

class FakeAllocator final : public StagingRing::SlabAllocator {
 public:
  explicit FakeAllocator(Counts& c) : c_(c) {}
  std::byte* allocate(uint64_t bytes) override {
    ++c_.slabs;
    const int live = ++c_.live;
    for (int m = c_.max_live; live > m && !c_.max_live.compare_exchange_weak(m, live);) {
    }
    return new std::byte[bytes];
  }
  void free(std::byte* slab) noexcept override {
    --c_.live;
    delete[] slab;
  }

 private:
  Counts& c_;
};

// Done when signalled; wait() signals it (as the GPU finishing the copy) and counts.
class FakeFence final : public StagingRing::Fence {
 public:
  bool done() override { return done_; }
  void wait() override {
    ++waits;
    done_ = true;
  }
  void signal() { done_ = true; }
  std::atomic<int> waits{0};

 private:
  std::atomic<bool> done_{false};
};

constexpr uint64_t kSlab = 1 << 20;

TEST(StagingRing, SlabsAreAllocatedLazilyAndNeverBeyondTheBound) {
  Counts c;
  {
    StagingRing ring(std::make_unique<FakeAllocator>(c), kSlab, 3);
    EXPECT_EQ(ring.slabs_allocated(), 0u);
    std::vector<StagingRing::Lease> held;
    for (int i = 0; i < 10; ++i) {
      auto l = ring.try_acquire(kSlab / 2 + 1);  // one per slab
      if (l) held.push_back(l);
    }
    // Fill leases never take the last slab: two slabs, one lease each.
    EXPECT_EQ(held.size(), 2u);
    EXPECT_EQ(ring.slabs_allocated(), 2u);
    auto chunk = ring.acquire(kSlab);  // the reserved slab
    EXPECT_TRUE(chunk);
    EXPECT_EQ(ring.slabs_allocated(), 3u);
    ring.release(chunk, nullptr);
    for (auto& l : held) ring.release(l, nullptr);
  }
  EXPECT_EQ(c.slabs, 3);
  EXPECT_EQ(c.max_live, 3);
  EXPECT_EQ(c.live, 0);  // freed with the ring
}

TEST(StagingRing, SmallLeasesShareASlabAndAreAligned) {
  Counts c;
  StagingRing ring(std::make_unique<FakeAllocator>(c), kSlab, 2);
  auto a = ring.try_acquire(10);
  auto b = ring.try_acquire(300);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a.slab, b.slab);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) - reinterpret_cast<uintptr_t>(a.data), 256u);
  EXPECT_EQ(ring.slabs_allocated(), 1u);
  ring.release(a, nullptr);
  ring.release(b, nullptr);
}

TEST(StagingRing, TooLargeOrEmptyRequests) {
  Counts c;
  StagingRing ring(std::make_unique<FakeAllocator>(c), kSlab, 2);
  EXPECT_FALSE(ring.try_acquire(kSlab + 1));  // the caller streams it in chunks instead
  EXPECT_FALSE(ring.try_acquire(0));
  EXPECT_THROW(ring.acquire(kSlab + 1), Error);
  EXPECT_EQ(ring.slabs_allocated(), 0u);
}

TEST(StagingRing, ARegionIsReusedOnlyAfterItsFence) {
  Counts c;
  StagingRing ring(std::make_unique<FakeAllocator>(c), kSlab, 2);
  auto a = ring.try_acquire(kSlab);
  ASSERT_TRUE(a);
  auto fence = std::make_shared<FakeFence>();
  ring.release(a, fence);
  // The copy out of `a` is still queued: the other slab is used.
  auto b = ring.try_acquire(kSlab);
  ASSERT_TRUE(b);
  EXPECT_NE(b.slab, a.slab);
  ring.release(b, nullptr);  // nothing queued: reusable at once
  auto again = ring.try_acquire(kSlab);
  ASSERT_TRUE(again);
  EXPECT_EQ(again.data, b.data);
  ring.release(again, nullptr);
  fence->signal();
  auto reused = ring.try_acquire(kSlab);
  ASSERT_TRUE(reused);
  EXPECT_EQ(reused.data, a.data);  // reused, not reallocated
  EXPECT_EQ(fence->waits, 0);      // try_acquire never blocks
  EXPECT_EQ(c.slabs, 2);
  ring.release(reused, nullptr);
}

TEST(StagingRing, AcquireWaitsForQueuedCopiesInsteadOfGrowing) {
  Counts c;
  StagingRing ring(std::make_unique<FakeAllocator>(c), kSlab, 1);
  auto first = ring.acquire(kSlab);
  auto fence = std::make_shared<FakeFence>();
  ring.release(first, fence);
  auto second = ring.acquire(kSlab);  // waits on the fence (the fake completes it)
  EXPECT_EQ(fence->waits, 1);
  EXPECT_EQ(second.data, first.data);
  EXPECT_EQ(c.slabs, 1);
  ring.release(second, nullptr);
}

TEST(StagingRing, AcquireBlocksUntilALeaseIsReleased) {
  Counts c;
  StagingRing ring(std::make_unique<FakeAllocator>(c), kSlab, 1);
  auto held = ring.acquire(kSlab);
  std::atomic<bool> got{false};
  std::thread t([&] {
    auto l = ring.acquire(kSlab / 2);
    got = true;
    ring.release(l, nullptr);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got);
  ring.release(held, std::make_shared<FakeFence>());  // its copy is queued: the waiter waits on it too
  t.join();
  EXPECT_TRUE(got);
  EXPECT_EQ(c.slabs, 1);
}

TEST(StagingRing, DestructionWaitsForEveryFence) {
  Counts c;
  auto fence = std::make_shared<FakeFence>();
  {
    StagingRing ring(std::make_unique<FakeAllocator>(c), kSlab, 2);
    ring.release(ring.acquire(100), fence);
  }
  EXPECT_EQ(fence->waits, 1);
  EXPECT_EQ(c.live, 0);
}

// Fill leases held while chunks stream through: nothing deadlocks, no two live leases overlap,
// and no more than max_slabs slabs ever exist.
TEST(StagingRing, ConcurrentFillsAndChunksStayBoundedAndDisjoint) {
  Counts c;
  constexpr uint32_t kSlabs = 3;
  StagingRing ring(std::make_unique<FakeAllocator>(c), kSlab, kSlabs);
  std::mutex m;
  std::map<uintptr_t, uint64_t> live;  // start -> size
  auto claim = [&](const StagingRing::Lease& l) {
    std::lock_guard<std::mutex> lock(m);
    const auto at = reinterpret_cast<uintptr_t>(l.data);
    auto next = live.lower_bound(at);
    if (next != live.end()) {
      EXPECT_GE(next->first, at + l.size);
    }
    if (next != live.begin()) {
      EXPECT_LE(std::prev(next)->first + std::prev(next)->second, at);
    }
    live[at] = l.size;
  };
  auto unclaim = [&](const StagingRing::Lease& l) {
    std::lock_guard<std::mutex> lock(m);
    live.erase(reinterpret_cast<uintptr_t>(l.data));
  };
  std::vector<std::thread> threads;
  std::atomic<int> fallbacks{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const uint64_t n = 1000 + static_cast<uint64_t>((t * 7919 + i * 104729) % (kSlab / 3));
        StagingRing::Lease fill = ring.try_acquire(n);
        if (fill) {
          claim(fill);
        } else {
          ++fallbacks;
        }
        // While the fill is held, stream a chunk as the device does for pageable staging.
        auto chunk = ring.acquire(n);
        claim(chunk);
        auto fence = std::make_shared<FakeFence>();
        unclaim(chunk);
        ring.release(chunk, fence);
        if (i % 2) fence->signal();  // the rest are waited for when their slab is needed
        if (fill) {
          unclaim(fill);
          ring.release(fill, nullptr);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(c.max_live, static_cast<int>(kSlabs));
  EXPECT_LE(ring.slabs_allocated(), kSlabs);
  EXPECT_TRUE(live.empty());
}

}  // namespace
}  // namespace wmap
