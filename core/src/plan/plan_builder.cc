#include "plan_builder.h"

#include <algorithm>
#include <set>

#include "plan_geometry.h"
#include "wmap/plan/piece_runs.h"
#include "wmap/util/error.h"

namespace wmap {

using namespace plan_detail;

void PlanBuilder::run() {
  plan_.id_cache_ = std::make_shared<LoadPlan::IdCache>();
  plan_.plugin_ = spec_.plugin;
  plan_.architecture_ = spec_.architecture;
  plan_.layout_ = spec_.layout;
  plan_.quant_format_ = options_.format;
  plan_.catalog_tensors_ = catalog_.size();
  plan_.readers_.assign(catalog_.size(), 0);
  plan_.ignored_ = renamed_.ignored().size();
  for (const ModuleSpec& module : spec_.modules) {
    for (const ParamSpec& ps : module.params) add_param(module, ps);
  }
  check_scales();
  list_unconsumed();
  // The schedule and its certificate: a parameter the certificate refuses leaves the schedule,
  // which is rebuilt without it (and certified again: the others' units are unchanged).
  do {
    plan_.schedule_ = ReadSchedule::build(plan_.params_, options_.chunk_bytes, options_.max_read_gap);
  } while (certify());
  std::stable_sort(plan_.problems_.begin(), plan_.problems_.end(), [](const PlanProblem& a, const PlanProblem& b) {
    return a.kind != b.kind ? a.kind < b.kind : a.key < b.key;
  });
  plan_.read_order_ = plan_.schedule_.param_order(plan_.params_.size());
}

void PlanBuilder::problem(PlanProblem::Kind kind, std::string key, std::string message) {
  plan_.problems_.push_back({kind, std::move(key), std::move(message)});
}

void PlanBuilder::push(PlannedParam pp) {
  // Each piece's run bytes, for certify(), taken while the piece is in cache (the schedule
  // visits pieces in file order: a cache miss each, 3 ms of a 140k-piece plan).
  for (const PlannedPiece& q : pp.pieces) piece_runs_.push_back(q.record ? piece_run_bytes(q) : 0);
  param_index_[pp.name] = plan_.params_.size();
  plan_.params_.push_back(std::move(pp));
}

void PlanBuilder::add_param(const ModuleSpec& module, const ParamSpec& ps) {
  PlannedParam pp;
  pp.name = ps.name;
  pp.module = module.name;
  pp.shape = ps.shape;
  pp.alias_of = ps.alias_of;
  if (ps.alias_of.empty()) pp.scales = ps.scales;
  if (param_index_.count(ps.name)) {
    problem(PlanProblem::Kind::kSpec, ps.name, plugin_label_ + " declares parameter '" + ps.name + "' twice");
    return;
  }
  if (!ps.alias_of.empty()) return add_alias(std::move(pp), ps);
  // Resolve sources.
  std::vector<const TensorRecord*> records;
  bool any_present = false;
  for (const Piece& piece : ps.pieces) {
    const TensorRecord* r = nullptr;
    if (!piece.is_zero()) {
      const RenamedTensor* rt = renamed_.find(piece.source);
      r = rt ? rt->source : nullptr;
      any_present = any_present || r != nullptr;
    }
    records.push_back(r);
  }
  if (ps.optional && !any_present) {
    pp.absent = true;
    pp.dtype = ps.dtype.value_or(DType::kU8);
    return push(std::move(pp));
  }
  pp.dtype = param_dtype(ps, records);
  const auto nbytes = checked_nbytes(pp.dtype, pp.shape);
  pp.nbytes = nbytes.value_or(0);
  uint64_t total = 0;
  bool broken = false;
  if (!nbytes) {
    problem(PlanProblem::Kind::kSpec, ps.name,
            plugin_label_ + ": " + ps.name + " " + std::string(dtype_name(pp.dtype)) + shape_text(pp.shape) +
                " is not a whole number of bytes below 2^64");
    broken = true;
  }
  for (size_t i = 0; i < ps.pieces.size(); ++i) broken = !add_piece(pp, ps, ps.pieces[i], records[i], total) || broken;
  broken = !add_must_match(pp, ps) || broken;
  pp.convert = ps.convert;
  pp.assembled_bytes = total;
  const std::optional<uint64_t> want = broken ? std::optional<uint64_t>(pp.nbytes) : assembled_size(pp, ps);
  pp.broken = broken || !want || total != *want;
  if (!broken && want && total != *want) {
    // The pieces append, each after the one before: their destination ranges tile [0, total),
    // so against [0, want) only a total that differs can fail the interval check, which names
    // the first bytes written by no piece or past the end.
    std::vector<DestRange> ranges;
    uint64_t at = 0;
    for (size_t j = 0; j < pp.pieces.size(); ++j) {
      ranges.push_back({at, at + pp.pieces[j].out_bytes, static_cast<uint32_t>(j)});
      at += pp.pieces[j].out_bytes;
    }
    problem(PlanProblem::Kind::kSpec, ps.name,
            plugin_label_ + ": " + ps.name + " " + std::string(dtype_name(pp.dtype)) + shape_text(pp.shape) +
                (pp.converts() ? " (" + std::string(conversion_name(pp.convert.kind)) + ")" : std::string()) +
                " needs " + std::to_string(*want) + " bytes but its pieces give " + std::to_string(total) + ": " +
                coverage_fault(ranges, *want));
  }
  for (const auto& piece : pp.pieces) {
    if (piece.record) plan_.readers_[catalog_.index_of(*piece.record)]++;
  }
  push(std::move(pp));
}

std::optional<uint64_t> PlanBuilder::assembled_size(const PlannedParam& pp, const ParamSpec& ps) {
  const Conversion& c = ps.convert;
  auto bad = [&](const std::string& why) -> std::optional<uint64_t> {
    problem(PlanProblem::Kind::kSpec, ps.name,
            plugin_label_ + ": " + ps.name + ": " + std::string(conversion_name(c.kind)) + " " + why);
    return std::nullopt;
  };
  switch (c.kind) {
    case Conversion::Kind::kNone: return pp.nbytes;
    case Conversion::Kind::kF32ToBf16:
      if (pp.dtype != DType::kBF16) return bad("needs a BF16 parameter, not " + std::string(dtype_name(pp.dtype)));
      return 2 * pp.nbytes;
    case Conversion::Kind::kFp8BlockDequant: {
      const uint64_t esize = pp.dtype == DType::kF32 ? 4 : pp.dtype == DType::kBF16 ? 2 : 0;
      if (esize == 0) return bad("needs an F32 or BF16 parameter, not " + std::string(dtype_name(pp.dtype)));
      if (c.block_rows == 0 || c.block_cols == 0 || c.weight_pieces == 0 || c.scale_pieces == 0 ||
          ps.pieces.size() < c.weight_pieces + c.scale_pieces)
        return bad("needs blocks, a weight and scales");
      const uint64_t out = c.rows * c.cols * esize;
      if (c.rows == 0 || c.cols == 0 || out / esize / c.cols != c.rows || out > pp.nbytes) {
        return bad("of [" + std::to_string(c.rows) + ", " + std::to_string(c.cols) + "] does not fit in " +
                   std::to_string(pp.nbytes) + " bytes");
      }
      const uint64_t scales = ceil_div(c.rows, c.block_rows) * ceil_div(c.cols, c.block_cols) * 4;
      uint64_t w = 0, sc = 0;
      for (uint64_t i = 0; i < c.weight_pieces + c.scale_pieces && i < pp.pieces.size(); ++i) {
        (i < c.weight_pieces ? w : sc) += pp.pieces[i].out_bytes;
      }
      if (w != c.rows * c.cols || sc != scales) {
        return bad("needs its first " + std::to_string(c.weight_pieces) + " piece(s) to be the F8 weight [" +
                   std::to_string(c.rows) + ", " + std::to_string(c.cols) + "] and the next " +
                   std::to_string(c.scale_pieces) + " its F32 scales (" + std::to_string(scales) +
                   " bytes); they give " + std::to_string(w) + " and " + std::to_string(sc));
      }
      return c.rows * c.cols + scales + (pp.nbytes - out);
    }
    case Conversion::Kind::kFp8Requant: {
      if (pp.dtype != DType::kF8_E4M3)
        return bad("needs an F8_E4M3 parameter, not " + std::string(dtype_name(pp.dtype)));
      uint64_t sum = 0;
      for (uint64_t b : c.parts) sum += b;
      if (c.group == 0 || c.parts.empty() || c.parts.size() % c.group != 0 || sum != pp.nbytes ||
          ps.pieces.size() != 2 * c.parts.size()) {
        return bad("of " + std::to_string(c.parts.size()) + " parts (" + std::to_string(sum) + " bytes) in groups of " +
                   std::to_string(c.group) + " does not fit " + std::to_string(pp.nbytes) + " bytes and " +
                   std::to_string(ps.pieces.size()) + " pieces (one weight and one scale per part)");
      }
      for (size_t i = 0; i < c.parts.size() && i < pp.pieces.size(); ++i) {
        const size_t scale = c.parts.size() + i;
        if (pp.pieces[i].out_bytes != c.parts[i] || (scale < pp.pieces.size() && pp.pieces[scale].out_bytes != 4)) {
          return bad("part " + std::to_string(i) + " needs " + std::to_string(c.parts[i]) +
                     " F8 bytes and one F32 scale");
        }
      }
      return pp.nbytes + 4 * c.parts.size();
    }
    case Conversion::Kind::kScaleMax:
      if (pp.dtype != DType::kF32) return bad("needs an F32 parameter, not " + std::string(dtype_name(pp.dtype)));
      if (c.group == 0) return bad("needs a group of at least one scale");
      return pp.nbytes * c.group + 4 * c.tail;
    case Conversion::Kind::kKvScales:
      if (pp.dtype != DType::kF32 || pp.nbytes != 12) return bad("needs an F32 [3] parameter");
      return 8;
    case Conversion::Kind::kBlockScaleSwizzle: {
      const uint64_t matrix = c.rows * c.cols, padded = c.pad_rows * c.pad_cols;
      if (matrix == 0 || c.rows > c.pad_rows || c.cols > c.pad_cols || c.pad_rows % 128 != 0 || c.pad_cols % 4 != 0 ||
          pp.nbytes % padded != 0) {
        return bad("of [" + std::to_string(c.rows) + ", " + std::to_string(c.cols) + "] scale matrices padded to [" +
                   std::to_string(c.pad_rows) + ", " + std::to_string(c.pad_cols) +
                   "] (rows a multiple of 128, cols of 4) does not fit " + std::to_string(pp.nbytes) + " bytes");
      }
      return pp.nbytes / padded * matrix;
    }
    case Conversion::Kind::kConcatColumns: {
      uint64_t row = 0;
      for (uint64_t b : c.parts) row += b;
      if (c.parts.empty() || c.rows == 0 || row == 0 || pp.nbytes % (row * c.rows) != 0) {
        return bad("of " + std::to_string(c.parts.size()) + " parts (" + std::to_string(row) + " bytes a row, " +
                   std::to_string(c.rows) + " rows a block) does not fit " + std::to_string(pp.nbytes) + " bytes");
      }
      return pp.nbytes;
    }
    case Conversion::Kind::kIntToFloat: {
      const uint64_t esize = pp.dtype == DType::kF32                                 ? 4
                             : (pp.dtype == DType::kBF16 || pp.dtype == DType::kF16) ? 2
                                                                                     : 0;
      if (esize == 0) return bad("needs an F32, BF16 or F16 parameter, not " + std::string(dtype_name(pp.dtype)));
      return pp.nbytes / esize * 8;
    }
    case Conversion::Kind::kNvfp4Scales:
      if (pp.dtype != DType::kF32) return bad("needs an F32 parameter, not " + std::string(dtype_name(pp.dtype)));
      if (c.group == 0) return bad("needs a group of at least one scale");
      return pp.nbytes * c.group + 4 * c.tail;
  }
  return bad("is unknown");
}

void PlanBuilder::add_alias(PlannedParam pp, const ParamSpec& ps) {
  auto it = param_index_.find(ps.alias_of);
  if (it == param_index_.end()) {
    problem(PlanProblem::Kind::kSpec, ps.name,
            ps.name + ": aliases '" + ps.alias_of + "', which is not declared before it");
    return;
  }
  const PlannedParam& target = plan_.params_[it->second];
  pp.dtype = target.dtype;
  pp.nbytes = target.nbytes;
  pp.absent = target.absent;
  pp.broken = target.broken;
  if (target.shape != ps.shape) {
    problem(PlanProblem::Kind::kShape, ps.name,
            ps.name + ": shape " + shape_text(ps.shape) + " differs from its alias target '" + ps.alias_of + "' " +
                shape_text(target.shape));
  }
  push(std::move(pp));
}

DType PlanBuilder::param_dtype(const ParamSpec& ps, const std::vector<const TensorRecord*>& records) {
  if (ps.dtype) return *ps.dtype;
  for (size_t i = 0; i < ps.pieces.size(); ++i) {
    if (records[i] && !ps.pieces[i].source_dtype) return records[i]->dtype;
  }
  for (size_t i = 0; i < ps.pieces.size(); ++i) {
    if (records[i]) return records[i]->dtype;
  }
  return DType::kU8;
}

bool PlanBuilder::add_piece(PlannedParam& pp, const ParamSpec& ps, const Piece& piece, const TensorRecord* r,
                            uint64_t& total) {
  PlannedPiece out;
  out.transform = piece.transform;
  if (piece.is_zero()) {
    const auto bytes = checked_nbytes(pp.dtype, std::vector<uint64_t>{piece.zero_elements});
    if (!bytes) {
      problem(PlanProblem::Kind::kSpec, ps.name,
              plugin_label_ + ": " + ps.name + ": " + std::to_string(piece.zero_elements) + " zero elements of " +
                  std::string(dtype_name(pp.dtype)) + " are not a whole number of bytes below 2^64");
      return false;
    }
    out.out_bytes = *bytes;
    total += out.out_bytes;
    pp.pieces.push_back(std::move(out));
    return true;
  }
  out.source = piece.source;
  if (r == nullptr) {
    problem(PlanProblem::Kind::kMissing, piece.source,
            "'" + piece.source + "' is not in the checkpoint (needed by " + ps.name + ", " +
                (piece.source_dtype ? std::string(dtype_name(*piece.source_dtype)) + " " : std::string()) +
                shape_text(piece.source_shape) + ")");
    return false;
  }
  out.record = r;
  const DType want = piece.source_dtype.value_or(pp.dtype);
  if (r->shape != piece.source_shape) {
    problem(PlanProblem::Kind::kShape, r->name,
            "'" + r->name + "' in " + file_of(r) + " has shape " + shape_text(r->shape) + " but " + ps.name +
                " expects " + shape_text(piece.source_shape));
    return false;
  }
  if (r->dtype != want) {
    problem(PlanProblem::Kind::kDtype, r->name,
            "'" + r->name + "' in " + file_of(r) + " is " + std::string(dtype_name(r->dtype)) + " but " + ps.name +
                " expects " + std::string(dtype_name(want)));
    return false;
  }
  const std::string geometry_error = resolve_geometry(piece, r->dtype, out);
  if (!geometry_error.empty()) {
    problem(PlanProblem::Kind::kSpec, ps.name,
            plugin_label_ + ": " + ps.name + " from '" + r->name + "': " + geometry_error);
    return false;
  }
  resolve_span(out);
  total += out.out_bytes;
  pp.pieces.push_back(std::move(out));
  return true;
}

bool PlanBuilder::add_must_match(PlannedParam& pp, const ParamSpec& ps) {
  bool ok = true;
  pp.must_match_close = ps.must_match_close;
  for (const auto& [a, b] : ps.must_match) {
    const RenamedTensor* ra = renamed_.find(a);
    const RenamedTensor* rb = renamed_.find(b);
    for (const auto& [key, found] : {std::pair{a, ra}, std::pair{b, rb}}) {
      if (!found) {
        problem(PlanProblem::Kind::kMissing, key, "'" + key + "' is not in the checkpoint (needed by " + ps.name + ")");
        ok = false;
      }
    }
    if (ra && rb) {
      if (ra->source->nbytes != rb->source->nbytes || ra->source->dtype != rb->source->dtype) {
        problem(PlanProblem::Kind::kShape, b,
                ps.name + ": '" + a + "' and '" + b + "' must be equal but differ in dtype or size");
        ok = false;
      }
      pp.must_match.emplace_back(ra->source, rb->source);
      plan_.readers_[catalog_.index_of(*ra->source)]++;
      plan_.readers_[catalog_.index_of(*rb->source)]++;
    }
  }
  return ok;
}

PlannedParam& PlanBuilder::target_of(PlannedParam& p) {
  return p.alias_of.empty() ? p : plan_.params_[param_index_.at(p.alias_of)];
}

void PlanBuilder::sync_aliases() {
  for (PlannedParam& p : plan_.params_) {
    if (!p.alias_of.empty()) p.broken = p.broken || target_of(p).broken;
  }
}

std::string PlanBuilder::described(const PlannedParam& p) const {
  return p.name + " " + std::string(dtype_name(p.dtype)) + shape_text(p.shape) + " (bytes [0, " +
         std::to_string(p.nbytes) + "))";
}

void PlanBuilder::list_unconsumed() {
  // Mark declared-skipped and handed-off subtrees by their ranges in the sorted renamed catalog
  // (a binary search each) instead of testing every prefix against every key: a rank of a
  // 1,152-expert checkpoint leaves 350k keys to other ranks.
  const auto tensors = renamed_.tensors();
  enum : uint8_t { kNone, kSkipped, kHanded };
  std::vector<uint8_t> mark(tensors.size(), kNone);
  auto mark_range = [&](std::span<const RenamedTensor> range, uint8_t how) {
    const size_t first = static_cast<size_t>(range.data() - tensors.data());
    for (size_t i = first; i < first + range.size(); ++i) {
      if (mark[i] == kNone) mark[i] = how;
    }
  };
  auto mark_one = [&](std::string_view key, uint8_t how) {
    if (const RenamedTensor* t = renamed_.find(key); t && mark[static_cast<size_t>(t - tensors.data())] == kNone) {
      mark[static_cast<size_t>(t - tensors.data())] = how;
    }
  };
  for (const auto& key : spec_.skipped_keys) mark_one(key, kSkipped);
  for (const auto& prefix : spec_.skipped_prefixes) {
    mark_one(prefix, kSkipped);
    mark_range(renamed_.prefix(prefix), kSkipped);
  }
  for (const auto& m : spec_.modules) {
    for (const auto& prefix : m.subtrees) mark_range(renamed_.prefix(prefix), kHanded);
  }
  for (const auto& prefix : spec_.other_ranks) {
    mark_one(prefix, kHanded);
    mark_range(renamed_.prefix(prefix), kHanded);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const RenamedTensor& t = tensors[i];
    if (plan_.readers_[catalog_.index_of(*t.source)] > 0) continue;
    if (mark[i] == kSkipped) {
      plan_.skipped_++;
      continue;
    }
    if (mark[i] == kHanded) {
      plan_.handed_++;
      continue;
    }
    plan_.unconsumed_.push_back(t.source->name);
    const std::string msg = "'" + t.source->name + "' in " + file_of(t.source) + " is not consumed by any parameter" +
                            (t.name != t.source->name ? " (renamed to '" + std::string(t.name) + "')" : "");
    if (options_.unconsumed_is_error) {
      problem(PlanProblem::Kind::kUnconsumed, t.source->name, msg);
    } else {
      plan_.warnings_.push_back(msg);
    }
  }
}

}  // namespace wmap
