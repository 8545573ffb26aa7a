#include "fake_cuda_seam.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <set>
#include <sstream>

#include "block_scale_band.h"
#include "wmap/device/scale_inversion.h"

namespace wmap::test {
namespace {

std::atomic<uint64_t> g_instances{0};
// The current device and the devices a thread has a context on are per thread, as in CUDA;
// keyed by instance so fakes do not share them.
thread_local std::map<uint64_t, int> t_current;
thread_local std::map<uint64_t, std::set<int>> t_contexts;

void* handle(int id) { return reinterpret_cast<void*>(static_cast<uintptr_t>(id)); }
int id_of(void* h) { return static_cast<int>(reinterpret_cast<uintptr_t>(h)); }

std::string hex(const void* p) {
  std::ostringstream o;
  o << p;
  return o.str();
}

}  // namespace

FakeCudaRuntime::FakeCudaRuntime(Options options)
    : options_(options),
      used_(static_cast<size_t>(std::max(options.devices, 0)), 0),
      contexts_(static_cast<size_t>(std::max(options.devices, 0)), false),
      rng_(options.seed) {
  instance_ = ++g_instances;
  worker_ = std::thread([this] { run_queue(); });
}

FakeCudaRuntime::~FakeCudaRuntime() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void FakeCudaRuntime::fail_device_malloc_after(int n) {
  std::lock_guard<std::mutex> lock(mutex_);
  device_malloc_left_ = n;
}

void FakeCudaRuntime::fail_pinned_after(int n) {
  std::lock_guard<std::mutex> lock(mutex_);
  pinned_left_ = n;
}

void FakeCudaRuntime::fail_async_copy_after(int n) {
  std::lock_guard<std::mutex> lock(mutex_);
  async_copy_left_ = n;
}

std::vector<std::string> FakeCudaRuntime::violations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return violations_;
}

FakeCudaRuntime::Counts FakeCudaRuntime::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

int FakeCudaRuntime::current() const {
  auto it = t_current.find(instance_);
  return it == t_current.end() ? 0 : it->second;
}

bool FakeCudaRuntime::context_created(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return contexts_[static_cast<size_t>(device)];
}

void FakeCudaRuntime::touch() {
  t_contexts[instance_].insert(current());
  contexts_[static_cast<size_t>(current())] = true;
}

int FakeCudaRuntime::context_active(bool* active) {
  auto it = t_contexts.find(instance_);
  *active = it != t_contexts.end() && it->second.count(current()) > 0;
  return kSuccess;
}

void FakeCudaRuntime::violation(std::string what) {
  if (violations_.size() < 100) violations_.push_back(std::move(what));
}

FakeCudaRuntime::Allocation* FakeCudaRuntime::device_allocation(const void* p, uint64_t bytes) {
  const auto* b = static_cast<const std::byte*>(p);
  auto it = device_.upper_bound(b);
  if (it == device_.begin()) return nullptr;
  --it;
  if (b < it->first || b + bytes > it->first + it->second.size) return nullptr;
  return &it->second;
}

bool FakeCudaRuntime::pinned(const void* p, uint64_t bytes) const {
  const auto* b = static_cast<const std::byte*>(p);
  auto it = pinned_.upper_bound(b);
  if (it == pinned_.begin()) return false;
  --it;
  return b >= it->first && b + bytes <= it->first + it->second;
}

FakeCudaRuntime::Stream* FakeCudaRuntime::stream_of(cuda::Stream s, const char* call) {
  auto it = streams_.find(id_of(s));
  if (it == streams_.end()) {
    violation(std::string(call) + ": unknown stream " + hex(s));
    return nullptr;
  }
  if (it->second.device != current()) {
    violation(std::string(call) + ": a stream of cuda:" + std::to_string(it->second.device) +
              " used while cuda:" + std::to_string(current()) + " is current");
    return nullptr;
  }
  return &it->second;
}

bool FakeCudaRuntime::queued_write_overlaps(const std::byte* p, uint64_t bytes) const {
  for (const auto& [id, s] : streams_) {
    for (const Op& op : s.ops) {
      if (op.kind == Op::Kind::kEvent) continue;
      const uint64_t n = op.kind == Op::Kind::kCopy ? op.bytes : op.count * (dtype_bits(op.dtype) / 8);
      if (op.dst < p + bytes && p < op.dst + n) return true;
    }
  }
  return false;
}

int FakeCudaRuntime::device_count(int* count) {
  *count = options_.devices;
  return kSuccess;
}

int FakeCudaRuntime::get_device(int* device) {
  *device = current();
  return kSuccess;
}

