#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "wmap/device/device.h"
#include "wmap/io/file_io.h"
#include "wmap/util/bytes_text.h"
#include "wmap/util/env.h"
#include "wmap/util/error.h"
#include "huge_mapping.h"
#include "logger.h"

namespace wmap {
namespace {

constexpr size_t kAlignment = 64;

class HostBuffer final : public DeviceBuffer {
 public:
  // Caller-owned memory (Device::adopt): never freed here.
  HostBuffer(void* data, uint64_t bytes) : size_(bytes), data_(static_cast<std::byte*>(data)), owned_(false) {}
  explicit HostBuffer(uint64_t bytes) : size_(bytes) {
    if (bytes >= kHugePageBytes && huge_pages_wanted() && (data_ = map_huge(bytes, mapped_)) != nullptr) return;
    mapped_ = 0;
    if (bytes > 0) {
      void* p = nullptr;
      if (::posix_memalign(&p, kAlignment, bytes) != 0) {
        throw Error(ErrorCode::kOutOfMemory,
                    "host: cannot allocate " + std::to_string(bytes) + " bytes (out of memory)");
      }
      data_ = static_cast<std::byte*>(p);
    }
  }
  ~HostBuffer() override {
    if (!owned_) return;
    if (mapped_ > 0) {
      ::munmap(data_, mapped_);
    } else {
      std::free(data_);
    }
  }
  uint64_t size() const override { return size_; }
  std::byte* host_data() override { return data_; }
  uint64_t page_bytes() const override {
    if (!owned_ || !data_) return 0;
    return mapped_ > 0 ? kHugePageBytes : static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  }

 private:
  uint64_t size_;
  std::byte* data_ = nullptr;
  uint64_t mapped_ = 0;  // > 0: data_ is a huge-page mapping of this many bytes (munmap), else heap
  bool owned_ = true;
};

class HostDevice final : public Device {
 public:
  DeviceSpec spec() const override { return DeviceSpec::host(); }
  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes) override { return std::make_shared<HostBuffer>(bytes); }
  std::shared_ptr<DeviceBuffer> adopt(void* data, uint64_t bytes, const std::string&) override {
    return std::make_shared<HostBuffer>(data, bytes);
  }
  // More than the machine's memory cannot load; more than is available now may still (the page
  // cache gives way), so that is a warning.
  std::shared_ptr<void> reserve(uint64_t bytes, uint64_t count) override {
    const uint64_t physical =
        static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const std::string need = bytes_text(bytes) + " for " + std::to_string(count) + " parameters";
    if (physical > 0 && bytes > physical) {
      throw Error(ErrorCode::kValidation, "host: the load needs " + need + " but this machine has " +
                                              bytes_text(physical) + " of memory; nothing was read");
    }
    const uint64_t available = available_memory_bytes();
    if (available > 0 && bytes > available) {
      log().warn("host: the load needs {} but only {} of memory is available now", need, bytes_text(available));
    }
    return nullptr;
  }
  std::span<std::byte> begin_write(DeviceBuffer& b) override { return {b.host_data(), b.size()}; }
  void end_write(DeviceBuffer&, std::span<std::byte>) override {}
  void copy_to_host(DeviceBuffer& b, std::span<std::byte> dst) override {
    if (b.size()) std::memcpy(dst.data(), b.host_data(), std::min<uint64_t>(b.size(), dst.size()));
  }
};

}  // namespace

std::shared_ptr<DeviceBuffer> Device::adopt(void*, uint64_t, const std::string& label) {
  throw Error(ErrorCode::kUnsupported, name() + ": cannot write into caller-owned memory (" + label + ")");
}

StagedRegion Device::begin_region(DeviceBuffer& buffer, uint64_t offset, uint64_t bytes) {
  std::byte* data = buffer.host_data();
  if (!data && bytes > 0) throw Error(ErrorCode::kInternal, name() + ": begin_region on a buffer without host memory");
  return {std::span(data ? data + offset : nullptr, bytes), offset, nullptr};
}

std::unique_ptr<Device> make_cuda_device(int index);  // cuda_device.cc

std::unique_ptr<Device> make_device(const DeviceSpec& spec) {
  if (spec.is_host()) return std::make_unique<HostDevice>();
  return make_cuda_device(spec.index);
}

std::unique_ptr<Device> make_device(std::string_view spec) { return make_device(DeviceSpec::parse(spec)); }

}  // namespace wmap
