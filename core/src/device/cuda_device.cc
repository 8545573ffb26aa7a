// The CUDA device (built when the toolkit is found; cuda_device_stub.cc otherwise). Parameters
// live in cudaMalloc'd memory. A parameter that fits a staging slab is read straight into a
// region of the pinned ring (StagingRing) and copied with one cudaMemcpyAsync; a larger one, or
// one that finds the ring busy, is filled in pageable memory and streamed through the ring in
// quarter-slab chunks. Copies go round-robin over a few streams so they overlap with the reads;
// scale inversions run as kernels on the same stream after their copy. docs/cuda.md.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "cuda_kernels.h"
#include "wmap/device/scale_inversion.h"
#include "staging_ring.h"
#include "wmap/device/device.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

constexpr uint64_t kSlabBytes = uint64_t{256} << 20;  // most parameters fit: read once, copied once
constexpr uint32_t kSlabs = 4;                        // at most 1 GiB pinned
constexpr int kStreams = 4;

std::string cuda_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

// Every CUDA call goes through here: the error names the call, CUDA's words and what it was for.
void check(cudaError_t e, const char* call, const std::string& what) {
  if (e != cudaSuccess) throw Error(ErrorCode::kIo, what + ": " + call + " failed: " + cuda_text(e));
}

class PinnedAllocator final : public StagingRing::SlabAllocator {
 public:
  explicit PinnedAllocator(int device) : device_(device) {}
  std::byte* allocate(uint64_t bytes) override {
    // The calling worker may never have named a device: without this, CUDA would set up a
    // context on device 0 for it.
    check(cudaSetDevice(device_), "cudaSetDevice", "cuda:" + std::to_string(device_));
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc",
          "pinned staging slab of " + std::to_string(bytes) + " bytes");
    return static_cast<std::byte*>(p);
  }
  void free(std::byte* slab) noexcept override { cudaFreeHost(slab); }

 private:
  int device_;
};

class EventFence final : public StagingRing::Fence {
 public:
  // `device`: the load's GPU, made current before every call (a worker thread's current device
  // is 0 until it names one, and a call there would set up a context on GPU 0).
  EventFence(int device, cudaStream_t stream, const std::string& what) : device_(device) {
    check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags", what);
    const cudaError_t e = cudaEventRecord(event_, stream);
    if (e != cudaSuccess) {
      cudaEventDestroy(event_);
      check(e, "cudaEventRecord", what);
    }
  }
  // Not checked here (destructors and the ring's waits cannot report usefully): a failed copy
  // counts as done, and its error, sticky in CUDA, surfaces in synchronize() at the end of the load.
  ~EventFence() override {
    cudaSetDevice(device_);
    cudaEventDestroy(event_);
  }
  bool done() override {
    cudaSetDevice(device_);
    const cudaError_t e = cudaEventQuery(event_);
    if (e != cudaErrorNotReady) return true;
    // "Not ready" is recorded as this thread's last error: clear it, or the next checked
    // launch on this thread (cudaGetLastError) would report it as its own failure.
    (void)cudaGetLastError();
    return false;
  }
  void wait() override {
    cudaSetDevice(device_);
    cudaEventSynchronize(event_);
  }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

class CudaBuffer final : public DeviceBuffer {
 public:
  CudaBuffer(int device, uint64_t bytes, std::string label, std::shared_ptr<StagingRing> ring)
      : device_(device), size_(bytes), label_(std::move(label)), ring_(std::move(ring)) {}
  ~CudaBuffer() override {
    ring_->release(lease_, nullptr);  // a load that failed before end_write
    std::free(pageable_);
    if (data_ && owned_) {
      cudaSetDevice(device_);
      cudaFree(data_);
    }
  }
  uint64_t size() const override { return size_; }
  std::byte* host_data() override { return nullptr; }
  void* device_data() override { return data_; }

