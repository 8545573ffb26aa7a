// Loads into caller-owned buffers: the destination table's check and the device that hands the
// executor the caller's memory instead of allocating.
#include "wmap/exec/destinations.h"

#include <algorithm>
#include <map>
#include <memory>

#include "engine_owned.h"
#include "name_patterns.h"
#include "param_table_rules.h"
#include "plan_runner.h"
#include "staging_device.h"
#include "wmap/io/file_io.h"
#include "wmap/util/bytes_text.h"
#include "wmap/util/error.h"

namespace wmap {

std::string DestinationCheck::message() const {
  std::string m =
      "the destinations do not fit the plan (" + std::to_string(problems.size()) + " problem(s)); nothing was written:";
  for (const auto& p : problems) m += "\n" + std::string(problem_kind_name(p.kind)) + ": " + p.message;
  return m;
}

namespace {

// The device the executor writes through: allocate() hands out the caller's memory of that name;
// everything else is the underlying device's.
class DestinationDevice final : public Device {
 public:
  DestinationDevice(Device& inner, const std::map<std::string, const Destination*>& by_name)
      : inner_(inner), by_name_(by_name) {}
  DeviceSpec spec() const override { return inner_.spec(); }
  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes) override { return allocate(bytes, ""); }
  std::shared_ptr<DeviceBuffer> allocate(uint64_t bytes, const std::string& label) override {
    auto it = by_name_.find(label);
    if (it == by_name_.end())
      throw Error(ErrorCode::kInternal, label + ": no destination (the check should have refused the load)");
    return inner_.adopt(it->second->data, bytes, label);
  }
  // Not reserve(): the caller's memory is already there.
  bool stages_writes() const override { return inner_.stages_writes(); }
  bool can_defer(const std::string& transform) const override { return inner_.can_defer(transform); }
  StagedRegion begin_region(DeviceBuffer& b, uint64_t offset, uint64_t bytes) override {
    return inner_.begin_region(b, offset, bytes);
  }
  bool defer_transform(StagedRegion& r, const std::string& transform, uint64_t offset, uint64_t bytes, DType dtype,
                       const std::string& key, std::span<const uint64_t> shape) override {
    return inner_.defer_transform(r, transform, offset, bytes, dtype, key, shape);
  }
  void end_region(DeviceBuffer& b, StagedRegion& r) override { inner_.end_region(b, r); }
  std::span<std::byte> begin_write(DeviceBuffer& b) override { return inner_.begin_write(b); }
  bool defer_transform(DeviceBuffer& b, const std::string& transform, uint64_t offset, uint64_t bytes, DType dtype,
                       const std::string& key, std::span<const uint64_t> shape) override {
    return inner_.defer_transform(b, transform, offset, bytes, dtype, key, shape);
  }
  void end_write(DeviceBuffer& b, std::span<std::byte> written) override { inner_.end_write(b, written); }
  void copy_to_host(DeviceBuffer& b, std::span<std::byte> dst) override { inner_.copy_to_host(b, dst); }
  void synchronize() override { inner_.synchronize(); }

 private:
  Device& inner_;
  const std::map<std::string, const Destination*>& by_name_;
};

// DestinationOptions::atomic: the load into host staging, then (only if it succeeded) the commit
// into the destinations on `device`.
LoadedModel run_staged(const LoadPlan& plan, Device& device, const std::map<std::string, const Destination*>& by_name,
                       const ExecOptions& options, const DestinationOptions& dest_options, LoadIntoReport& report) {
  uint64_t need = 0;
  for (const PlannedParam& p : plan.params()) {
    if (!p.absent && p.alias_of.empty() && by_name.count(p.name)) need += p.nbytes;
  }
  const uint64_t limit = dest_options.atomic_max_bytes.value_or(available_memory_bytes());
  if (need > limit) {
    throw Error(
        ErrorCode::kValidation,
        "atomic load_into stages this rank's " + bytes_text(need) +
            " in host memory before any destination changes, more than " +
            (dest_options.atomic_max_bytes
                 ? "the limit of " + bytes_text(limit) + " (WMAP_ATOMIC_MAX_BYTES)"
                 : "the " + bytes_text(limit) + " of memory available now (WMAP_ATOMIC_MAX_BYTES sets the limit)") +
            ": nothing was read or written; load without atomic, or free memory");
  }
  auto host = make_device(DeviceSpec::host());
  exec_detail::StagingDevice staging(*host);
  ExecOptions run_options = options;
  run_options.name_written_on_failure = false;  // nothing of the caller's is written before the commit
  LoadedModel model;
  try {
    model = exec_detail::PlanRunner(plan, staging, run_options).run();
  } catch (const Error& e) {
    throw Error(e.code(), std::string(e.what()) + " (atomic load_into: no destination was changed)");
  }
  report.staged_bytes = staging.staged_bytes();
  device.fence_external();  // the caller's queued work on its tensors comes first
  try {
    report.commit_seconds =
        staging.commit(device, by_name, options.load_workers ? options.load_workers : default_load_workers());
  } catch (const Error& e) {
    std::vector<std::string> all;
    for (const auto& [name, d] : by_name) all.push_back(name);
    throw PartialWriteError(e.code(),
                            std::string(e.what()) +
                                " (atomic load_into: the load succeeded but copying it into the destinations failed; "
                                "they may hold a mixture)",
                            std::move(all));
  }
  return model;
}

}  // namespace

