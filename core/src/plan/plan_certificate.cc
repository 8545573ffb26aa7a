// The plan's guarantees: every quantised weight has its scales (PlanBuilder::check_scales), and
// the coverage certificate (PlanBuilder::certify, coverage_fault, LoadPlan::certificate): every
// byte of every parameter written exactly once by the schedule.
#include <algorithm>

#include "plan_builder.h"
#include "plan_geometry.h"
#include "wmap/util/error.h"

namespace wmap {

using namespace plan_detail;

std::string coverage_fault(std::span<DestRange> ranges, uint64_t size) {
  auto before = [](const DestRange& a, const DestRange& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  };
  // Ranges arrive in the schedule's order, which is mostly their parameter's: sorted already.
  if (!std::is_sorted(ranges.begin(), ranges.end(), before)) std::sort(ranges.begin(), ranges.end(), before);
  auto bytes = [](uint64_t a, uint64_t b) {
    return "destination bytes [" + std::to_string(a) + ", " + std::to_string(b) + ")";
  };
  // Everything below `pos` is written exactly once, the last of it by piece `owner`.
  uint64_t pos = 0;
  uint32_t owner = 0;
  for (const DestRange& r : ranges) {
    if (r.end <= r.begin) continue;  // writes nothing
    if (r.begin < pos) {
      const uint32_t a = std::min(owner, r.piece), b = std::max(owner, r.piece);
      return bytes(r.begin, std::min(pos, r.end)) + " written twice (" +
             (a == b ? "piece " + std::to_string(a) : "pieces " + std::to_string(a) + " and " + std::to_string(b)) +
             ")";
    }
    if (r.begin > pos && pos < size) return bytes(pos, std::min(r.begin, size)) + " written by no piece";
    if (r.end > size) {
      return bytes(std::max(r.begin, size), r.end) + " written past the parameter's " + std::to_string(size) +
             " bytes (piece " + std::to_string(r.piece) + ")";
    }
    pos = r.end;
    owner = r.piece;
  }
  if (pos < size) return bytes(pos, size) + " written by no piece";
  return "";
}

void PlanBuilder::check_scales() {
  std::vector<PlannedParam>& params = plan_.params_;
  std::vector<bool> is_scale(params.size(), false);
  for (const PlannedParam& p : params) {
    for (const std::string& s : p.scales) {
      if (auto it = param_index_.find(s); it != param_index_.end()) is_scale[it->second] = true;
    }
  }
  // By dtype (F4/F6/F8 as held), or by the checkpoint's format: U8-stored MXFP4 blocks and
  // packed NVFP4/int4 weights are not recognisable by their dtype (review F9.4).
  const QuantFormat& format = options_.format;
  auto holds_quantised = [&format](const PlannedParam& p) {
    // A dequantised parameter holds no quantised values; a requantised one (kFp8Requant) does.
    if (p.converts()) return quantised_dtype(p.dtype);
    if (quantised_dtype(p.dtype)) return true;
    return std::any_of(p.pieces.begin(), p.pieces.end(), [&format](const PlannedPiece& q) {
      return q.record && (quantised_dtype(q.record->dtype) || format.packed_weight(q.record->name, q.record->dtype));
    });
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < params.size(); ++i) {
      PlannedParam& p = params[i];
      if (p.absent || p.broken || !p.alias_of.empty()) continue;
      std::string why;
      for (const std::string& s : p.scales) {
        const auto it = param_index_.find(s);
        const PlannedParam* scale = it == param_index_.end() ? nullptr : &target_of(params[it->second]);
        if (!scale) {
          why = "its scale '" + s + "' is not a parameter of the spec";
        } else if (scale->absent) {
          why = "its scale '" + s + "' is absent (optional, and its sources are not in the checkpoint)";
        } else if (scale->broken) {
          why = "its scale '" + s + "' has a problem of its own and is not loaded";
        }
        if (!why.empty()) {
          why = described(p) + ": " + why + "; the weight is not loaded without it";
          break;
        }
      }
      if (why.empty() && p.scales.empty() && !is_scale[i] && holds_quantised(p)) {
        why = described(p) +
              " holds quantised values but declares no scales (ParamSpec::scales) and is no parameter's scale";
      }
      if (why.empty()) continue;
      problem(PlanProblem::Kind::kCoverage, p.name, std::move(why));
      p.broken = true;
      changed = true;
    }
  }
  sync_aliases();
}

