#pragma once
// The keyword arguments of load(), load_into() and plan(), parsed in one place: the layout into
// the core's LayoutOptions and the remote settings into RemoteOptions (whose defaults and
// parsers are written there once); an unknown keyword is a TypeError listing the known ones; a
// negative or absurd count names its keyword.

#include <pybind11/pybind11.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "wmap/device/device_spec.h"
#include "wmap/exec/destinations.h"
#include "wmap/exec/executor.h"
#include "wmap/io/remote.h"
#include "wmap/plan/load_plan.h"
#include "wmap/spec/layout.h"

namespace wmap::python {

namespace py = pybind11;

enum class Entry { kLoad, kLoadInto, kPlan };
std::string entry_name(Entry e);

struct Request {
  std::optional<std::filesystem::path> path, catalog, config, plugin_dir, mappings;
  wmap::LayoutOptions layout;
  wmap::PlanOptions plan;          // max_read_gap
  std::vector<std::string> given;  // the keywords the caller gave
  wmap::DeviceSpec device;
  bool quiet = false, cache = false;
  wmap::DestinationOptions into;  // load_into: ignore=, atomic= (and WMAP_ATOMIC_MAX_BYTES)
  wmap::ExecOptions::Verify verify = wmap::ExecOptions::Verify::kOff;  // verify=True / 'full' / 'best-effort'
  std::optional<std::filesystem::path> manifest;
  bool digests = false;
  // remote={name: value}: RemoteOptions fields over the environment's, read at this call.
  wmap::RemoteOptions remote;
};

// The keywords `e` takes.
std::vector<std::string> keywords(Entry e);
Request parse_request(Entry e, const py::kwargs& kw);
// The keywords a call on a wmap.Plan may give (the plan fixes the checkpoint, layout and storage).
bool allowed_with_a_plan(const std::string& keyword);

}  // namespace wmap::python