DestinationCheck check_destinations(const LoadPlan& plan, const std::vector<Destination>& destinations,
                                    const DestinationOptions& options) {
  const exec_detail::NamePatterns owned(exec_detail::engine_owned_patterns(plan), "engine-owned");
  const exec_detail::NamePatterns ignore(options.ignore, "ignore");
  DestinationCheck out;
  auto problem = [&](PlanProblem::Kind kind, const std::string& key, std::string message) {
    out.problems.push_back({kind, key, std::move(message)});
  };
  std::map<std::string, const Destination*> by_name;  // by plain_param_name (torch.compile's prefix dropped)
  for (const Destination& d : destinations) {
    const std::string name = exec_detail::plain_param_name(d.name);
    if (!by_name.emplace(name, &d).second) problem(PlanProblem::Kind::kDestination, name, d.name + ": given twice");
  }
  // The device: every destination on one.
  if (!destinations.empty()) out.device = destinations.front().device;
  for (const Destination& d : destinations) {
    if (d.device != out.device) {
      problem(PlanProblem::Kind::kDestination, d.name,
              d.name + ": on " + d.device + " but '" + destinations.front().name + "' is on " + out.device +
                  " (one device per load)");
    }
  }
  std::map<std::string, const PlannedParam*> planned;
  for (const PlannedParam& p : plan.params()) {
    if (ignore.match(p.name)) {
      throw Error(ErrorCode::kInvalidArgument, "an ignore pattern matches planned parameter '" + p.name +
                                                   "': ignore= is for destinations the plan does not fill");
    }
    if (!p.absent && !p.broken) {
      planned[p.name] = &p;
    } else if (by_name.count(p.name)) {
      out.unfilled.push_back(
          p.name + (p.absent ? ": absent from the checkpoint (an optional parameter)" : ": broken (a partial load)"));
    }
  }
  for (const auto& [name, p] : planned) {
    auto it = by_name.find(name);
    if (!p->alias_of.empty()) {
      // A tied parameter needs no destination; a given one must be its source's memory.
      auto src = by_name.find(p->alias_of);
      if (it != by_name.end() && src != by_name.end() && it->second->data != src->second->data) {
        problem(PlanProblem::Kind::kDestination, name,
                name + ": tied to '" + p->alias_of + "' but given other memory (pass the same tensor, or none)");
      }
      continue;
    }
    if (it == by_name.end()) {
      problem(PlanProblem::Kind::kMissing, name,
              name + ": planned " + shape_text(p->shape) + " " + std::string(dtype_name(p->dtype)) +
                  " but no destination of that name was given");
      continue;
    }
    const Destination& d = *it->second;
    if (d.shape != p->shape) {
      problem(PlanProblem::Kind::kShape, name,
              name + ": destination shape " + shape_text(d.shape) + " but the plan builds " + shape_text(p->shape));
    }
    switch (exec_detail::dtype_fit(p->dtype, d.dtype, d.element_bytes)) {
      case exec_detail::DtypeFit::kFits: break;
      case exec_detail::DtypeFit::kElementSize:
        problem(PlanProblem::Kind::kDtype, name,
                name + ": destination elements of " + std::to_string(d.element_bytes) +
                    " byte(s) but the plan builds " + std::string(dtype_name(p->dtype)) + " (" +
                    std::to_string(dtype_bits(p->dtype) / 8) + " byte(s))");
        break;
      case exec_detail::DtypeFit::kOtherFloat:
        problem(PlanProblem::Kind::kDtype, name,
                name + ": destination is " + std::string(dtype_name(*d.dtype)) + " but the plan builds " +
                    std::string(dtype_name(p->dtype)) + " (no conversion on load)");
        break;
    }
    if (!d.contiguous) {
      problem(PlanProblem::Kind::kDestination, name,
              name + ": destination is not contiguous (a transposed or strided view): pass a contiguous tensor");
    }
    if (d.shape == p->shape && d.bytes < p->nbytes) {  // a wrong shape says it already
      problem(PlanProblem::Kind::kDestination, name,
              name + ": destination holds " + std::to_string(d.bytes) + " bytes, the plan writes " +
                  std::to_string(p->nbytes));
    }
    if (d.data == nullptr && p->nbytes > 0)
      problem(PlanProblem::Kind::kDestination, name, name + ": destination pointer is null");
  }
  // Destinations the plan does not fill.
  for (const auto& [name, d] : by_name) {
    if (planned.count(name)) continue;
    const std::string prefix = name + ": ";  // (a structured binding cannot be captured before C++20 in clang)
    if (std::any_of(out.unfilled.begin(), out.unfilled.end(),
                    [&prefix](const std::string& u) { return u.rfind(prefix, 0) == 0; })) {
      continue;
    }
    if (owned.match(name)) {
      out.engine_owned.push_back(name);
    } else if (ignore.match(name)) {
      out.ignored.push_back(name);
    } else {
      problem(PlanProblem::Kind::kDestination, name,
              name + ": a destination the plan does not fill (not a parameter of " +
                  std::string(target_name(plan.layout().target)) +
                  "'s model for this checkpoint; pass ignore= patterns for parameters you fill yourself)");
    }
  }
  // Overlaps between the written destinations (by address, per device).
  struct Span {
    uintptr_t begin;
    uint64_t bytes;
    const std::string* name;  // the planned parameter's
  };
  std::vector<Span> spans;
  for (const auto& [name, p] : planned) {
    auto it = by_name.find(name);
    if (p->alias_of.empty() && it != by_name.end() && p->nbytes > 0 && it->second->data) {
      spans.push_back({reinterpret_cast<uintptr_t>(it->second->data), p->nbytes, &name});
    }
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i - 1].begin + spans[i - 1].bytes > spans[i].begin) {
      const std::string& name = *spans[i].name;
      problem(PlanProblem::Kind::kDestination, name,
              name + ": overlaps the destination of '" + *spans[i - 1].name + "'");
    }
  }
  std::stable_sort(out.problems.begin(), out.problems.end(),
                   [](const auto& a, const auto& b) { return a.key < b.key; });
  return out;
}

