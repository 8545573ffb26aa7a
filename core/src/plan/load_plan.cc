// LoadPlan's entry points and its one-line reports. How a plan is built: plan_builder.cc (with
// plan_geometry.cc); what it guarantees: plan_certificate.cc; the plan as JSON: plan_json.cc.
#include "wmap/plan/load_plan.h"

#include "plan_builder.h"
#include "wmap/util/error.h"

namespace wmap {

std::string_view problem_kind_name(PlanProblem::Kind kind) {
  switch (kind) {
    case PlanProblem::Kind::kSpec: return "spec";
    case PlanProblem::Kind::kMissing: return "missing";
    case PlanProblem::Kind::kShape: return "shape";
    case PlanProblem::Kind::kDtype: return "dtype";
    case PlanProblem::Kind::kUnconsumed: return "unconsumed";
    case PlanProblem::Kind::kCoverage: return "coverage";
    case PlanProblem::Kind::kDestination: return "destination";
  }
  return "?";
}

LoadPlan LoadPlan::build(const ModelSpec& spec, std::shared_ptr<const Catalog> catalog, const RenameTable& renames,
                         const PlanOptions& options) {
  if (!catalog) throw Error(ErrorCode::kInternal, "LoadPlan::build without a catalog");
  const RenamedCatalog renamed = renames.apply(*catalog);
  return build(spec, std::move(catalog), renamed, options);
}

LoadPlan LoadPlan::build(const ModelSpec& spec, std::shared_ptr<const Catalog> catalog, const RenamedCatalog& renamed,
                         const PlanOptions& options) {
  if (!catalog) throw Error(ErrorCode::kInternal, "LoadPlan::build without a catalog");
  LoadPlan plan;
  plan.catalog_ = std::move(catalog);
  PlanBuilder(plan, spec, *plan.catalog_, renamed, options).run();
  return plan;
}

void LoadPlan::require_runnable(bool allow_partial) const {
  if (ok() || allow_partial) return;
  std::string msg = "refusing to load: the plan is incomplete (" + std::to_string(problems_.size()) + " problem(s)):";
  for (const auto& p : problems_) msg += "\n  " + p.message;
  throw Error(ErrorCode::kValidation, msg);
}

uint64_t LoadPlan::bytes_to_load() const {
  uint64_t n = 0;
  for (const auto& p : params_) {
    if (p.alias_of.empty() && !p.absent) n += p.nbytes;
  }
  return n;
}

uint64_t LoadPlan::bytes_to_read() const {
  uint64_t n = 0;
  for (const auto& p : params_) {
    for (const auto& piece : p.pieces) {
      if (piece.record) n += piece.box_bytes();
    }
  }
  return n;
}

std::string LoadPlan::coverage() const {
  size_t loaded = 0, absent = 0;
  for (const auto& p : params_) (p.absent ? absent : loaded)++;
  size_t consumed = 0;
  for (auto r : readers_) consumed += r > 0;
  std::string s = ok() ? "complete" : "INCOMPLETE (" + std::to_string(problems_.size()) + " problem(s))";
  s += ": " + std::to_string(loaded) + " parameters (" + std::to_string(bytes_to_load()) + " bytes) from " +
       std::to_string(consumed) + " of " + std::to_string(catalog_tensors_) + " checkpoint tensors";
  if (ignored_) s += ", " + std::to_string(ignored_) + " ignored";
  if (skipped_) s += ", " + std::to_string(skipped_) + " skipped";
  if (handed_) s += ", " + std::to_string(handed_) + " left to other ranks";
  if (absent) s += ", " + std::to_string(absent) + " optional parameter(s) absent";
  if (!unconsumed_.empty()) s += ", " + std::to_string(unconsumed_.size()) + " unconsumed";
  return s;
}

std::string LoadPlan::report(bool verdict_when_ok) const {
  std::string out;
  for (const auto& p : problems_) out += "wmap: " + std::string(problem_kind_name(p.kind)) + ": " + p.message + "\n";
  for (const auto& w : warnings_) out += "wmap: warning: " + w + "\n";
  if (!ok() || verdict_when_ok) out += "wmap: plan " + coverage() + "\n";
  return out;
}

}  // namespace wmap
