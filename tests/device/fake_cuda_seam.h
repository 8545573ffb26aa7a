#pragma once
// A checking fake of the CUDA runtime (core/src/device/cuda_seam.h), so the CUDA device's
// staging, chunking, fencing and arena logic runs and is checked on machines without a GPU.
// "Device memory" is host memory; a background thread runs the queued work of every stream:
// in order within a stream, in random order across streams, each after a random delay, so
// copies complete late and out of order. It records as violations what a GPU would turn into
// corruption or errors:
//   - a pinned source changed between its copy's enqueue and the copy (staging reused before
//     its fence), and an asynchronous copy from memory that is not pinned;
//   - a stream, event or device pointer used while another device is current;
//   - a copy or kernel outside any device allocation, a free of something never allocated;
//   - a synchronous read-back of device memory that queued work still writes.
// It also models contexts (context_created): switching a thread to a device creates one there.
// Allocation failures come on demand (fail_device_malloc_after, fail_pinned_after) or from the
// per-device memory size. Thread-safe.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_seam.h"

namespace wmap::test {

class FakeCudaRuntime final : public cuda::Runtime {
 public:
  struct Options {
    int devices = 1;
    uint64_t memory_per_device = uint64_t{1} << 30;
    uint32_t seed = 1;
    int max_delay_us = 200;  // each queued operation waits up to this long before it runs
  };
  static constexpr int kErrorInvalidValue = 1;
  static constexpr int kErrorMemoryAllocation = 2;
  static constexpr int kErrorInvalidDevice = 101;
  static constexpr int kErrorInvalidResourceHandle = 400;

  explicit FakeCudaRuntime(Options options);
  FakeCudaRuntime() : FakeCudaRuntime(Options{}) {}
  ~FakeCudaRuntime() override;

  // The (n+1)-th next device (pinned) allocation fails with kErrorMemoryAllocation, and every
  // one after it; -1: none fails.
  void fail_device_malloc_after(int n);
  void fail_pinned_after(int n);
  // The (n+1)-th next cudaMemcpyAsync fails with kErrorInvalidValue, and every one after it.
  void fail_async_copy_after(int n);

  std::vector<std::string> violations() const;
  // Whether any thread made a context on `device` (cudaSetDevice to it, or a call that needs a
  // context while it was current), as CUDA 12+ does.
  bool context_created(int device) const;
  struct Counts {
    uint64_t device_mallocs = 0, pinned_mallocs = 0, async_copies = 0, kernels = 0;
    uint64_t swizzle_kernels = 0, swizzled_bytes = 0;  // block_scale_interleave launches, and their bytes
    uint64_t device_bytes_live = 0, pinned_bytes_live = 0;
    uint64_t copied_bytes = 0;
  };
  Counts counts() const;

  // cuda::Runtime
  int device_count(int* count) override;
  int get_device(int* device) override;
  int set_device(int device) override;
  int context_active(bool* active) override;
  int mem_get_info(uint64_t* free_bytes, uint64_t* total_bytes) override;
  int malloc_device(void** p, uint64_t bytes) override;
  int free_device(void* p) override;
  int malloc_pinned(void** p, uint64_t bytes) override;
  int free_pinned(void* p) override;
  int stream_create(cuda::Stream* s) override;
  int stream_destroy(cuda::Stream s) override;
  int stream_synchronize(cuda::Stream s) override;
  int memcpy_to_device_async(void* dst, const void* src, uint64_t bytes, cuda::Stream s) override;
  int memcpy_to_host(void* dst, const void* src, uint64_t bytes) override;
  int event_create(cuda::Event* e) override;
  int event_record(cuda::Event e, cuda::Stream s) override;
  int event_query(cuda::Event e) override;
  int event_synchronize(cuda::Event e) override;
  int event_destroy(cuda::Event e) override;
  int device_synchronize() override;
  int invert_scales_async(void* data, uint64_t count, DType dtype, cuda::Stream s) override;
  int block_scale_interleave_async(void* data, uint64_t rows, uint64_t cols, cuda::Stream s) override;
  std::string error_text(int code) override;

 private:
  struct Allocation {
    uint64_t size;
    int device;
    std::unique_ptr<std::byte[]> bytes;
  };
  struct Op {
    enum class Kind { kCopy, kKernel, kSwizzle, kEvent } kind = Kind::kCopy;
    std::byte* dst = nullptr;
    const std::byte* src = nullptr;
    uint64_t bytes = 0;
    std::vector<std::byte> snapshot;  // kCopy: the source as it was when queued
    DType dtype = DType::kF32;
    uint64_t count = 0;
    uint64_t cols = 0;  // kSwizzle: the matrix's columns (count: its rows)
    int event = 0;
  };
  struct Stream {
    int device;
    std::deque<Op> ops;
    bool running = false;  // its head op is being executed
  };
  struct Event {
    int device;
    int pending = 0;  // records queued and not yet reached
  };

  int current() const;
  void touch();                      // the calling thread now has a context on its current device (mutex_ held)
  void violation(std::string what);  // mutex_ held
  Allocation* device_allocation(const void* p, uint64_t bytes);  // containing [p, p + bytes), or null
  bool pinned(const void* p, uint64_t bytes) const;
  Stream* stream_of(cuda::Stream s, const char* call);  // checks it exists and is current's
  int queue_kernel(Op op, uint64_t bytes, cuda::Stream s, const std::string& call);
  bool queued_write_overlaps(const std::byte* p, uint64_t bytes) const;
  void run_queue();
  void execute(Op& op);

  Options options_;
  uint64_t instance_ = 0;  // keys this fake's current device in each thread
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<const std::byte*, Allocation> device_;  // by base address
  std::map<const std::byte*, uint64_t> pinned_;    // base -> size
  std::map<int, Stream> streams_;
  std::map<int, Event> events_;
  int next_handle_ = 1;
  std::vector<uint64_t> used_;  // device bytes per device
  std::vector<bool> contexts_;  // per device: made by some thread
  int device_malloc_left_ = -1, pinned_left_ = -1, async_copy_left_ = -1;
  Counts counts_;
  std::vector<std::string> violations_;
  std::mt19937 rng_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace wmap::test
