#pragma once
// Builds one LoadPlan from a ModelSpec and a (renamed) catalog, a step per method: each
// parameter resolved against the catalog (aliases, sources, pieces, must-match pairs), the
// scales every quantised weight needs, the checkpoint tensors nothing reads, then the schedule
// and its coverage certificate. Internal to the plan stage; LoadPlan::build is its only user.
// plan_builder.cc holds the resolution steps, plan_certificate.cc the scale check and the
// certificate. One object builds one plan, on the calling thread.

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "wmap/plan/load_plan.h"

namespace wmap {

// The plan id, computed once on first use (plan_json.cc), shared by copies of the plan.
struct LoadPlan::IdCache {
  std::once_flag once;
  std::string id;
};

// The certificate's totals over a plan's parameters (its verdict and its JSON summary;
// plan_certificate.cc).
struct CertificateTotals {
  size_t checked = 0, certified = 0, scaled = 0;
  uint64_t ranges = 0, bytes = 0;
};
CertificateTotals totals_of(const std::vector<ParamCertificate>& certificates, const std::vector<PlannedParam>& params);

class PlanBuilder {
 public:
  PlanBuilder(LoadPlan& plan, const ModelSpec& spec, const Catalog& catalog, const RenamedCatalog& renamed,
              const PlanOptions& options)
      : plan_(plan),
        spec_(spec),
        catalog_(catalog),
        renamed_(renamed),
        options_(options),
        plugin_label_("plugin '" + spec.plugin + "'") {}

  void run();

 private:
  void problem(PlanProblem::Kind kind, std::string key, std::string message);
  const std::string& file_of(const TensorRecord* r) const { return catalog_.shards()[r->shard].file; }
  void push(PlannedParam pp);

  void add_param(const ModuleSpec& module, const ParamSpec& ps);

  // The bytes a parameter's pieces must give: nbytes, or what its conversion reads; nullopt (a
  // spec problem, reported here) when the conversion does not fit the parameter.
  std::optional<uint64_t> assembled_size(const PlannedParam& pp, const ParamSpec& ps);

  void add_alias(PlannedParam pp, const ParamSpec& ps);

  // The parameter's dtype: declared, else the first present source's (preferring sources that
  // declare no dtype of their own).
  static DType param_dtype(const ParamSpec& ps, const std::vector<const TensorRecord*>& records);

  // Resolves one piece against its source record; false (and a problem) when it cannot be read.
  bool add_piece(PlannedParam& pp, const ParamSpec& ps, const Piece& piece, const TensorRecord* r, uint64_t& total);

  // Sources whose bytes must be equal (fused NVFP4 global scales); false when one is missing or
  // the pair cannot be compared.
  bool add_must_match(PlannedParam& pp, const ParamSpec& ps);

  // The parameter an alias shares (itself when not an alias); aliases are pushed only when their
  // target was declared before them.
  PlannedParam& target_of(PlannedParam& p);
  // A parameter refused after its aliases were planned: they are refused with it.
  void sync_aliases();
  std::string described(const PlannedParam& p) const;

  // Every quantised weight has its scales: each parameter a loaded one names in ParamSpec::scales
  // is declared and loaded (not absent, not broken; an alias stands for its target), and a
  // parameter held in a quantised dtype (quantised_dtype(), as stored: not converted) that
  // declares no scales and is no parameter's scale is refused. A refused weight is broken (a
  // partial load skips it: its bytes alone are not its values); repeated until nothing changes,
  // as a scale refused here may be a weight's.
  void check_scales();

  // The coverage certificate (ParamCertificate): every destination range of the schedule (zero
  // and copy units' outputs, read units' slices: what the executor writes), bucketed by parameter
  // and piece (a counting sort: two passes over the units), each parameter's ranges checked by
  // coverage_fault(). Pieces fill their parameter in order and a piece's units come in its output
  // order, so a parameter's ranges arrive sorted and the check is one pass (a stacked expert
  // tensor's pieces are read in file order, which is not theirs: bucketing by parameter alone
  // left them to a sort). A fault is a `coverage` problem and the parameter is broken; returns
  // whether one was found (the caller then rebuilds the schedule without it).
  bool certify();

  // Checkpoint tensors nothing reads, minus ignored and declared-skipped ones.
  void list_unconsumed();

  LoadPlan& plan_;
  const ModelSpec& spec_;
  const Catalog& catalog_;
  const RenamedCatalog& renamed_;
  const PlanOptions& options_;
  const std::string plugin_label_;
  std::unordered_map<std::string, size_t> param_index_;
  std::vector<uint64_t> piece_runs_;  // piece_run_bytes() of every planned piece, in params order
};

}  // namespace wmap
