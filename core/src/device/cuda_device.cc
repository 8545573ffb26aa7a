// The CUDA device, over the runtime seam (cuda_seam.h), so it is built and tested everywhere.
// docs/cuda.md.
// - Memory is decided before any byte is read: reserve() checks the load's total against the
//   device's free memory and takes it as one arena the parameters are carved from (no
//   cudaMalloc/cudaFree per parameter on the load path).
// - Writes are staged region by region (Device::begin_region): a read unit's part of a parameter
//   is read straight into a region of the pinned ring (StagingRing) and copied with one
//   asynchronous copy; a region that finds the ring full is filled in pageable memory (bounded
//   by the read unit) and streamed through the ring in quarter-slab chunks. Only parameters with
//   a transform the GPU cannot run are staged whole (begin_write).
// - Copies go round-robin over a few streams; scale inversions run as kernels on the stream of
//   their copy, after it.
// - Every public call makes this device current for its duration and restores the caller's
//   current device afterwards: an engine in the same process must not find it changed.
#include "cuda_device.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <mutex>
#include <vector>

#include "block_scale_band.h"
#include "staging_ring.h"
#include "wmap/device/scale_inversion.h"
#include "wmap/util/bytes_text.h"
#include "wmap/util/error.h"
#include "logger.h"

namespace wmap {
namespace {

constexpr uint64_t kArenaAlign = 256;  // cudaMalloc's own alignment: kernels and DMA like it

using cuda::Runtime;

// Every runtime call goes through here: the error names the call, CUDA's words and what it was for.
void check(Runtime& rt, int code, const char* call, const std::string& what) {
  if (code != Runtime::kSuccess) throw Error(ErrorCode::kIo, what + ": " + call + " failed: " + rt.error_text(code));
}

uint64_t align_up(uint64_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

// Makes `device` current for a scope and restores the caller's device after it, when the caller
// had one: a thread with no context yet (our workers, a CLI) reports device 0, and switching it
// "back" would create a context on GPU 0 (cudaSetDevice does, since CUDA 12), taking memory from
// another rank's GPU. An engine's thread (torch) has its context and gets its device back.
class CurrentDevice {
 public:
  CurrentDevice(Runtime& rt, int device, const std::string& what) : rt_(rt) {
    check(rt, rt.get_device(&previous_), "cudaGetDevice", what);
    if (previous_ == device) return;
    bool had = false;
    check(rt, rt.context_active(&had), "cuCtxGetCurrent", what);
    check(rt, rt.set_device(device), "cudaSetDevice", what);
    restore_ = had;
  }
  // For destructors: errors cannot be reported there, and a failed switch is sticky anyway.
  CurrentDevice(Runtime& rt, int device) noexcept : rt_(rt) {
    bool had = false;
    if (rt.get_device(&previous_) != Runtime::kSuccess || previous_ == device) return;
    if (rt.context_active(&had) != Runtime::kSuccess) had = false;
    restore_ = rt.set_device(device) == Runtime::kSuccess && had;
  }
  ~CurrentDevice() {
    if (restore_) rt_.set_device(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  Runtime& rt_;
  int previous_ = 0;
  bool restore_ = false;
};

class PinnedAllocator final : public StagingRing::SlabAllocator {
 public:
  PinnedAllocator(std::shared_ptr<Runtime> rt, std::string name) : rt_(std::move(rt)), name_(std::move(name)) {}
  std::byte* allocate(uint64_t bytes) override {
    void* p = nullptr;
    check(*rt_, rt_->malloc_pinned(&p, bytes), "cudaHostAlloc",
          name_ + ": pinned staging slab of " + bytes_text(bytes));
    return static_cast<std::byte*>(p);
  }
  void free(std::byte* slab) noexcept override { rt_->free_pinned(slab); }

 private:
  std::shared_ptr<Runtime> rt_;
  std::string name_;
};

// Done when the copies queued on its stream before it are.
class EventFence final : public StagingRing::Fence {
 public:
  EventFence(std::shared_ptr<Runtime> rt, int device, cuda::Stream stream, const std::string& what)
      : rt_(std::move(rt)), device_(device) {
    CurrentDevice on(*rt_, device_, what);
    check(*rt_, rt_->event_create(&event_), "cudaEventCreateWithFlags", what);
    const int e = rt_->event_record(event_, stream);
    if (e != Runtime::kSuccess) {
      rt_->event_destroy(event_);
      check(*rt_, e, "cudaEventRecord", what);
    }
  }
  // Not checked here (destructors and the ring's waits cannot report usefully): a failed copy
  // counts as done, and its error, sticky in CUDA, surfaces in synchronize() at the end of the load.
  ~EventFence() override {
    CurrentDevice on(*rt_, device_);
    rt_->event_destroy(event_);
  }
  bool done() override {
    CurrentDevice on(*rt_, device_);
    const int e = rt_->event_query(event_);
    if (e != Runtime::kNotReady) return true;
    rt_->clear_last_error();
    return false;
  }
  void wait() override {
    CurrentDevice on(*rt_, device_);
    rt_->event_synchronize(event_);
  }

 private:
  std::shared_ptr<Runtime> rt_;
  int device_;
  cuda::Event event_ = nullptr;
};

// One load's parameters: a single allocation, carved by a bump pointer, freed when the load's
// reservation and every buffer carved from it are gone.
class Arena {
 public:
  Arena(std::shared_ptr<Runtime> rt, int device, void* base, uint64_t size)
      : rt_(std::move(rt)), device_(device), base_(base), size_(size) {}
  ~Arena() {
    CurrentDevice on(*rt_, device_);
    rt_->free_device(base_);
  }
  void* carve(uint64_t bytes) {
    const uint64_t need = align_up(bytes);
    uint64_t at = used_.load();
    do {
      if (at + need > size_) return nullptr;
    } while (!used_.compare_exchange_weak(at, at + need));
    return static_cast<std::byte*>(base_) + at;
  }

 private:
  std::shared_ptr<Runtime> rt_;
  int device_;
  void* base_;
  uint64_t size_;
  std::atomic<uint64_t> used_{0};
};

class CudaBuffer final : public DeviceBuffer {
 public:
  CudaBuffer(std::shared_ptr<Runtime> rt, int device, uint64_t bytes, std::string label)
      : rt_(std::move(rt)), device_(device), size_(bytes), label_(std::move(label)) {}
  ~CudaBuffer() override {
    whole_.state.reset();  // a load that failed before end_write
    if (data_ && owned_ && !arena_) {
      CurrentDevice on(*rt_, device_);
      rt_->free_device(data_);
    }
  }
  uint64_t size() const override { return size_; }
  std::byte* host_data() override { return nullptr; }
  void* device_data() override { return data_; }

  std::shared_ptr<Runtime> rt_;
  int device_;
  uint64_t size_;
  std::string label_;
  void* data_ = nullptr;
  bool owned_ = true;             // false: the caller's memory (Device::adopt)
  std::shared_ptr<Arena> arena_;  // set when carved from one
  StagedRegion whole_;            // begin_write .. end_write
};

// A region's staging: a pinned lease (the region is read straight into it), or pageable memory
// streamed through the ring at end_region. Dropped without end_region (a failed load), it gives
// the staging back without copying.
struct RegionState {
  struct Pending {  // a kernel queued for after the copy: a scale inversion, or a swizzle (cols > 0)
    uint64_t offset, bytes;
    DType dtype;
    uint64_t cols = 0;
  };
  std::shared_ptr<StagingRing> ring;
  StagingRing::Lease lease;
  std::byte* pageable = nullptr;
  std::vector<Pending> pending;
  ~RegionState() {
    ring->release(lease, nullptr);
    std::free(pageable);
  }
};

bool is_invert_scale(const std::string& transform) {
  return transform == "invert_scale" || transform == "invert_scale_strict";
}

// The [rows, cols] geometry of a 128x4 swizzle the kernel takes (rows a multiple of 128, a band
// within shared memory); 0 when the host transform must run (and name what does not fit).
uint64_t swizzle_cols(const std::string& transform, uint64_t bytes, std::span<const uint64_t> shape) {
  if (transform != "block_scale_interleave_128x4" || shape.empty()) return 0;
  const uint64_t cols = shape.back();
  if (cols == 0 || cols % 4 != 0 || bytes % cols != 0 || (bytes / cols) % 128 != 0) return 0;
  return 128 * cols <= cuda::kMaxSwizzleBandBytes ? cols : 0;
}

class CudaDevice final : public Device {
 public:
  CudaDevice(int index, std::shared_ptr<Runtime> rt, const CudaTuning& tuning)
      : rt_(std::move(rt)), index_(index), name_("cuda:" + std::to_string(index)) {
    CurrentDevice on(*rt_, index_, name_);
    streams_.resize(static_cast<size_t>(std::max(tuning.streams, 1)), nullptr);
    try {
      for (auto& s : streams_) check(*rt_, rt_->stream_create(&s), "cudaStreamCreateWithFlags", name_);
      open_ring(tuning);
    } catch (...) {
      destroy_streams();  // no destructor runs for a constructor that throws
      throw;
    }
  }
  ~CudaDevice() override {
    CurrentDevice on(*rt_, index_);
    destroy_streams();
  }

  DeviceSpec spec() const override { return DeviceSpec::cuda(index_); }
  bool stages_writes() const override { return true; }
  bool can_defer(const std::string& transform) const override { return is_invert_scale(transform); }

  std::shared_ptr<void> reserve(uint64_t bytes, uint64_t count) override {
    if (bytes == 0) return nullptr;
    CurrentDevice on(*rt_, index_, name_);
    uint64_t need = 0;  // every buffer starts aligned
    if (__builtin_mul_overflow(count, kArenaAlign, &need) || __builtin_add_overflow(need, bytes, &need)) {
      throw Error(ErrorCode::kValidation,
                  name_ + ": the load's " + std::to_string(count) + " parameters need more than 2^64 bytes");
    }
    uint64_t free_bytes = 0, total_bytes = 0;
    check(*rt_, rt_->mem_get_info(&free_bytes, &total_bytes), "cudaMemGetInfo", name_);
    const std::string what = bytes_text(bytes) + " for " + std::to_string(count) + " parameters";
    if (need > free_bytes) {
      throw Error(ErrorCode::kValidation, name_ + ": the load needs " + what + " but only " + bytes_text(free_bytes) +
                                              " of " + bytes_text(total_bytes) +
                                              " is free on the device; nothing was read");
    }
    void* base = nullptr;
    check(*rt_, rt_->malloc_device(&base, need), "cudaMalloc", name_ + ": the load's parameters (" + what + ")");
    return std::make_shared<Arena>(rt_, index_, base, need);
  }

  // `reservation`: what this device's reserve() returned.
  std::shared_ptr<DeviceBuffer> allocate_reserved(const std::shared_ptr<void>& reservation, uint64_t bytes,
                                                  const std::string& label) override {
    if (reservation && bytes > 0) {
      auto arena = std::static_pointer_cast<Arena>(reservation);
      if (void* p = arena->carve(bytes)) {
        auto b = std::make_shared<CudaBuffer>(rt_, index_, bytes, label);
        b->data_ = p;
        b->arena_ = std::move(arena);
        return b;
      }
    }
    return allocate(bytes, label);  // more than was reserved
  }

  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes) override { return allocate(bytes, ""); }
  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes, const std::string& label) override {
    auto b = std::make_shared<CudaBuffer>(rt_, index_, bytes, label);
    if (bytes == 0) return b;
    CurrentDevice on(*rt_, index_, name_);
    check(*rt_, rt_->malloc_device(&b->data_, bytes), "cudaMalloc", what(*b) + " (" + bytes_text(bytes) + ")");
    return b;
  }

  std::shared_ptr<DeviceBuffer> adopt(void* data, uint64_t bytes, const std::string& label) override {
    auto b = std::make_shared<CudaBuffer>(rt_, index_, bytes, label);
    b->data_ = data;
    b->owned_ = false;
    return b;
  }

  StagedRegion begin_region(DeviceBuffer& buffer, uint64_t offset, uint64_t bytes) override {
    auto& b = static_cast<CudaBuffer&>(buffer);
    if (offset > b.size_ || bytes > b.size_ - offset) {
      throw Error(ErrorCode::kInternal, what(b) + ": region [" + std::to_string(offset) + ", +" +
                                            std::to_string(bytes) + ") outside its " + std::to_string(b.size_) +
                                            " bytes");
    }
    auto state = std::make_shared<RegionState>();
    state->ring = ring_;
    if (bytes == 0) return {{}, offset, state};
    CurrentDevice on(*rt_, index_, name_);  // the ring may query fences (runtime calls)
    state->lease = ring_->try_acquire(bytes);
    if (state->lease) return {std::span(state->lease.data, bytes), offset, state};
    // Larger than a slab, or the ring is held by regions still being filled.
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, bytes) != 0) {
      throw Error(ErrorCode::kIo, what(b) + ": cannot allocate " + bytes_text(bytes) + " of host staging");
    }
    state->pageable = static_cast<std::byte*>(p);
    return {std::span(state->pageable, bytes), offset, state};
  }

