// The one parser of device names.
#include "wmap/device/device_spec.h"

#include "wmap/util/error.h"

namespace wmap {

DeviceSpec DeviceSpec::parse(std::string_view text) {
  if (text == "host" || text == "cpu") return host();
  if (text == "cuda") return {Kind::kCuda, 0, false};
  if (text.starts_with("cuda:")) {
    const std::string_view digits = text.substr(5);
    // At most 6 digits: no machine has a million GPUs, and stoi must not overflow.
    if (!digits.empty() && digits.size() <= 6 && digits.find_first_not_of("0123456789") == std::string_view::npos) {
      return cuda(std::stoi(std::string(digits)));
    }
  }
  throw Error(ErrorCode::kInvalidArgument, "device '" + std::string(text) + "': expected host, cuda or cuda:N");
}

std::string DeviceSpec::name() const { return is_host() ? "host" : "cuda:" + std::to_string(index); }

}  // namespace wmap
