#pragma once
// Pipeline parallelism over a built spec (PipelineSpec): one stage's modules kept, the other
// stages' checkpoint keys left to other ranks (ModelSpec::other_ranks: consumed, never read).
#include <string>

#include "wmap/spec/model_spec.h"

namespace wmap {

// Keeps the modules of stage spec.layout.pp_rank (spec.layout must be the rank's layout). A
// no-op at pp_size 1. Throws kInvalidArgument, each message starting with `who`, when the spec
// does not place its modules (PipelineSpec::layers 0, a module on no stage) or the layout's
// pp_partition does not fit the layers.
void keep_pipeline_stage(ModelSpec& spec, const std::string& who);

}  // namespace wmap