int FakeCudaRuntime::set_device(int device) {
  if (device < 0 || device >= options_.devices) return kErrorInvalidDevice;
  std::lock_guard<std::mutex> lock(mutex_);
  t_current[instance_] = device;
  touch();
  return kSuccess;
}

int FakeCudaRuntime::mem_get_info(uint64_t* free_bytes, uint64_t* total_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  touch();
  *total_bytes = options_.memory_per_device;
  *free_bytes = options_.memory_per_device - used_[static_cast<size_t>(current())];
  return kSuccess;
}

int FakeCudaRuntime::malloc_device(void** p, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  touch();
  const int d = current();
  ++counts_.device_mallocs;
  if (device_malloc_left_ == 0 || used_[static_cast<size_t>(d)] + bytes > options_.memory_per_device)
    return kErrorMemoryAllocation;
  if (device_malloc_left_ > 0) --device_malloc_left_;
  Allocation a{bytes, d, std::make_unique<std::byte[]>(std::max<uint64_t>(bytes, 1))};
  std::memset(a.bytes.get(), 0xA5, bytes);  // not zero: unwritten bytes show in a bit-exact check
  *p = a.bytes.get();
  used_[static_cast<size_t>(d)] += bytes;
  counts_.device_bytes_live += bytes;
  device_.emplace(a.bytes.get(), std::move(a));
  return kSuccess;
}

int FakeCudaRuntime::free_device(void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = device_.find(static_cast<const std::byte*>(p));
  if (it == device_.end()) {
    violation("cudaFree(" + hex(p) + "): not a device allocation");
    return kErrorInvalidValue;
  }
  if (queued_write_overlaps(it->first, it->second.size))
    violation("cudaFree(" + hex(p) + ") while queued work still writes it");
  used_[static_cast<size_t>(it->second.device)] -= it->second.size;
  counts_.device_bytes_live -= it->second.size;
  device_.erase(it);
  return kSuccess;
}

int FakeCudaRuntime::malloc_pinned(void** p, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  touch();
  ++counts_.pinned_mallocs;
  if (pinned_left_ == 0) return kErrorMemoryAllocation;
  if (pinned_left_ > 0) --pinned_left_;
  auto* b = new std::byte[std::max<uint64_t>(bytes, 1)];
  pinned_.emplace(b, bytes);
  counts_.pinned_bytes_live += bytes;
  *p = b;
  return kSuccess;
}

int FakeCudaRuntime::free_pinned(void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pinned_.find(static_cast<const std::byte*>(p));
  if (it == pinned_.end()) {
    violation("cudaFreeHost(" + hex(p) + "): not a pinned allocation");
    return kErrorInvalidValue;
  }
  for (const auto& [id, s] : streams_) {
    for (const Op& op : s.ops) {
      if (op.kind == Op::Kind::kCopy && op.src >= it->first && op.src < it->first + it->second) {
        violation("cudaFreeHost(" + hex(p) + ") while a queued copy still reads it");
      }
    }
  }
  counts_.pinned_bytes_live -= it->second;
  delete[] it->first;
  pinned_.erase(it);
  return kSuccess;
}

int FakeCudaRuntime::stream_create(cuda::Stream* s) {
  std::lock_guard<std::mutex> lock(mutex_);
  touch();
  const int id = next_handle_++;
  streams_.emplace(id, Stream{current(), {}, false});
  *s = handle(id);
  return kSuccess;
}

int FakeCudaRuntime::stream_destroy(cuda::Stream s) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!stream_of(s, "cudaStreamDestroy")) return kErrorInvalidResourceHandle;
  // As CUDA: queued work still completes.
  changed_.wait(lock, [&] { return streams_[id_of(s)].ops.empty() && !streams_[id_of(s)].running; });
  streams_.erase(id_of(s));
  return kSuccess;
}

int FakeCudaRuntime::stream_synchronize(cuda::Stream s) {
  std::unique_lock<std::mutex> lock(mutex_);
  Stream* st = stream_of(s, "cudaStreamSynchronize");
  if (!st) return kErrorInvalidResourceHandle;
  changed_.wait(lock, [&] { return st->ops.empty() && !st->running; });
  return kSuccess;
}