  struct Pending {  // a scale inversion queued for after the copy
    uint64_t offset, bytes;
    DType dtype;
  };
  int device_;
  uint64_t size_;
  std::string label_;
  std::shared_ptr<StagingRing> ring_;
  void* data_ = nullptr;
  bool owned_ = true;               // false: the caller's memory (Device::adopt)
  StagingRing::Lease lease_;        // pinned staging, or
  std::byte* pageable_ = nullptr;   // pageable staging, streamed through the ring
  std::vector<Pending> pending_;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index) : index_(index), name_("cuda:" + std::to_string(index)) {
    check(cudaSetDevice(index_), "cudaSetDevice", name_);
    streams_.resize(kStreams);
    for (auto& s : streams_) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", name_);
    ring_ = std::make_shared<StagingRing>(std::make_unique<PinnedAllocator>(index_), kSlabBytes, kSlabs);
  }
  ~CudaDevice() override {
    cudaSetDevice(index_);
    for (auto& s : streams_) cudaStreamSynchronize(s), cudaStreamDestroy(s);
  }

  std::string name() const override { return name_; }
  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes) override { return allocate(bytes, ""); }
  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes, const std::string& label) override {
    auto b = std::make_shared<CudaBuffer>(index_, bytes, label, ring_);
    if (bytes > 0) {
      select();
      check(cudaMalloc(&b->data_, bytes), "cudaMalloc", what(*b) + " (" + std::to_string(bytes) + " bytes)");
    }
    return b;
  }

  std::shared_ptr<DeviceBuffer> adopt(void* data, uint64_t bytes, const std::string& label) override {
    auto b = std::make_shared<CudaBuffer>(index_, bytes, label, ring_);
    b->data_ = data;
    b->owned_ = false;
    return b;
  }

  std::span<std::byte> begin_write(DeviceBuffer& buffer) override {
    auto& b = static_cast<CudaBuffer&>(buffer);
    if (b.size_ == 0) return {};
    select();  // the ring may query fences (CUDA calls) from this worker thread
    b.lease_ = ring_->try_acquire(b.size_);
    if (b.lease_) return {b.lease_.data, b.size_};
    // Larger than a slab, or the ring is held by parameters still being read.
    void* p = nullptr;
    if (::posix_memalign(&p, 4096, b.size_) != 0) {
      throw Error(ErrorCode::kIo, what(b) + ": cannot allocate " + std::to_string(b.size_) + " bytes of host staging");
    }
    b.pageable_ = static_cast<std::byte*>(p);
    return {b.pageable_, b.size_};
  }

  bool defer_transform(DeviceBuffer& buffer, const std::string& transform, uint64_t offset, uint64_t bytes, DType dtype,
                       const std::string& key) override {
    if (transform != "invert_scale" && transform != "invert_scale_strict") return false;
    auto& b = static_cast<CudaBuffer&>(buffer);
    check_scale_dtype(dtype, key);
    // Refused scales fail the load before anything is copied, with the host's message.
    if (transform == "invert_scale_strict") check_scales_positive(std::span(staging(b) + offset, bytes), dtype, key);
    if (!b.pending_.empty() && b.pending_.back().dtype == dtype && b.pending_.back().offset + b.pending_.back().bytes == offset) {
      b.pending_.back().bytes += bytes;  // neighbouring pieces (one per expert): one launch
    } else {
      b.pending_.push_back({offset, bytes, dtype});
    }
    return true;
  }

  void end_write(DeviceBuffer& buffer, std::span<std::byte>) override {
    auto& b = static_cast<CudaBuffer&>(buffer);
    if (b.size_ == 0) return;
    select();
    cudaStream_t stream = streams_[next_stream_++ % streams_.size()];
    auto* dst = static_cast<std::byte*>(b.data_);
    if (b.lease_) {
      check(cudaMemcpyAsync(dst, b.lease_.data, b.size_, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync", what(b));
      // Fenced before the kernels: if a launch fails, the staging is still not reused until the
      // copy out of it is done (the kernels touch device memory only).
      auto fence = std::make_shared<EventFence>(index_, stream, what(b));
      ring_->release(std::exchange(b.lease_, {}), std::move(fence));
      launch_pending(b, stream);
      return;
    }
    // Quarter-slab chunks: the memcpy of one overlaps the copy of the previous, and several
    // workers can stream through the one slab fill leases leave free.
    const uint64_t chunk_bytes = ring_->slab_bytes() / 4;
    for (uint64_t at = 0; at < b.size_;) {
      const uint64_t n = std::min(chunk_bytes, b.size_ - at);
      const StagingRing::Lease chunk = ring_->acquire(n);
      std::shared_ptr<EventFence> fence;
      try {
        std::memcpy(chunk.data, b.pageable_ + at, n);
        check(cudaMemcpyAsync(dst + at, chunk.data, n, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync", what(b));
        fence = std::make_shared<EventFence>(index_, stream, what(b));
      } catch (...) {
        ring_->release(chunk, nullptr);
        throw;
      }
      ring_->release(chunk, std::move(fence));
      at += n;
    }
    launch_pending(b, stream);
    std::free(std::exchange(b.pageable_, nullptr));
  }

  void copy_to_host(DeviceBuffer& buffer, std::span<std::byte> dst) override {
    auto& b = static_cast<CudaBuffer&>(buffer);
    synchronize();
    const uint64_t n = std::min<uint64_t>(b.size_, dst.size());
    if (n) check(cudaMemcpy(dst.data(), b.data_, n, cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)", what(b));
  }

  void fence_external() override {
    select();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", name_ + " (before writing caller-owned memory)");
  }

  void synchronize() override {
    select();
    for (auto& s : streams_) check(cudaStreamSynchronize(s), "cudaStreamSynchronize", name_ + " (queued copies and kernels)");
  }

 private:
  // Worker threads start on device 0: every call names ours first.
  void select() const { check(cudaSetDevice(index_), "cudaSetDevice", name_); }
  std::string what(const CudaBuffer& b) const { return name_ + (b.label_.empty() ? "" : " '" + b.label_ + "'"); }
  static std::byte* staging(CudaBuffer& b) { return b.lease_ ? b.lease_.data : b.pageable_; }

  void launch_pending(CudaBuffer& b, cudaStream_t stream) {
    for (const auto& p : b.pending_) {
      const uint64_t count = p.bytes / (p.dtype == DType::kF32 ? 4 : 2);
      check(cuda::launch_invert_scales(static_cast<std::byte*>(b.data_) + p.offset, count, p.dtype, stream),
            "invert_scales kernel launch", what(b));
    }
    b.pending_.clear();
  }

  int index_;
  std::string name_;
  std::vector<cudaStream_t> streams_;
  std::atomic<size_t> next_stream_{0};
  std::shared_ptr<StagingRing> ring_;
};

}  // namespace

int cuda_device_count(std::string* reason) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (reason) *reason = e != cudaSuccess ? "cudaGetDeviceCount failed: " + cuda_text(e) : "no CUDA device is present";
    return 0;
  }
  return count;
}

std::unique_ptr<Device> make_cuda_device(int index) {
  const std::string flag = "--device cuda:" + std::to_string(index);
  std::string reason;
  const int count = cuda_device_count(&reason);
  if (count == 0) throw Error(ErrorCode::kUnsupported, flag + ": no usable CUDA device (" + reason + "); use --device host");
  if (index >= count) {
    throw Error(ErrorCode::kUnsupported, flag + ": device " + std::to_string(index) + " of " + std::to_string(count) +
                                             " does not exist (this machine has cuda:0 to cuda:" + std::to_string(count - 1) + ")");
  }
  return std::make_unique<CudaDevice>(index);
}

}  // namespace wmap
