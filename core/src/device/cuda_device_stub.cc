// CUDA is not part of this build: `--device cuda:N` fails with a clear message.
#include "wmap/device/device.h"
#include "wmap/util/error.h"

namespace wmap {

int cuda_device_count(std::string* reason) {
  if (reason) *reason = "this wmap was built without the CUDA backend";
  return 0;
}

std::unique_ptr<Device> make_cuda_device(int index) {
  throw Error(ErrorCode::kUnsupported, "--device cuda:" + std::to_string(index) +
                                           ": this wmap was built without the CUDA backend; use --device host");
}

}  // namespace wmap
