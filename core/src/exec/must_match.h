#pragma once
// Load-time check of ParamSpec::must_match pairs (NVFP4 global scales of fused sources). It reads
// tensor data, so it is the executor's, not the plan's: the plan only names the pairs.

#include <cstdint>
#include <functional>

#include "wmap/io/file_io.h"
#include "wmap/plan/load_plan.h"

namespace wmap {

// Reads the (small) tensors of `param.must_match` and throws kValidation naming both keys and
// their values when a pair differs. `file_for` opens a shard by catalog index.
void verify_must_match(const PlannedParam& param,
                       const std::function<const RandomAccessFile&(uint32_t shard)>& file_for);

}  // namespace wmap