LoadIntoReport execute_into(const LoadPlan& plan, Device& device, const std::vector<Destination>& destinations,
                            const ExecOptions& options, const DestinationOptions& dest_options) {
  plan.require_runnable(options.allow_partial);
  DestinationCheck check = check_destinations(plan, destinations, dest_options);
  if (check.ok() && check.device != device.name()) {
    check.problems.push_back({PlanProblem::Kind::kDestination, destinations.empty() ? "" : destinations.front().name,
                              "the destinations are on " + check.device + " but the load runs on " + device.name()});
  }
  if (!check.ok()) throw Error(ErrorCode::kValidation, check.message());
  std::map<std::string, const Destination*> by_name;
  for (const Destination& d : destinations) by_name.emplace(exec_detail::plain_param_name(d.name), &d);
  LoadIntoReport r;
  LoadedModel model;
  if (dest_options.atomic) {
    r.atomic = true;
    model = run_staged(plan, device, by_name, options, dest_options, r);
  } else {
    DestinationDevice into(device, by_name);
    device.fence_external();  // the caller's queued work on its tensors comes first
    ExecOptions run_options = options;
    run_options.name_written_on_failure = true;  // a failed load leaves the caller's buffers part-written
    model = exec_detail::PlanRunner(plan, into, run_options).run();
    into.synchronize();
  }
  r.stats = std::move(model.stats);
  for (const auto& p : model.params) r.params += by_name.count(p.name);
  for (size_t i = 0; i < model.digests.size(); ++i) {
    if (by_name.count(model.params[i].name)) r.digests.emplace_back(model.params[i].name, model.digests[i]);
  }
  r.engine_owned = std::move(check.engine_owned);
  r.ignored = std::move(check.ignored);
  r.unfilled = std::move(check.unfilled);
  r.device = check.device;
  return r;
}

}  // namespace wmap
