// CUDA is not part of this build: there is no system runtime, so `--device cuda:N` fails with a
// clear message (the CUDA device itself is built everywhere, and tested through a fake runtime).
#include "cuda_seam.h"

namespace wmap::cuda {

std::shared_ptr<Runtime> system_runtime(std::string* reason) {
  if (reason) *reason = "this wmap was built without the CUDA backend";
  return nullptr;
}

}  // namespace wmap::cuda