  bool defer_transform(StagedRegion& region, const std::string& transform, uint64_t offset, uint64_t bytes, DType dtype,
                       const std::string& key, std::span<const uint64_t> /*shape*/) override {
    if (!is_invert_scale(transform)) return false;  // a swizzle only over a whole buffer: see below
    auto& state = *static_cast<RegionState*>(region.state.get());
    check_scale_dtype(dtype, key);
    check_inside(region, offset, bytes, key);
    // Refused scales fail the load before anything is copied, with the host's message.
    if (transform == "invert_scale_strict")
      check_scales_positive(region.host.subspan(offset - region.offset, bytes), dtype, key);
    auto& pending = state.pending;
    if (!pending.empty() && !pending.back().cols && pending.back().dtype == dtype &&
        pending.back().offset + pending.back().bytes == offset) {
      pending.back().bytes += bytes;  // neighbouring pieces (one per expert): one launch
    } else {
      pending.push_back({offset, bytes, dtype});
    }
    return true;
  }

  void end_region(DeviceBuffer& buffer, StagedRegion& region) override {
    auto& b = static_cast<CudaBuffer&>(buffer);
    std::shared_ptr<void> keep = std::move(region.state);
    auto& state = *static_cast<RegionState*>(keep.get());
    const uint64_t n = region.host.size();
    if (n == 0) return;
    CurrentDevice on(*rt_, index_, name_);
    cuda::Stream stream = streams_[next_stream_++ % streams_.size()];
    auto* dst = static_cast<std::byte*>(b.data_) + region.offset;
    if (state.lease) {
      check(*rt_, rt_->memcpy_to_device_async(dst, state.lease.data, n, stream), "cudaMemcpyAsync", what(b));
      // Fenced before the kernels: if a launch fails, the staging is still not reused until the
      // copy out of it is done (the kernels touch device memory only). The fence is made before
      // the lease leaves `state`, so a failure to make it still gives the lease back.
      auto fence = fence_after(stream, b);
      ring_->release(std::exchange(state.lease, {}), std::move(fence));
    } else {
      stream_pageable(b, state.pageable, dst, n, stream);
    }
    for (const auto& p : state.pending) {
      if (p.cols) {
        check(*rt_,
              rt_->block_scale_interleave_async(static_cast<std::byte*>(b.data_) + p.offset, p.bytes / p.cols, p.cols,
                                                stream),
              "block_scale_interleave kernel launch", what(b));
        continue;
      }
      const uint64_t count = p.bytes / (p.dtype == DType::kF32 ? 4 : 2);
      check(*rt_, rt_->invert_scales_async(static_cast<std::byte*>(b.data_) + p.offset, count, p.dtype, stream),
            "invert_scales kernel launch", what(b));
    }
    state.pending.clear();
  }

