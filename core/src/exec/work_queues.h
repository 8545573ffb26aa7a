#pragma once
// The executor's bounded hand-offs, private to core/src/exec: the job queue between the read
// pool and the load pool, and the reusable staging buffers of pieces read whole (pread path).
// Both are thread-safe; fail()/wake() release every waiter when a load fails.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "staging_buffer.h"

namespace wmap::exec_detail {

class StagingPool;

// One staging buffer taken from a StagingPool: given back exactly once, by release() or by the
// destructor, whichever comes first (review F5: an error path gave one buffer back twice, so two
// read workers could fill it at once). Move-only.
class StagingLease {
 public:
  StagingLease() = default;
  StagingLease(StagingPool* pool, size_t index) : pool_(pool), index_(index) {}
  StagingLease(StagingLease&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)), index_(o.index_) {}
  StagingLease& operator=(StagingLease&& o) noexcept {
    if (this != &o) {
      release();
      pool_ = std::exchange(o.pool_, nullptr);
      index_ = o.index_;
    }
    return *this;
  }
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;
  ~StagingLease() { release(); }

  explicit operator bool() const { return pool_ != nullptr; }
  StagingBuffer& buffer() const;
  void release();

 private:
  StagingPool* pool_ = nullptr;
  size_t index_ = 0;
};

// A job for the load pool: a unit (by index into the schedule) to copy, or a parameter to finish.
// Move-only: a staged copy carries its buffer's lease.
struct Job {
  enum class Kind { kCopyView, kCopyStaged, kZero, kFinish } kind = Kind::kZero;
  size_t unit = 0;
  uint32_t param = 0;
  StagingLease staging;
};

// A bounded multi-producer multi-consumer queue; close() or fail() wakes everyone.
class JobQueue {
 public:
  explicit JobQueue(size_t capacity) : capacity_(capacity) {}
  // False when the load failed: `j` (and any lease it holds) is dropped.
  bool push(Job&& j) {
    std::unique_lock lock(mu_);
    not_full_.wait(lock, [&] { return failed_ || q_.size() < capacity_; });
    if (failed_) return false;
    q_.push_back(std::move(j));
    not_empty_.notify_one();
    return true;
  }
  bool pop(Job& j) {
    std::unique_lock lock(mu_);
    not_empty_.wait(lock, [&] { return failed_ || closed_ || !q_.empty(); });
    if (failed_ || q_.empty()) return false;
    j = std::move(q_.front());
    q_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
  }
  void fail() {
    std::lock_guard lock(mu_);
    failed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<Job> q_;
  size_t capacity_;
  bool closed_ = false, failed_ = false;
};

// Reused staging buffers for pieces that must be rearranged (transposes): read workers take
// one, load workers give it back after the copy. Bounded: never more than `count` exist.
class StagingPool {
 public:
  explicit StagingPool(size_t count) : buffers_(count) {
    for (size_t i = 0; i < count; ++i) free_.push_back(i);
  }
  // A buffer's lease, or an empty one when the load failed.
  StagingLease acquire(const std::atomic<bool>& failed) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return failed.load() || !free_.empty(); });
    if (failed) return {};
    const size_t i = free_.back();
    free_.pop_back();
    return StagingLease(this, i);
  }
  void wake() {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  }
  StagingBuffer& buffer(size_t i) { return buffers_[i]; }
  size_t free_count() {
    std::lock_guard lock(mu_);
    return free_.size();
  }

 private:
  friend class StagingLease;
  void give_back(size_t i) {
    std::lock_guard lock(mu_);
    free_.push_back(i);
    cv_.notify_one();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<StagingBuffer> buffers_;
  std::vector<size_t> free_;
};

inline StagingBuffer& StagingLease::buffer() const { return pool_->buffer(index_); }
inline void StagingLease::release() {
  if (StagingPool* p = std::exchange(pool_, nullptr)) p->give_back(index_);
}

}  // namespace wmap::exec_detail
