#pragma once
// Where parameters live. `host` allocates aligned heap memory (first touched by the copy
// itself, so pages are not faulted twice); a CUDA device (built when the toolkit is found,
// docs/cuda.md) allocates device memory and is written through a bounded ring of pinned staging
// buffers with asynchronous copies. Devices are thread-safe: the executor allocates and writes
// from several workers. No CUDA header is needed to use this interface.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "wmap/device/device_spec.h"
#include "wmap/format/dtype.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual uint64_t size() const = 0;
  // Host-addressable bytes, or null for device memory.
  virtual std::byte* host_data() = 0;
  // Device memory (a CUDA device pointer), or null for host memory.
  virtual void* device_data() { return nullptr; }
  // The size of the pages backing host_data() when this buffer allocated them (4096; 2 MiB for a
  // huge-page mapping); 0 for caller-owned or device memory, or when unknown. The executor
  // decides from it whether to fault pages in before writing (ExecOptions::prefault).
  virtual uint64_t page_bytes() const { return 0; }
};

// Host memory standing for device bytes [offset, offset + host.size()) of one buffer, between
// Device::begin_region and end_region (devices that stage writes: see Device::stages_writes).
struct StagedRegion {
  std::span<std::byte> host;
  uint64_t offset = 0;
  // The device's own (a pinned lease or pageable memory): released by end_region, or when the
  // region is dropped without it (a failed load), without copying.
  std::shared_ptr<void> state;
};

class Device {
 public:
  virtual ~Device() = default;
  // What this device is (host, or CUDA and its ordinal): the one answer front ends export
  // (DLPack's device) and report.
  virtual DeviceSpec spec() const = 0;
  std::string name() const { return spec().name(); }  // "host", "cuda:N"
  virtual std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes) = 0;
  // `label` (the parameter name) only names the buffer in errors.
  virtual std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes, const std::string& label) {
    (void)label;
    return allocate(bytes);
  }
  // A buffer over memory the caller owns and keeps alive (host memory for `host`, a device
  // pointer of this device for CUDA): written like an allocated one, never freed. Devices that
  // cannot adopt throw kUnsupported.
  virtual std::shared_ptr<DeviceBuffer> adopt(void* data, uint64_t bytes, const std::string& label);
  // Host memory a worker fills for `buffer` (the buffer itself on the host; staging otherwise).
  virtual std::span<std::byte> begin_write(DeviceBuffer& buffer) = 0;
  // Between begin_write and end_write: offers the named transform of bytes [offset, offset + bytes)
  // to the device; `shape` is the piece's, as the host transform gets it. True: the device runs it
  // itself (a GPU kernel after the copy) and has already checked what must fail on the host;
  // false: the caller runs the host transform now.
  virtual bool defer_transform(DeviceBuffer& buffer, const std::string& transform, uint64_t offset, uint64_t bytes,
                               DType dtype, const std::string& key, std::span<const uint64_t> shape) {
    (void)buffer, (void)transform, (void)offset, (void)bytes, (void)dtype, (void)key, (void)shape;
    return false;
  }
  // Publishes what begin_write() returned into the buffer (a copy for device memory).
  virtual void end_write(DeviceBuffer& buffer, std::span<std::byte> written) = 0;
  // Before anything is allocated: a load will ask for `count` buffers of `bytes` in all. Fails
  // (kValidation) when the device cannot hold them, naming the need and what is free, so a load
  // too large for the device fails in milliseconds, not after its reads. A device may set the
  // memory aside now (CUDA: one arena the following allocate() calls are carved from).
  // Hold the returned handle while allocating: memory set aside and not yet handed out is given
  // back once the handle and every buffer carved from it are gone.
  virtual std::shared_ptr<void> reserve(uint64_t bytes, uint64_t count) {
    (void)bytes, (void)count;
    return nullptr;
  }
  // allocate() from what reserve() returned (null: a plain allocate): each load allocates from
  // its own reservation, so concurrent loads on one device never take each other's memory.
  virtual std::shared_ptr<DeviceBuffer> allocate_reserved(const std::shared_ptr<void>& reservation, uint64_t bytes,
                                                          const std::string& label) {
    (void)reservation;
    return allocate(bytes, label);
  }

  // True when buffers have no host memory and writes are staged region by region (CUDA): the
  // executor then fills each read unit's part of a parameter in a region of its own, copied to
  // the device as soon as it is filled, instead of staging the whole parameter.
  virtual bool stages_writes() const { return false; }
  // Whether defer_transform() runs `transform` on the device (region by region: such transforms
  // are elementwise). Parameters with other transforms are staged whole (begin_write).
  virtual bool can_defer(const std::string& transform) const {
    (void)transform;
    return false;
  }
  // Host memory for device bytes [offset, offset + bytes) of `buffer`; several regions of one
  // buffer may be open at once (from different workers). Devices that do not stage writes hand
  // out the buffer's own memory.
  virtual StagedRegion begin_region(DeviceBuffer& buffer, uint64_t offset, uint64_t bytes);
  // Within an open region: queues the named elementwise transform of device bytes
  // [offset, offset + bytes) after the region's copy (the host bytes are still in region.host
  // for the checks that must fail on the host). False when the device cannot (see can_defer).
  virtual bool defer_transform(StagedRegion& region, const std::string& transform, uint64_t offset, uint64_t bytes,
                               DType dtype, const std::string& key, std::span<const uint64_t> shape) {
    (void)region, (void)transform, (void)offset, (void)bytes, (void)dtype, (void)key, (void)shape;
    return false;
  }
  // Publishes the region (an asynchronous copy for device memory) and releases its staging.
  virtual void end_region(DeviceBuffer& buffer, StagedRegion& region) { (void)buffer, region.state.reset(); }

  // Copies a buffer's bytes to host memory (for --dump and tests), after the writes queued so far.
  virtual void copy_to_host(DeviceBuffer& buffer, std::span<std::byte> dst) = 0;
  // Waits for every queued copy and kernel; errors of asynchronous work surface here.
  virtual void synchronize() {}
  // Before writing memory the caller owns: waits for the work the caller queued on this device
  // (e.g. torch kernels on its own stream still using the tensors), so our copies are ordered
  // after it. Host: nothing to wait for.
  virtual void fence_external() {}
};

// Opens the device. Throws kUnsupported when CUDA is not built in or no such device exists.
std::unique_ptr<Device> make_device(const DeviceSpec& spec);
// The same from a name (DeviceSpec::parse: kInvalidArgument for an unknown one).
std::unique_ptr<Device> make_device(std::string_view spec);

// CUDA devices usable by this process: 0 with `reason` set when none (no CUDA backend in this
// build, no driver, no GPU). For GPU tests and front ends that choose a device.
int cuda_device_count(std::string* reason = nullptr);

}  // namespace wmap
WMAP_PUBLIC_END