  static void check_inside(const StagedRegion& region, uint64_t offset, uint64_t bytes, const std::string& key) {
    if (offset < region.offset || offset + bytes > region.offset + region.host.size()) {
      throw Error(ErrorCode::kInternal, key + ": transform of [" + std::to_string(offset) + ", +" +
                                            std::to_string(bytes) + ") outside its staged region");
    }
  }

  // The whole buffer as one region (parameters with a transform the GPU cannot run region by
  // region: the 128x4 swizzle moves bytes across a band, which a region may cut).
  std::span<std::byte> begin_write(DeviceBuffer& buffer) override {
    auto& b = static_cast<CudaBuffer&>(buffer);
    b.whole_ = begin_region(b, 0, b.size_);
    return b.whole_.host;
  }
  bool defer_transform(DeviceBuffer& buffer, const std::string& transform, uint64_t offset, uint64_t bytes, DType dtype,
                       const std::string& key, std::span<const uint64_t> shape) override {
    auto& b = static_cast<CudaBuffer&>(buffer);
    if (!b.whole_.state) return false;
    // The swizzle after the raw copy, as a kernel: DESIGN.md's "transforms on the GPU where they
    // are cheap" (issue 42); a geometry the kernel does not take stays on the host.
    if (const uint64_t cols = swizzle_cols(transform, bytes, shape)) {
      check_inside(b.whole_, offset, bytes, key);
      static_cast<RegionState*>(b.whole_.state.get())->pending.push_back({offset, bytes, DType::kU8, cols});
      return true;
    }
    return defer_transform(b.whole_, transform, offset, bytes, dtype, key, shape);
  }
  void end_write(DeviceBuffer& buffer, std::span<std::byte>) override {
    auto& b = static_cast<CudaBuffer&>(buffer);
    if (b.whole_.state) end_region(b, b.whole_);
  }

