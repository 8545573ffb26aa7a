#pragma once
// A plan checked against an engine's own parameter list (DESIGN.md: `wmap plan --expect
// PARAMS.json`), offline: no weights, no GPU. The list is what the engine's model holds,
// `{name: {"shape": [...], "dtype": "bfloat16"}}`, dumped once from it (tools/dump_engine_params.py
// for a torch module). Both directions are checked: a planned parameter the engine lacks, an
// engine parameter nothing plans (unless the target lists it as engine-owned), shapes, dtypes.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/plan/load_plan.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct ExpectedParam {
  std::string name;
  std::vector<uint64_t> shape;
  std::string dtype;  // the engine's name: "bfloat16", "torch.float8_e4m3fn", "BF16", ...
};

// Parses the JSON object above; throws kMalformedInput naming `label` and the entry.
std::vector<ExpectedParam> parse_expected_params(std::string_view json, const std::string& label);

// Our dtype for an engine's dtype name (torch's and numpy's names, with or without "torch.", and
// our own); nullopt when unknown.
std::optional<DType> dtype_from_engine_name(std::string_view name);

// Every difference, sorted by name, in load_into's words: `missing` (planned, the engine has no
// such parameter), `destination` (the engine holds it, nothing plans it), `shape`, `dtype`. An engine float8
// parameter held as uint8 bytes (torch before float8) matches F8 by element size; the target's
// engine-owned names (engine_owned_patterns) may be absent from the plan; tied aliases count as
// planned.
std::vector<PlanProblem> check_expected_params(const LoadPlan& plan, const std::vector<ExpectedParam>& expected);

}  // namespace wmap
WMAP_PUBLIC_END
