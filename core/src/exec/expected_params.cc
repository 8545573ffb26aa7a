// `wmap plan --expect`: the plan against an engine's parameter list.
#include "wmap/exec/expected_params.h"

#include <simdjson.h>

#include <algorithm>
#include <map>

#include "engine_owned.h"
#include "name_patterns.h"
#include "param_table_rules.h"
#include "wmap/exec/destinations.h"
#include "wmap/util/error.h"

namespace wmap {

namespace {

[[noreturn]] void malformed(const std::string& label, const std::string& what) {
  throw Error(ErrorCode::kMalformedInput,
              label + ": " + what + " (expected {\"name\": {\"shape\": [..], \"dtype\": \"bfloat16\"}, ...})");
}

}  // namespace

std::optional<DType> dtype_from_engine_name(std::string_view name) {
  if (auto d = dtype_from_torch_name(name)) return *d;
  if (auto d = parse_dtype(name)) return *d;  // our own names: BF16, F8_E4M3, ...
  return std::nullopt;
}

std::vector<ExpectedParam> parse_expected_params(std::string_view json, const std::string& label) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(json);
  simdjson::dom::element root;
  if (auto err = parser.parse(text).get(root))
    malformed(label, std::string("not JSON: ") + simdjson::error_message(err));
  simdjson::dom::object obj;
  if (root.get(obj)) malformed(label, "not a JSON object");
  std::vector<ExpectedParam> out;
  for (auto field : obj) {
    ExpectedParam p;
    p.name = std::string(field.key);
    simdjson::dom::array shape;
    std::string_view dtype;
    if (field.value["shape"].get(shape) || field.value["dtype"].get(dtype)) {
      malformed(label, "'" + p.name + "' needs \"shape\" (a list of integers) and \"dtype\" (a string)");
    }
    for (auto d : shape) {
      int64_t v;
      if (d.get(v) || v < 0) malformed(label, "'" + p.name + "': shape entries must be non-negative integers");
      p.shape.push_back(static_cast<uint64_t>(v));
    }
    p.dtype = std::string(dtype);
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<PlanProblem> check_expected_params(const LoadPlan& plan, const std::vector<ExpectedParam>& expected) {
  const exec_detail::NamePatterns owned(exec_detail::engine_owned_patterns(plan), "engine-owned");
  std::vector<PlanProblem> out;
  std::map<std::string, const ExpectedParam*> engine;  // by plain_param_name (torch.compile's prefix dropped)
  for (const auto& e : expected) engine[exec_detail::plain_param_name(e.name)] = &e;
  std::map<std::string, const PlannedParam*> planned;
  for (const PlannedParam& p : plan.params()) {
    if (!p.absent) planned[p.name] = &p;
  }
  for (const auto& [name, p] : planned) {
    auto it = engine.find(name);
    if (it == engine.end()) {
      // torch's named_parameters() lists a tied parameter once, under its first name.
      if (!p->alias_of.empty()) continue;
      out.push_back({PlanProblem::Kind::kMissing, name,
                     name + ": planned " + shape_text(p->shape) + " " + std::string(dtype_name(p->dtype)) +
                         " but the engine has no such parameter"});
      continue;
    }
    const ExpectedParam& e = *it->second;
    if (e.shape != p->shape) {
      out.push_back(
          {PlanProblem::Kind::kShape, name,
           name + ": the engine's shape is " + shape_text(e.shape) + " but the plan builds " + shape_text(p->shape)});
    }
    const auto d = dtype_from_engine_name(e.dtype);
    if (!d) {
      out.push_back(
          {PlanProblem::Kind::kDtype, name, name + ": the engine's dtype '" + e.dtype + "' is not one wmap knows"});
    } else if (exec_detail::dtype_fit(p->dtype, d, std::max(1u, dtype_bits(*d) / 8)) != exec_detail::DtypeFit::kFits) {
      out.push_back(
          {PlanProblem::Kind::kDtype, name,
           name + ": the engine holds " + e.dtype + " but the plan builds " + std::string(dtype_name(p->dtype))});
    }
  }
  for (const auto& [name, e] : engine) {
    if (planned.count(name) || owned.match(name)) continue;
    out.push_back(
        {PlanProblem::Kind::kDestination, name,
         name + ": the engine holds " + shape_text(e->shape) + " " + e->dtype + " but the plan does not fill it"});
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  return out;
}

}  // namespace wmap