  void copy_to_host(DeviceBuffer& buffer, std::span<std::byte> dst) override {
    auto& b = static_cast<CudaBuffer&>(buffer);
    synchronize();
    const uint64_t n = std::min<uint64_t>(b.size_, dst.size());
    if (n == 0) return;
    CurrentDevice on(*rt_, index_, name_);
    check(*rt_, rt_->memcpy_to_host(dst.data(), b.data_, n), "cudaMemcpy (device to host)", what(b));
  }

  void fence_external() override {
    CurrentDevice on(*rt_, index_, name_);
    check(*rt_, rt_->device_synchronize(), "cudaDeviceSynchronize", name_ + " (before writing caller-owned memory)");
  }

  void synchronize() override {
    CurrentDevice on(*rt_, index_, name_);
    for (auto& s : streams_)
      check(*rt_, rt_->stream_synchronize(s), "cudaStreamSynchronize", name_ + " (queued copies and kernels)");
  }

 private:
  std::string what(const CudaBuffer& b) const { return name_ + (b.label_.empty() ? "" : " '" + b.label_ + "'"); }

  void destroy_streams() noexcept {
    for (auto& s : streams_) {
      if (s) rt_->stream_synchronize(s), rt_->stream_destroy(s);
      s = nullptr;
    }
  }