int FakeCudaRuntime::memcpy_to_device_async(void* dst, const void* src, uint64_t bytes, cuda::Stream s) {
  std::lock_guard<std::mutex> lock(mutex_);
  touch();
  Stream* st = stream_of(s, "cudaMemcpyAsync");
  if (!st) return kErrorInvalidResourceHandle;
  if (async_copy_left_ == 0) return kErrorInvalidValue;
  if (async_copy_left_ > 0) --async_copy_left_;
  Allocation* a = device_allocation(dst, bytes);
  if (!a) {
    violation("cudaMemcpyAsync to [" + hex(dst) + ", +" + std::to_string(bytes) + "): outside any device allocation");
    return kErrorInvalidValue;
  }
  if (a->device != current()) {
    violation("cudaMemcpyAsync to memory of cuda:" + std::to_string(a->device) +
              " while cuda:" + std::to_string(current()) + " is current");
    return kErrorInvalidValue;
  }
  if (!pinned(src, bytes))
    violation("cudaMemcpyAsync from pageable memory " + hex(src) + " (" + std::to_string(bytes) + " bytes)");
  Op op;
  op.kind = Op::Kind::kCopy;
  op.dst = static_cast<std::byte*>(dst);
  op.src = static_cast<const std::byte*>(src);
  op.bytes = bytes;
  op.snapshot.assign(op.src, op.src + bytes);
  st->ops.push_back(std::move(op));
  ++counts_.async_copies;
  changed_.notify_all();
  return kSuccess;
}

int FakeCudaRuntime::memcpy_to_host(void* dst, const void* src, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  touch();
  Allocation* a = device_allocation(src, bytes);
  if (!a || a->device != current()) {
    violation("cudaMemcpy from " + hex(src) +
              ": not device memory of the current device cuda:" + std::to_string(current()));
    return kErrorInvalidValue;
  }
  // The device's streams are non-blocking: a synchronous copy does not wait for them.
  if (queued_write_overlaps(static_cast<const std::byte*>(src), bytes)) {
    violation("cudaMemcpy (device to host) from " + hex(src) + " while queued work still writes it");
  }
  std::memcpy(dst, src, bytes);
  return kSuccess;
}

int FakeCudaRuntime::event_create(cuda::Event* e) {
  std::lock_guard<std::mutex> lock(mutex_);
  touch();
  const int id = next_handle_++;
  events_.emplace(id, Event{current(), 0});
  *e = handle(id);
  return kSuccess;
}

int FakeCudaRuntime::event_record(cuda::Event e, cuda::Stream s) {
  std::lock_guard<std::mutex> lock(mutex_);
  touch();
  auto it = events_.find(id_of(e));
  if (it == events_.end()) return kErrorInvalidResourceHandle;
  Stream* st = stream_of(s, "cudaEventRecord");
  if (!st) return kErrorInvalidResourceHandle;
  if (it->second.device != current()) {
    violation("cudaEventRecord: an event of cuda:" + std::to_string(it->second.device) +
              " while cuda:" + std::to_string(current()) + " is current");
    return kErrorInvalidResourceHandle;
  }
  Op op;
  op.kind = Op::Kind::kEvent;
  op.event = id_of(e);
  st->ops.push_back(std::move(op));
  ++it->second.pending;
  changed_.notify_all();
  return kSuccess;
}

int FakeCudaRuntime::event_query(cuda::Event e) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = events_.find(id_of(e));
  if (it == events_.end()) return kErrorInvalidResourceHandle;
  return it->second.pending == 0 ? kSuccess : kNotReady;
}

int FakeCudaRuntime::event_synchronize(cuda::Event e) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (events_.find(id_of(e)) == events_.end()) return kErrorInvalidResourceHandle;
  changed_.wait(lock, [&] { return events_[id_of(e)].pending == 0; });
  return kSuccess;
}

int FakeCudaRuntime::event_destroy(cuda::Event e) {
  std::lock_guard<std::mutex> lock(mutex_);
  // As CUDA: a destroyed event's pending record still completes; the op just finds it gone.
  return events_.erase(id_of(e)) ? kSuccess : kErrorInvalidResourceHandle;
}

int FakeCudaRuntime::device_synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  touch();
  const int d = current();
  changed_.wait(lock, [&] {
    for (const auto& [id, s] : streams_) {
      if (s.device == d && (!s.ops.empty() || s.running)) return false;
    }
    return true;
  });
  return kSuccess;
}

// A kernel over device bytes [op.dst, op.dst + bytes) of the current device, queued on `s`
// (mutex_ held).
int FakeCudaRuntime::queue_kernel(Op op, uint64_t bytes, cuda::Stream s, const std::string& call) {
  touch();
  Stream* st = stream_of(s, call.c_str());
  if (!st) return kErrorInvalidResourceHandle;
  Allocation* a = device_allocation(op.dst, bytes);
  if (!a || a->device != current()) {
    violation(call + " on " + hex(op.dst) + ": not device memory of the current device");
    return kErrorInvalidValue;
  }
  st->ops.push_back(std::move(op));
  ++counts_.kernels;
  changed_.notify_all();
  return kSuccess;
}

