#pragma once
// The device an atomic load_into writes through (DestinationOptions::atomic): every parameter
// lands in a host buffer of its own, kept by name, and the caller's destinations are written only
// by commit(), once the whole load (verification included) has succeeded. A load that fails
// leaves the staging to be freed and the destinations as they were.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "wmap/device/device.h"
#include "wmap/exec/destinations.h"

namespace wmap::exec_detail {

class StagingDevice final : public Device {
 public:
  explicit StagingDevice(Device& host) : host_(host) {}
  DeviceSpec spec() const override { return host_.spec(); }
  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes) override { return allocate(bytes, ""); }
  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes, const std::string& label) override;
  std::span<std::byte> begin_write(DeviceBuffer& b) override { return host_.begin_write(b); }
  void end_write(DeviceBuffer& b, std::span<std::byte> written) override { host_.end_write(b, written); }
  void copy_to_host(DeviceBuffer& b, std::span<std::byte> dst) override { host_.copy_to_host(b, dst); }

  uint64_t staged_bytes() const;
  // Copies every staged parameter into its destination (by_name) on `device`, with `workers`
  // threads, then waits for the device. Returns the seconds it took.
  double commit(Device& device, const std::map<std::string, const Destination*>& by_name, unsigned workers);

 private:
  Device& host_;
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, std::shared_ptr<DeviceBuffer>>> staged_;  // (parameter, its bytes)
};

}  // namespace wmap::exec_detail