  // Pinned when the device opens, not inside a timed load. Short of pinned memory, fewer (or
  // smaller) slabs: slower, but the load runs. At least two when possible: with one, fill leases
  // never fit (one slab stays for chunks) and every region goes through pageable memory.
  void open_ring(const CudaTuning& tuning) {
    const uint32_t want = std::max<uint32_t>(tuning.slabs, 1), enough = std::min<uint32_t>(want, 2);
    std::string error;
    std::shared_ptr<StagingRing> single;  // a one-slab ring, if nothing better is found
    for (uint64_t slab = tuning.slab_bytes; slab >= (uint64_t{1} << 16); slab /= 4) {
      auto ring = std::make_shared<StagingRing>(std::make_unique<PinnedAllocator>(rt_, name_), slab, want);
      const uint32_t got = ring->preallocate(&error);
      if (got >= enough) {
        if (got < want || slab != tuning.slab_bytes) {
          log().warn("{}: pinned {} staging slab(s) of {} instead of {} of {} ({}); loads may be slower", name_, got,
                     bytes_text(slab), want, bytes_text(tuning.slab_bytes), error);
        }
        ring_ = std::move(ring);
        return;
      }
      if (got == 1 && !single) single = std::move(ring);
    }
    if (!single) throw Error(ErrorCode::kIo, name_ + ": cannot pin any host staging memory: " + error);
    log().warn(
        "{}: pinned only one staging slab of {} ({}): every region is staged in pageable memory and copied "
        "through it; loads will be slower",
        name_, bytes_text(single->slab_bytes()), error);
    ring_ = std::move(single);
  }

