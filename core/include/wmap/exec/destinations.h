#pragma once
// Loading into buffers the caller owns (DESIGN.md "Loading into an engine's own buffers"): an
// engine allocates its parameters itself (torch tensors from its own allocator, on its GPU) and
// hands wmap a table of destinations, name -> memory. Before any byte is read the table is
// checked against the plan, every problem at once; then the plan runs exactly as into wmap's own
// buffers (same pieces, fused offsets and device copies), writing each parameter into its
// destination. Calling it again with the same destinations reloads them in place (refit).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wmap/device/device.h"
#include "wmap/exec/executor.h"
#include "wmap/plan/load_plan.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// One caller-owned buffer.
struct Destination {
  std::string name;      // the engine's parameter name
  void* data = nullptr;  // host memory, or a CUDA device pointer
  uint64_t bytes = 0;    // size of the memory at `data`
  std::vector<uint64_t> shape;
  uint32_t element_bytes = 0;  // the caller's element size
  // The caller's dtype when it maps to one of ours: a floating dtype must be the plan's (a float16
  // tensor does not take BF16 bits); an integer one of the element size is a bit container (numpy
  // uint16 for BF16, uint8 for float8). Unset: only the element size is checked.
  std::optional<DType> dtype;
  std::string device = "host";  // "host" or "cuda:N"
  bool contiguous = true;       // dense row-major (a transposed view is not)
};

struct DestinationOptions {
  // RE2 patterns (full match) of destinations the caller fills itself; with the target's
  // engine-owned names (engine_owned_patterns) they are left untouched and reported.
  std::vector<std::string> ignore;
  // All or nothing (a refit that fails half way must not leave old and new weights mixed): the
  // whole load, verification included, runs into host staging buffers, and the destinations are
  // written only once it has succeeded. Refused before any read when the rank's bytes exceed
  // atomic_max_bytes (unset: the memory available now, available_memory_bytes()).
  bool atomic = false;
  std::optional<uint64_t> atomic_max_bytes;
};

// The verdict on a destination table, before anything is read.
struct DestinationCheck {
  std::vector<PlanProblem> problems;      // sorted by key; empty: the load may run
  std::vector<std::string> engine_owned;  // destinations left to the engine (target patterns)
  std::vector<std::string> ignored;       // destinations the caller's `ignore` patterns leave untouched
  // Destinations of planned parameters that will not be written, with why: absent from the
  // checkpoint (optional parameters) or broken (a partial load).
  std::vector<std::string> unfilled;
  std::string device = "host";  // the device every destination is on
  bool ok() const { return problems.empty(); }
  // "destination problems: N" and one line per problem, as the plan's problem lines.
  std::string message() const;
};

// Checks `destinations` against the plan's runnable parameters: each has a destination of its
// name with the same shape and element size, contiguous, large enough, on one device, not
// overlapping another; every destination is filled, except tied aliases (which need none, and if
// given must be their source's memory), engine-owned names, `ignore`d ones and those of absent or
// (partial load) broken parameters, which are reported. Throws kInvalidArgument for a pattern
// that does not compile or that matches a planned parameter (ignore= is for what the plan does
// not fill).
DestinationCheck check_destinations(const LoadPlan& plan, const std::vector<Destination>& destinations,
                                    const DestinationOptions& options = {});

// What a load into destinations did.
struct LoadIntoReport {
  LoadStats stats;
  uint64_t params = 0;                    // destinations written
  std::vector<std::string> engine_owned;  // left untouched
  std::vector<std::string> ignored;
  std::vector<std::string> unfilled;  // "name: why"
  std::string device;
  // ExecOptions::digests: (destination, XXH3-64 of its bytes as written), in plan order.
  std::vector<std::pair<std::string, uint64_t>> digests;
  // DestinationOptions::atomic: the bytes staged, and the time copying them into the
  // destinations took (the load's own time is stats.seconds).
  bool atomic = false;
  uint64_t staged_bytes = 0;
  double commit_seconds = 0;
};

// Checks the table (throws kValidation with DestinationCheck::message() when it fails: nothing is
// read or written), then runs the plan on `device` (which must be the destinations' device),
// each parameter written into its destination (DestinationOptions::atomic: into host staging,
// then copied into the destinations once the whole load succeeded).
LoadIntoReport execute_into(const LoadPlan& plan, Device& device, const std::vector<Destination>& destinations,
                            const ExecOptions& options, const DestinationOptions& dest_options = {});

}  // namespace wmap
WMAP_PUBLIC_END
