#pragma once
// Which device a load writes to, parsed once (review F1): the CLI's `--device`, the Python
// module's `device=` and a Device's own answer (Device::spec()) are this one type, so nothing
// downstream (the DLPack export, reports) parses a device name a second time. Plain value type.

#include <cstdint>
#include <string>
#include <string_view>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct DeviceSpec {
  enum class Kind : uint8_t { kHost, kCuda };
  Kind kind = Kind::kHost;
  int index = 0;             // the CUDA ordinal
  bool index_given = false;  // "cuda:N" rather than "cuda" (a launcher may then pick the node-local GPU)

  static DeviceSpec host() { return {}; }
  static DeviceSpec cuda(int index) { return {Kind::kCuda, index, true}; }
  // "host" (or "cpu"), "cuda" (device 0 unless a launcher picks another), "cuda:N". Throws
  // kInvalidArgument naming the setting: "device 'gpu': expected host, cuda or cuda:N".
  static DeviceSpec parse(std::string_view text);

  bool is_host() const { return kind == Kind::kHost; }
  bool is_cuda() const { return kind == Kind::kCuda; }
  std::string name() const;  // "host" or "cuda:N"
  bool operator==(const DeviceSpec& o) const { return kind == o.kind && (kind == Kind::kHost || index == o.index); }
};

}  // namespace wmap
WMAP_PUBLIC_END
