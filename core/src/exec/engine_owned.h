#pragma once
// The parameters a target engine holds that no checkpoint tensor fills and that the engine
// initialises itself at construction: "engine-owned". load_into leaves their destinations
// untouched (and reports them), plan --expect accepts them missing from the plan. A parameter the
// engine creates empty (torch.empty) and fills inside its own load_weights is not engine-owned:
// load_into bypasses load_weights, so the plan writes it (spec::ones, zero padding; docs/cli.md
// "Parameters no checkpoint tensor fills" lists both kinds with the engine source of each).
// Internal to the exec stage.

#include <string>
#include <vector>

#include "wmap/plan/load_plan.h"

namespace wmap::exec_detail {

// RE2 patterns (full match) of the engine-owned names of `plan`'s target and format.
std::vector<std::string> engine_owned_patterns(const LoadPlan& plan);

}  // namespace wmap::exec_detail
