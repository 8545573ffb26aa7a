#include "py_entry_points.h"

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdio>

#include "dlpack_import.h"
#include "interruptible.h"
#include "py_keywords.h"
#include "py_tensor.h"
#include "wmap/catalog/shard_digests.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/util/log.h"
#include "wmap/util/progress.h"
#include "wmap/util/xxh3.h"

namespace wmap::python {
namespace {

// Plans from the request's checkpoint (or saved catalog and config); Ctrl-C ends it.
Prepared prepare(const Request& r) {
  wmap::LoaderOptions l;
  l.checkpoint = r.path;
  l.catalog_file = r.catalog;
  l.config_file = r.config;
  l.plugin_dir = r.plugin_dir;
  l.mappings_dir = r.mappings;
  l.layout = wmap::layout_from_options(r.layout);  // as the CLI's
  l.progress = !r.quiet;
  l.plan = r.plan;
  l.remote = r.remote;  // the session owns its RemoteFileSystem: nothing remote outlives it
  std::shared_ptr<const wmap::LoaderSession> session;
  {
    py::gil_scoped_release nogil;
    session = std::make_shared<wmap::LoaderSession>(l);
  }
  std::shared_ptr<const wmap::PreparedLoad> prepared =
      interruptible(*session, [&] { return std::shared_ptr<const wmap::PreparedLoad>(session->prepare()); });
  return {std::move(session), std::move(prepared)};
}

// `source`: a checkpoint path (str or os.PathLike; None with catalog=), or a wmap.Plan, which
// already fixes the checkpoint, the layout and the storage settings.
Prepared resolve(Entry e, py::handle source, Request& r) {
  if (py::isinstance<Plan>(source)) {
    for (const auto& k : r.given) {
      if (!allowed_with_a_plan(k)) {
        throw py::type_error(entry_name(e) + ": a wmap.Plan already fixes the checkpoint and the layout; '" + k +
                             "' belongs to wmap.plan()");
      }
    }
    return source.cast<const Plan&>().shared();
  }
  r.path = source.is_none() ? std::nullopt : std::optional(source.cast<std::filesystem::path>());
  return prepare(r);
}

// The CLI's plan report (LoadPlan::report): problems, warnings, verdict on stderr.
void report_plan(const wmap::LoadPlan& plan) {
  const std::string text = plan.report(false);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

wmap::ExecOptions front_end_exec(const Request& r, const wmap::LoaderSession& session,
                                 const wmap::PreparedLoad& prepared) {
  wmap::ExecOptions exec;  // I/O path chosen per checkpoint, as the CLI's default `--io auto`
  exec.read_workers = wmap::worker_count_from_env("WMAP_READ_WORKERS");
  exec.load_workers = wmap::worker_count_from_env("WMAP_LOAD_WORKERS");
  exec.digests = r.digests;
  exec.verify = r.verify;
  if (r.verify != wmap::ExecOptions::Verify::kOff) {
    exec.expected_sha256 = wmap::expected_digests(*prepared.catalog, r.manifest.value_or(std::filesystem::path()),
                                                  r.catalog.value_or(std::filesystem::path()), &session.file_system());
  }
  return exec;
}

// A verified load's shards that did not match, one line each on stderr, and a count (as `wmap load`).
void report_verification(const wmap::LoadStats& s, bool quiet) {
  if (quiet || s.verification.empty()) return;
  size_t ok = 0;
  std::string lines;
  for (const auto& c : s.verification) {
    if (c.status == wmap::ShardCheck::Status::kMatch) {
      ++ok;
    } else {
      lines += "wmap: verify: " + c.line() + "\n";
    }
  }
  lines += "wmap: verify: " + std::to_string(ok) + " of " + std::to_string(s.verification.size()) +
           " shards match their expected SHA-256\n";
  std::fwrite(lines.data(), 1, lines.size(), stderr);
}

// What a load did, the same fields for load and load_into.
py::dict report_dict(const wmap::LoadStats& s, const wmap::PreparedLoad& prepared, const std::string& device) {
  py::module_ json = py::module_::import("json");
  py::dict out;
  out["bytes"] = s.bytes_loaded;
  out["bytes_read"] = s.bytes_read;
  out["reads"] = s.reads;
  out["seconds"] = s.seconds;
  out["gbps"] = s.seconds > 0 ? static_cast<double>(s.bytes_loaded) / s.seconds / 1e9 : 0.0;
  out["device"] = device;
  out["io_path"] = s.io_path;
  out["cache"] = s.cache;
  out["layout"] = layout_dict(prepared.plan->layout());
  out["plan_id"] = prepared.plan->plan_id();
  // What was verified, always: "off" and an empty list when nothing was asked for (review F3).
  out["verified"] = s.verified;
  py::list checks;
  for (const auto& c : s.verification) checks.append(json.attr("loads")(c.json()));
  out["verification"] = checks;
  out["verify_extra_bytes"] = s.verify_extra_bytes;
  return out;
}

}  // namespace

py::object layout_dict(const wmap::Layout& l) { return py::module_::import("json").attr("loads")(l.to_json()); }

std::string problem_line(const wmap::PlanProblem& p) {
  return std::string(wmap::problem_kind_name(p.kind)) + ": " + p.message;
}

// wmap.load: the CLI's `wmap load`, returning the rank's parameters in plan order.
py::tuple load(py::object source, py::kwargs kw) {
  Request r = parse_request(Entry::kLoad, kw);
  const Prepared p = resolve(Entry::kLoad, source, r);
  auto state = std::make_shared<LoadState>();
  state->session = p.session;
  wmap::ExecOptions exec;
  {
    py::gil_scoped_release nogil;
    if (!r.quiet) report_plan(*p.prepared->plan);
    state->device = wmap::make_device(r.device);
    state->device_name = state->device->name();
    state->dl_device = dl_device_of(state->device->spec());
    exec = front_end_exec(r, *p.session, *p.prepared);
  }
  wmap::Progress bar("load", p.prepared->plan->bytes_to_load(), !r.quiet, wmap::Progress::kBytes);
  exec.progress = [&bar](uint64_t done, uint64_t) { bar.update(done); };
  // As `wmap load`: an I/O error while reading tensor data is a load failure, not unusable input.
  wmap::LoadedModel model = interruptible(*p.session, [&] {
    return wmap::run_as_load_failure([&] {
      auto m = p.session->load(*p.prepared, *state->device, exec, r.cache);
      state->device->synchronize();
      return m;
    });
  });
  bar.finish();
  state->read_only = model.stats.cache == "hit" || model.stats.cache == "miss";  // shared with the cache
  report_verification(model.stats, r.quiet);
  std::shared_ptr<const LoadState> shared = state;
  py::dict out;
  for (size_t i = 0; i < model.params.size(); ++i) {
    const auto& param = model.params[i];
    const std::optional<uint64_t> digest = i < model.digests.size() ? std::optional(model.digests[i]) : std::nullopt;
    out[py::str(param.name)] = py::cast(Tensor(param, shared, digest));
  }
  py::dict report = report_dict(model.stats, *p.prepared, state->device_name);
  report["params"] = model.params.size();
  return py::make_tuple(out, report);
}

// wmap.load_into: the plan's parameters written into the caller's tensors (DESIGN.md "Loading
// into an engine's own buffers"); again with the same tensors: a reload in place (refit).
py::dict load_into(py::object source, py::object params, py::kwargs kw) {
  if (!py::hasattr(params, "items"))
    throw py::type_error(
        "wmap.load_into: params must be a mapping name -> tensor (e.g. dict(model.named_parameters()))");
  Request r = parse_request(Entry::kLoadInto, kw);
  std::vector<ImportedDestination> imported;
  for (const auto& item : params.attr("items")()) {
    const auto kv = item.cast<py::tuple>();
    imported.push_back(import_destination(kv[0].cast<std::string>(), kv[1]));
  }
  std::vector<wmap::Destination> dests;
  for (const auto& i : imported) dests.push_back(i.dest);
  const Prepared p = resolve(Entry::kLoadInto, source, r);
  const wmap::DestinationOptions& opts = r.into;
  std::unique_ptr<wmap::Device> device;
  wmap::ExecOptions exec;
  {
    py::gil_scoped_release nogil;
    if (!r.quiet) report_plan(*p.prepared->plan);
    const std::string dev = dests.empty() ? "host" : dests.front().device;
    try {
      device = wmap::make_device(dev);
    } catch (const wmap::Error& e) {
      throw wmap::Error(e.code(), "wmap.load_into: params['" + dests.front().name + "'] is on " + dev +
                                      ", which this process cannot write: " + e.what());
    }
    exec = front_end_exec(r, *p.session, *p.prepared);
  }
  const wmap::LoadIntoReport report = interruptible(*p.session, [&] {
    return wmap::run_as_load_failure([&] { return p.session->load_into(*p.prepared, *device, dests, exec, opts); });
  });
  report_verification(report.stats, r.quiet);
  py::dict out = report_dict(report.stats, *p.prepared, report.device);
  out["params"] = report.params;
  if (r.digests) {
    py::dict d;
    for (const auto& [name, digest] : report.digests) d[py::str(name)] = wmap::xxh3_hex(digest);
    out["digests"] = d;
  }
  out["engine_owned"] = report.engine_owned;
  out["ignored"] = report.ignored;
  out["unfilled"] = report.unfilled;
  out["atomic"] = report.atomic;
  out["staged_bytes"] = report.staged_bytes;
  out["commit_seconds"] = report.commit_seconds;
  return out;
}

// wmap.plan: a rank's validated plan from headers only.
Plan make_plan(py::object source, py::kwargs kw) {
  Request r = parse_request(Entry::kPlan, kw);
  if (py::isinstance<Plan>(source)) throw py::type_error("wmap.plan(): already a wmap.Plan");
  return Plan(resolve(Entry::kPlan, source, r));
}

Plan refresh_plan(const Plan& plan) {
  Prepared fresh = plan.shared();
  fresh.prepared = interruptible(*fresh.session, [&] {
    return std::shared_ptr<const wmap::PreparedLoad>(fresh.session->refresh(*plan.shared().prepared));
  });
  return Plan(std::move(fresh));
}

// wmap.inspect: the text of `wmap inspect --json`, through a RemoteFileSystem of this call's own.
std::string inspect_json(const std::filesystem::path& path) {
  py::gil_scoped_release nogil;
  const wmap::RemoteFileSystem fs;
  wmap::ShardSet set = wmap::discover_shards(path, {.fs = &fs});
  for (const auto& w : set.warnings) wmap::log_warn(w);
  wmap::CatalogBuildOptions build;
  build.fs = &fs;
  return wmap::Catalog::build(set, build).to_json(true);
}

}  // namespace wmap::python