bool PlanBuilder::certify() {
  std::vector<PlannedParam>& params = plan_.params_;
  const ReadSchedule& schedule = plan_.schedule_;
  const size_t n = params.size();
  std::vector<uint64_t> first_piece(n + 1, 0);  // global piece index of each parameter's first piece
  for (size_t i = 0; i < n; ++i) first_piece[i + 1] = first_piece[i] + params[i].pieces.size();
  const std::vector<uint64_t>& run = piece_runs_;  // by global piece (push())
  if (run.size() != first_piece[n]) throw Error(ErrorCode::kInternal, "certify: pieces changed after planning");
  std::vector<uint64_t> start(first_piece[n] + 1, 0);  // by global piece: where its ranges start
  for (const ReadUnit& u : schedule.units()) {
    if (u.kind != ReadUnit::Kind::kRead) {
      ++start[first_piece[u.param] + u.piece + 1];
      continue;
    }
    for (const UnitSlice& sl : schedule.slices(u)) ++start[first_piece[sl.param] + sl.piece + 1];
  }
  for (size_t k = 0; k + 1 < start.size(); ++k) start[k + 1] += start[k];
  std::vector<DestRange> ranges(start.back());
  std::vector<uint64_t> next(start.begin(), start.end() - 1);
  for (const ReadUnit& u : schedule.units()) {
    if (u.kind != ReadUnit::Kind::kRead) {
      const ByteRange r = schedule.unit_output(u, params);
      ranges[next[first_piece[u.param] + u.piece]++] = {r.begin, r.end, u.piece};
      continue;
    }
    for (const UnitSlice& sl : schedule.slices(u)) {
      const uint64_t k = first_piece[sl.param] + sl.piece;
      const ByteRange r = schedule.slice_output(sl, run[k]);
      ranges[next[k]++] = {r.begin, r.end, sl.piece};
    }
  }
  plan_.certificates_.assign(n, {});
  bool refused = false;
  for (size_t i = 0; i < n; ++i) {
    PlannedParam& p = params[i];
    ParamCertificate& c = plan_.certificates_[i];
    if (p.absent || !p.alias_of.empty()) continue;
    c.checked = true;
    const uint64_t begin = start[first_piece[i]], end = start[first_piece[i + 1]];
    c.ranges = end - begin;
    if (p.broken) continue;  // refused with a problem already: not scheduled
    const std::string fault =
        coverage_fault(std::span<DestRange>(ranges.data() + begin, end - begin), p.written_bytes());
    if (fault.empty()) {
      c.ok = true;
      c.bytes = p.written_bytes();
      continue;
    }
    problem(PlanProblem::Kind::kCoverage, p.name, p.name + ": " + fault);
    p.broken = true;
    refused = true;
  }
  if (refused) sync_aliases();
  return refused;
}

CertificateTotals totals_of(const std::vector<ParamCertificate>& certificates,
                            const std::vector<PlannedParam>& params) {
  CertificateTotals t;
  for (size_t i = 0; i < certificates.size(); ++i) {
    const ParamCertificate& c = certificates[i];
    t.checked += c.checked;
    t.certified += c.ok;
    t.scaled += c.ok && !params[i].scales.empty();
    t.ranges += c.ranges;
    t.bytes += c.bytes;
  }
  return t;
}

std::string LoadPlan::certificate() const {
  const CertificateTotals t = totals_of(certificates_, params_);
  std::string s = t.certified == t.checked ? "certified: "
                                           : "REFUSED for " + std::to_string(t.checked - t.certified) + " of " +
                                                 std::to_string(t.checked) + " parameters (their problems say why); ";
  return s + "every destination byte of " + std::to_string(t.certified) + " parameters (" + std::to_string(t.bytes) +
         " bytes) written exactly once, by " + std::to_string(t.ranges) + " ranges; " + std::to_string(t.scaled) +
         " quantised weight(s) with their scales";
}

}  // namespace wmap
