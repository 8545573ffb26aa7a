#include <cstdlib>
#include <cstring>

#include "wmap/device/device.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

constexpr size_t kAlignment = 64;

class HostBuffer final : public DeviceBuffer {
 public:
  // Caller-owned memory (Device::adopt): never freed here.
  HostBuffer(void* data, uint64_t bytes) : size_(bytes), data_(static_cast<std::byte*>(data)), owned_(false) {}
  explicit HostBuffer(uint64_t bytes) : size_(bytes) {
    if (bytes > 0) {
      void* p = nullptr;
      if (::posix_memalign(&p, kAlignment, bytes) != 0) {
        throw Error(ErrorCode::kIo, "host: cannot allocate " + std::to_string(bytes) + " bytes");
      }
      data_ = static_cast<std::byte*>(p);
    }
  }
  ~HostBuffer() override {
    if (owned_) std::free(data_);
  }
  uint64_t size() const override { return size_; }
  std::byte* host_data() override { return data_; }

 private:
  uint64_t size_;
  std::byte* data_ = nullptr;
  bool owned_ = true;
};

class HostDevice final : public Device {
 public:
  std::string name() const override { return "host"; }
  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes) override { return std::make_shared<HostBuffer>(bytes); }
  std::shared_ptr<DeviceBuffer> adopt(void* data, uint64_t bytes, const std::string&) override {
    return std::make_shared<HostBuffer>(data, bytes);
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

std::unique_ptr<Device> make_cuda_device(int index);  // cuda_device.cc, or a stub that throws

std::unique_ptr<Device> make_device(const std::string& spec) {
  if (spec == "host" || spec == "cpu") return std::make_unique<HostDevice>();
  if (spec.rfind("cuda", 0) == 0) {
    int index = 0;
    if (spec.size() > 4) {
      if (spec[4] != ':' || spec.size() == 5 || spec.size() > 11 || spec.find_first_not_of("0123456789", 5) != std::string::npos) {
        throw Error(ErrorCode::kInvalidArgument, "--device '" + spec + "': expected cuda:N");
      }
      index = std::stoi(spec.substr(5));
    }
    return make_cuda_device(index);
  }
  throw Error(ErrorCode::kInvalidArgument, "--device '" + spec + "': expected host or cuda:N");
}

}  // namespace wmap
