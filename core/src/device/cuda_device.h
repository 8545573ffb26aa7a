#pragma once
// The CUDA device over a runtime (cuda_seam.h): make_device("cuda:N") uses the system runtime;
// tests pass a checking fake and small tunings (a ring smaller than the parameters) to run the
// device's staging logic on the CPU. Private to the device stage and its tests.

#include <cstdint>
#include <memory>

#include "cuda_seam.h"
#include "wmap/device/device.h"
#include "wmap/util/export.h"

namespace wmap {

struct CudaTuning {
  uint64_t slab_bytes = uint64_t{256} << 20;  // pinned staging: most read units fit many times
  uint32_t slabs = 4;                         // at most 1 GiB pinned, allocated when the device opens
  int streams = 4;                            // copies round-robin over them, overlapping the reads
};

// Opens device `index` through `runtime`: its streams and pinned slabs are made here (fewer slabs,
// with a warning, when pinned memory is short). Throws kUnsupported when the device does not exist.
WMAP_API std::unique_ptr<Device> make_cuda_device(int index, std::shared_ptr<cuda::Runtime> runtime,
                                                  const CudaTuning& tuning = {});

}  // namespace wmap