int FakeCudaRuntime::invert_scales_async(void* data, uint64_t count, DType dtype, cuda::Stream s) {
  std::lock_guard<std::mutex> lock(mutex_);
  Op op;
  op.kind = Op::Kind::kKernel;
  op.dst = static_cast<std::byte*>(data);
  op.count = count;
  op.dtype = dtype;
  return queue_kernel(std::move(op), count * (dtype_bits(dtype) / 8), s, "invert_scales launch");
}

int FakeCudaRuntime::block_scale_interleave_async(void* data, uint64_t rows, uint64_t cols, cuda::Stream s) {
  std::lock_guard<std::mutex> lock(mutex_);
  // What the kernel's launch refuses (cuda_kernels.cu), refused here too.
  if (rows % 128 != 0 || cols == 0 || cols % 4 != 0 || 128 * cols > cuda::kMaxSwizzleBandBytes) {
    violation("block_scale_interleave launch over " + std::to_string(rows) + " x " + std::to_string(cols) +
              " bytes: not whole 128-row bands of 4-byte groups within shared memory");
    return kErrorInvalidValue;
  }
  Op op;
  op.kind = Op::Kind::kSwizzle;
  op.dst = static_cast<std::byte*>(data);
  op.count = rows;
  op.cols = cols;
  const int r = queue_kernel(std::move(op), rows * cols, s, "block_scale_interleave launch");
  if (r == kSuccess) {
    ++counts_.swizzle_kernels;
    counts_.swizzled_bytes += rows * cols;
  }
  return r;
}

std::string FakeCudaRuntime::error_text(int code) {
  switch (code) {
    case kSuccess: return "cudaSuccess (no error)";
    case kErrorInvalidValue: return "cudaErrorInvalidValue (invalid argument)";
    case kErrorMemoryAllocation: return "cudaErrorMemoryAllocation (out of memory)";
    case kErrorInvalidDevice: return "cudaErrorInvalidDevice (invalid device ordinal)";
    case kErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle (invalid resource handle)";
    case kNotReady: return "cudaErrorNotReady (device not ready)";
    default: return "cudaError " + std::to_string(code);
  }
}

// The GPU: runs one queued operation at a time, from a random stream that has one, after a
// random delay (outside the lock, so the host keeps queueing and querying meanwhile).
void FakeCudaRuntime::run_queue() {
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<Stream*> ready;
  for (;;) {
    ready.clear();
    for (auto& [id, s] : streams_) {
      if (!s.ops.empty() && !s.running) ready.push_back(&s);
    }
    if (ready.empty()) {
      if (stop_) return;
      changed_.wait(lock);
      continue;
    }
    Stream* s = ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng_)];
    s->running = true;
    const int delay =
        options_.max_delay_us > 0 ? std::uniform_int_distribution<int>(0, options_.max_delay_us)(rng_) : 0;
    Op op = std::move(s->ops.front());
    s->ops.pop_front();
    lock.unlock();
    if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
    lock.lock();
    execute(op);
    s->running = false;
    changed_.notify_all();
  }
}

void FakeCudaRuntime::execute(Op& op) {
  switch (op.kind) {
    case Op::Kind::kCopy:
      // The host must not touch a staging buffer until the copy out of it is fenced.
      if (std::memcmp(op.src, op.snapshot.data(), op.bytes) != 0) {
        violation("pinned staging " + hex(op.src) + " (" + std::to_string(op.bytes) +
                  " bytes) was overwritten before the copy out of it ran (reused before its fence)");
      }
      std::memcpy(op.dst, op.src, op.bytes);
      counts_.copied_bytes += op.bytes;
      return;
    case Op::Kind::kKernel: invert_scales(std::span(op.dst, op.count * (dtype_bits(op.dtype) / 8)), op.dtype); return;
    case Op::Kind::kSwizzle: {
      // The kernel's arithmetic, instantiated on the host: each band read whole, then each of
      // its bytes taken from block_scale_band_source, as one thread block does.
      const uint64_t band = 128 * op.cols;
      std::vector<std::byte> copy(band);
      for (uint64_t at = 0; at < op.count * op.cols; at += band) {
        std::memcpy(copy.data(), op.dst + at, band);
        for (uint64_t d = 0; d < band; ++d) op.dst[at + d] = copy[cuda::block_scale_band_source(d, op.cols)];
      }
      return;
    }
    case Op::Kind::kEvent: {
      auto it = events_.find(op.event);
      if (it != events_.end()) --it->second.pending;
      return;
    }
  }
}

}  // namespace wmap::test