  // Published to the ring with the staging it releases: if the fence cannot be made, the copy is
  // waited for here instead, so the staging is never reused under a copy still reading it.
  std::shared_ptr<StagingRing::Fence> fence_after(cuda::Stream stream, const CudaBuffer& b) {
    try {
      return std::make_shared<EventFence>(rt_, index_, stream, what(b));
    } catch (...) {
      rt_->stream_synchronize(stream);
      throw;
    }
  }

  // Quarter-slab chunks: the memcpy of one overlaps the copy of the previous, and several
  // workers can stream through the one slab fill leases leave free.
  void stream_pageable(const CudaBuffer& b, const std::byte* src, std::byte* dst, uint64_t n, cuda::Stream stream) {
    const uint64_t chunk_bytes = std::max<uint64_t>(ring_->slab_bytes() / 4, 1);
    for (uint64_t at = 0; at < n;) {
      const uint64_t len = std::min(chunk_bytes, n - at);
      const StagingRing::Lease chunk = ring_->acquire(len);
      std::shared_ptr<StagingRing::Fence> fence;
      try {
        std::memcpy(chunk.data, src + at, len);
        check(*rt_, rt_->memcpy_to_device_async(dst + at, chunk.data, len, stream), "cudaMemcpyAsync", what(b));
        fence = fence_after(stream, b);
      } catch (...) {
        ring_->release(chunk, nullptr);
        throw;
      }
      ring_->release(chunk, std::move(fence));
      at += len;
    }
  }

  std::shared_ptr<Runtime> rt_;
  int index_;
  std::string name_;
  std::vector<cuda::Stream> streams_;
  std::atomic<size_t> next_stream_{0};
  std::shared_ptr<StagingRing> ring_;
};

}  // namespace

namespace {
std::mutex g_runtime_mutex;
std::shared_ptr<Runtime> g_runtime_override;  // cuda::set_process_runtime (tests)

std::shared_ptr<Runtime> process_runtime(std::string* reason) {
  {
    std::lock_guard lock(g_runtime_mutex);
    if (g_runtime_override) return g_runtime_override;
  }
  return cuda::system_runtime(reason);
}
}  // namespace

void cuda::set_process_runtime(std::shared_ptr<Runtime> runtime) {
  std::lock_guard lock(g_runtime_mutex);
  g_runtime_override = std::move(runtime);
}

std::unique_ptr<Device> make_cuda_device(int index, std::shared_ptr<cuda::Runtime> runtime, const CudaTuning& tuning) {
  const std::string flag = "device cuda:" + std::to_string(index);
  int count = 0;
  const int e = runtime->device_count(&count);
  if (e != Runtime::kSuccess || count == 0) {
    const std::string reason =
        e != Runtime::kSuccess ? "cudaGetDeviceCount failed: " + runtime->error_text(e) : "no CUDA device is present";
    throw Error(ErrorCode::kUnsupported, flag + ": no usable CUDA device (" + reason + "); load onto host instead");
  }
  if (index >= count) {
    throw Error(ErrorCode::kUnsupported,
                flag + ": device " + std::to_string(index) + " of " + std::to_string(count) +
                    " does not exist (this machine has cuda:0 to cuda:" + std::to_string(count - 1) + ")");
  }
  return std::make_unique<CudaDevice>(index, std::move(runtime), tuning);
}

std::unique_ptr<Device> make_cuda_device(int index) {
  std::string reason;
  auto runtime = process_runtime(&reason);
  if (!runtime) {
    throw Error(ErrorCode::kUnsupported,
                "device cuda:" + std::to_string(index) + ": " + reason + "; load onto host instead");
  }
  return make_cuda_device(index, std::move(runtime));
}

int cuda_device_count(std::string* reason) {
  auto runtime = process_runtime(reason);
  if (!runtime) return 0;
  int count = 0;
  const int e = runtime->device_count(&count);
  if (e != Runtime::kSuccess || count == 0) {
    if (reason)
      *reason =
          e != Runtime::kSuccess ? "cudaGetDeviceCount failed: " + runtime->error_text(e) : "no CUDA device is present";
    return 0;
  }
  return count;
}

}  // namespace wmap
