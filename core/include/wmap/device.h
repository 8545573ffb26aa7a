#pragma once
// Where parameters live. `host` allocates aligned heap memory (first touched by the copy
// itself, so pages are not faulted twice); a CUDA device (built when the toolkit is found)
// allocates device memory and is written through pinned staging. Devices are thread-safe:
// the executor allocates and writes from several workers.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace wmap {

class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual uint64_t size() const = 0;
  // Host-addressable bytes, or null for device memory.
  virtual std::byte* host_data() = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes) = 0;
  // Host memory a worker fills for `buffer` (the buffer itself on the host; staging otherwise).
  virtual std::span<std::byte> begin_write(DeviceBuffer& buffer) = 0;
  // Publishes what begin_write() returned into the buffer (a copy for device memory).
  virtual void end_write(DeviceBuffer& buffer, std::span<std::byte> written) = 0;
  // Copies a buffer's bytes to host memory (for --dump and tests).
  virtual void copy_to_host(DeviceBuffer& buffer, std::span<std::byte> dst) = 0;
  virtual void synchronize() {}
};

// "host" or "cuda:N". Throws kInvalidArgument for an unknown name, kUnsupported when CUDA is not
// built in or no such device exists.
std::unique_ptr<Device> make_device(const std::string& spec);

}  // namespace wmap
