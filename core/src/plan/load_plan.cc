#include "wmap/plan/load_plan.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <mutex>
#include <set>
#include <unordered_map>

#include "wmap/plan/piece_runs.h"
#include "wmap/util/error.h"
#include "wmap/util/json_text.h"
#include "wmap/util/sha256.h"

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

namespace {

// Dtypes whose values mean nothing without a scale: a parameter held in one is a quantised weight
// (or a scale of one, as NVFP4's F8_E4M3 block scales are).
bool quantised_dtype(DType d) {
  return d == DType::kF4 || d == DType::kF6_E2M3 || d == DType::kF6_E3M2 || d == DType::kF8_E5M2 ||
         d == DType::kF8_E4M3;
}

// A piece's zero padding, in addressable units: each output dim's extent at least the box's
// (padding only grows a piece), sub-byte last dims in whole bytes. An unpadded extent list is
// dropped so such a piece is scheduled like any other. Returns an error text.
std::string resolve_pad(const Piece& p, unsigned bits, PlannedPiece& out) {
  const size_t n = out.view.size();
  if (p.pad.size() != n)
    return "pad " + shape_text(p.pad) + " has " + std::to_string(p.pad.size()) + " extents for a view of rank " +
           std::to_string(n);
  out.pad = p.pad;
  if (bits < 8) {
    if ((out.pad.back() * bits) % 8) return "pad of a " + std::to_string(bits) + "-bit dtype must end on a whole byte";
    out.pad.back() = out.pad.back() * bits / 8;
  }
  bool grows = false;
  for (size_t k = 0; k < n; ++k) {
    const uint64_t have = out.box[out.perm[k]].size();
    if (out.pad[k] < have)
      return "pad " + shape_text(p.pad) + " is smaller than the cut along output dim " + std::to_string(k) + " (" +
             std::to_string(have) + ")";
    grows = grows || out.pad[k] > have;
  }
  const auto padded = checked_numel(out.pad);
  if (!padded || *padded > UINT64_MAX / out.elem_bytes) return "pad " + shape_text(p.pad) + " overflows 2^64 bytes";
  if (!grows) {
    out.pad.clear();
    return "";
  }
  out.out_bytes = *padded * out.elem_bytes;
  return "";
}

// Fills a PlannedPiece's geometry. Returns an error text for a spec that does not fit.
std::string resolve_geometry(const Piece& p, DType dtype, PlannedPiece& out) {
  out.view = p.view.empty() ? p.source_shape : p.view;
  const auto view_elements = checked_numel(out.view), source_elements = checked_numel(p.source_shape);
  if (!view_elements || !source_elements)
    return "view " + shape_text(out.view) + " or source shape " + shape_text(p.source_shape) +
           " has more than 2^64 elements";
  if (*view_elements != *source_elements) {
    return "view " + shape_text(out.view) + " does not have the elements of source shape " + shape_text(p.source_shape);
  }
  const size_t n = out.view.size();
  out.box = p.box;
  if (out.box.empty()) {
    for (auto d : out.view) out.box.push_back({0, d});
  }
  if (out.box.size() != n)
    return "box has " + std::to_string(out.box.size()) + " ranges for a view of rank " + std::to_string(n);
  for (size_t d = 0; d < n; ++d) {
    if (out.box[d].begin > out.box[d].end || out.box[d].end > out.view[d]) {
      return "box range [" + std::to_string(out.box[d].begin) + ", " + std::to_string(out.box[d].end) +
             ") exceeds dim " + std::to_string(d) + " of view " + shape_text(out.view);
    }
  }
  out.perm = p.perm;
  if (out.perm.empty()) {
    out.perm.resize(n);
    std::iota(out.perm.begin(), out.perm.end(), 0u);
  }
  std::vector<uint32_t> sorted = out.perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t d = 0; d < sorted.size(); ++d) {
    if (sorted.size() != n || sorted[d] != d) return "perm is not a permutation of the view's dims";
  }
  const unsigned bits = dtype_bits(dtype);
  if (bits >= 8) {
    out.elem_bytes = bits / 8;
  } else {
    // Sub-byte dtypes are addressed as bytes along the last dim, which must stay last and whole bytes.
    out.elem_bytes = 1;
    if (n == 0) return "a sub-byte scalar cannot be addressed";
    auto& last = out.view.back();
    auto& lb = out.box.back();
    if ((last * bits) % 8 || (lb.begin * bits) % 8 || (lb.end * bits) % 8 || out.perm.back() != n - 1) {
      return "slices of " + std::string(dtype_name(dtype)) + " must cover whole bytes of the last dim";
    }
    last = last * bits / 8;
    lb = {lb.begin * bits / 8, lb.end * bits / 8};
  }
  if (!p.reverse.empty()) {
    out.reverse.assign(n, false);
    for (const uint32_t d : p.reverse) {
      if (d >= n) return "reverse names dim " + std::to_string(d) + " of a view of rank " + std::to_string(n);
      if (bits < 8 && d == n - 1) return "the last dim of a sub-byte dtype cannot be reversed (its bytes pack pairs)";
      out.reverse[d] = true;
    }
  }
  uint64_t elems = 1;
  for (const auto& r : out.box) elems *= r.size();
  out.out_bytes = elems * out.elem_bytes;
  return p.pad.empty() ? "" : resolve_pad(p, bits, out);
}

// The absolute file bytes a piece touches: from its first to its last element.
void resolve_span(PlannedPiece& p) {
  if (p.box_bytes() == 0) {
    p.span_begin = p.span_end = p.record->offset;
    return;
  }
  if (p.gathers_source()) {
    p.span_begin = p.record->offset;
    p.span_end = p.record->offset + p.record->span_bytes();
    return;
  }
  const std::vector<uint64_t> stride = p.source_strides();
  uint64_t first = 0, last = 0;
  for (size_t d = 0; d < stride.size(); ++d) {
    first += p.box[d].begin * stride[d];
    last += (p.box[d].end - 1) * stride[d];
  }
  p.span_begin = p.record->offset + first;
  p.span_end = p.record->offset + last + p.elem_bytes;
}

}  // namespace

struct LoadPlan::IdCache {
  std::once_flag once;
  std::string id;
};

LoadPlan LoadPlan::build(const ModelSpec& spec, std::shared_ptr<const Catalog> catalog, const RenameTable& renames,
                         const PlanOptions& options) {
  if (!catalog) throw Error(ErrorCode::kInternal, "LoadPlan::build without a catalog");
  const RenamedCatalog renamed = renames.apply(*catalog);
  return build(spec, std::move(catalog), renamed, options);
}

// Builds one plan, a step per method: each parameter resolved against the catalog (aliases,
// sources, pieces, must-match pairs), then the checkpoint tensors nothing reads, then the schedule.
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

  void run() {
    plan_.id_cache_ = std::make_shared<LoadPlan::IdCache>();
    plan_.plugin_ = spec_.plugin;
    plan_.architecture_ = spec_.architecture;
    plan_.layout_ = spec_.layout;
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

 private:
  void problem(PlanProblem::Kind kind, std::string key, std::string message) {
    plan_.problems_.push_back({kind, std::move(key), std::move(message)});
  }
  const std::string& file_of(const TensorRecord* r) const { return catalog_.shards()[r->shard].file; }
  void push(PlannedParam pp) {
    // Each piece's run bytes, for certify(), taken while the piece is in cache (the schedule
    // visits pieces in file order: a cache miss each, 3 ms of a 140k-piece plan).
    for (const PlannedPiece& q : pp.pieces) piece_runs_.push_back(q.record ? piece_run_bytes(q) : 0);
    param_index_[pp.name] = plan_.params_.size();
    plan_.params_.push_back(std::move(pp));
  }

  void add_param(const ModuleSpec& module, const ParamSpec& ps) {
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
    for (size_t i = 0; i < ps.pieces.size(); ++i)
      broken = !add_piece(pp, ps, ps.pieces[i], records[i], total) || broken;
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

  // The bytes a parameter's pieces must give: nbytes, or what its conversion reads; nullopt (a
  // spec problem, reported here) when the conversion does not fit the parameter.
  std::optional<uint64_t> assembled_size(const PlannedParam& pp, const ParamSpec& ps) {
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
        if (c.block_rows == 0 || c.block_cols == 0 || ps.pieces.size() < 2)
          return bad("needs blocks, a weight and scales");
        const uint64_t out = c.rows * c.cols * esize;
        if (c.rows == 0 || c.cols == 0 || out / esize / c.cols != c.rows || out > pp.nbytes) {
          return bad("of [" + std::to_string(c.rows) + ", " + std::to_string(c.cols) + "] does not fit in " +
                     std::to_string(pp.nbytes) + " bytes");
        }
        const uint64_t scales = ceil_div(c.rows, c.block_rows) * ceil_div(c.cols, c.block_cols) * 4;
        if (pp.pieces.size() >= 2 && (pp.pieces[0].out_bytes != c.rows * c.cols || pp.pieces[1].out_bytes != scales)) {
          return bad("needs its first piece to be the F8 weight [" + std::to_string(c.rows) + ", " +
                     std::to_string(c.cols) + "] and its second the F32 scales (" + std::to_string(scales) +
                     " bytes); they give " + std::to_string(pp.pieces[0].out_bytes) + " and " +
                     std::to_string(pp.pieces[1].out_bytes));
        }
        return c.rows * c.cols + scales + (pp.nbytes - out);
      }
    }
    return bad("is unknown");
  }

  void add_alias(PlannedParam pp, const ParamSpec& ps) {
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

  // The parameter's dtype: declared, else the first present source's (preferring sources that
  // declare no dtype of their own).
  static DType param_dtype(const ParamSpec& ps, const std::vector<const TensorRecord*>& records) {
    if (ps.dtype) return *ps.dtype;
    for (size_t i = 0; i < ps.pieces.size(); ++i) {
      if (records[i] && !ps.pieces[i].source_dtype) return records[i]->dtype;
    }
    for (size_t i = 0; i < ps.pieces.size(); ++i) {
      if (records[i]) return records[i]->dtype;
    }
    return DType::kU8;
  }

  // Resolves one piece against its source record; false (and a problem) when it cannot be read.
  bool add_piece(PlannedParam& pp, const ParamSpec& ps, const Piece& piece, const TensorRecord* r, uint64_t& total) {
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

  // Sources whose bytes must be equal (fused NVFP4 global scales); false when one is missing or
  // the pair cannot be compared.
  bool add_must_match(PlannedParam& pp, const ParamSpec& ps) {
    bool ok = true;
    pp.must_match_close = ps.must_match_close;
    for (const auto& [a, b] : ps.must_match) {
      const RenamedTensor* ra = renamed_.find(a);
      const RenamedTensor* rb = renamed_.find(b);
      for (const auto& [key, found] : {std::pair{a, ra}, std::pair{b, rb}}) {
        if (!found) {
          problem(PlanProblem::Kind::kMissing, key,
                  "'" + key + "' is not in the checkpoint (needed by " + ps.name + ")");
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

  // The parameter an alias shares (itself when not an alias); aliases are pushed only when their
  // target was declared before them.
  PlannedParam& target_of(PlannedParam& p) {
    return p.alias_of.empty() ? p : plan_.params_[param_index_.at(p.alias_of)];
  }
  // A parameter refused after its aliases were planned: they are refused with it.
  void sync_aliases() {
    for (PlannedParam& p : plan_.params_) {
      if (!p.alias_of.empty()) p.broken = p.broken || target_of(p).broken;
    }
  }
  std::string described(const PlannedParam& p) const {
    return p.name + " " + std::string(dtype_name(p.dtype)) + shape_text(p.shape) + " (bytes [0, " +
           std::to_string(p.nbytes) + "))";
  }

  // Every quantised weight has its scales: each parameter a loaded one names in ParamSpec::scales
  // is declared and loaded (not absent, not broken; an alias stands for its target), and a
  // parameter held in a quantised dtype (quantised_dtype(), as stored: not converted) that
  // declares no scales and is no parameter's scale is refused. A refused weight is broken (a
  // partial load skips it: its bytes alone are not its values); repeated until nothing changes,
  // as a scale refused here may be a weight's.
  void check_scales() {
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
      if (p.converts()) return false;
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

  // The coverage certificate (ParamCertificate): every destination range of the schedule (zero
  // and copy units' outputs, read units' slices: what the executor writes), bucketed by parameter
  // and piece (a counting sort: two passes over the units), each parameter's ranges checked by
  // coverage_fault(). Pieces fill their parameter in order and a piece's units come in its output
  // order, so a parameter's ranges arrive sorted and the check is one pass (a stacked expert
  // tensor's pieces are read in file order, which is not theirs: bucketing by parameter alone
  // left them to a sort). A fault is a `coverage` problem and the parameter is broken; returns
  // whether one was found (the caller then rebuilds the schedule without it).
  bool certify() {
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

  // Checkpoint tensors nothing reads, minus ignored and declared-skipped ones.
  void list_unconsumed() {
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

  LoadPlan& plan_;
  const ModelSpec& spec_;
  const Catalog& catalog_;
  const RenamedCatalog& renamed_;
  const PlanOptions& options_;
  const std::string plugin_label_;
  std::unordered_map<std::string, size_t> param_index_;
  std::vector<uint64_t> piece_runs_;  // piece_run_bytes() of every planned piece, in params order
};

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

namespace {

// The certificate's totals over a plan's parameters (its verdict and its JSON summary).
struct CertificateTotals {
  size_t checked = 0, certified = 0, scaled = 0;
  uint64_t ranges = 0, bytes = 0;
};
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

}  // namespace

std::string LoadPlan::certificate() const {
  const CertificateTotals t = totals_of(certificates_, params_);
  std::string s = t.certified == t.checked ? "certified: "
                                           : "REFUSED for " + std::to_string(t.checked - t.certified) + " of " +
                                                 std::to_string(t.checked) + " parameters (their problems say why); ";
  return s + "every destination byte of " + std::to_string(t.certified) + " parameters (" + std::to_string(t.bytes) +
         " bytes) written exactly once, by " + std::to_string(t.ranges) + " ranges; " + std::to_string(t.scaled) +
         " quantised weight(s) with their scales";
}

std::string LoadPlan::report(bool verdict_when_ok) const {
  std::string out;
  for (const auto& p : problems_) out += "wmap: " + std::string(problem_kind_name(p.kind)) + ": " + p.message + "\n";
  for (const auto& w : warnings_) out += "wmap: warning: " + w + "\n";
  if (!ok() || verdict_when_ok) out += "wmap: plan " + coverage() + "\n";
  return out;
}

std::string LoadPlan::plan_id() const {
  std::call_once(id_cache_->once, [this] { id_cache_->id = sha256_hex(json_text(false)); });
  return id_cache_->id;
}

std::string LoadPlan::to_json() const { return json_text(true); }

std::string LoadPlan::json_text(bool with_id) const {
  std::string o = "{\"format\":\"wmap-plan\",\"version\":7";
  if (with_id) o += ",\"plan_id\":\"" + plan_id() + "\"";
  o += ",\"catalog_id\":\"" + catalog_id() + "\",\"plugin\":" + json_string(plugin_) +
       ",\"architecture\":" + json_string(architecture_);
  o += ",\"layout\":" + layout_.to_json();
  o += ",\"ok\":" + std::string(ok() ? "true" : "false") + ",\"coverage\":" + json_string(coverage());
  o +=
      ",\"bytes_to_load\":" + std::to_string(bytes_to_load()) + ",\"bytes_to_read\":" + std::to_string(bytes_to_read());
  const CertificateTotals t = totals_of(certificates_, params_);
  o += ",\"certificate\":{\"params\":" + std::to_string(t.checked) + ",\"certified\":" + std::to_string(t.certified) +
       ",\"ranges\":" + std::to_string(t.ranges) + ",\"bytes\":" + std::to_string(t.bytes) +
       ",\"scaled\":" + std::to_string(t.scaled) + ",\"ok\":" + (t.certified == t.checked ? "true" : "false") + "}";
  o += ",\"problems\":[";
  for (size_t i = 0; i < problems_.size(); ++i) {
    o += (i ? ",\n" : "\n") + std::string("{\"kind\":\"") + std::string(problem_kind_name(problems_[i].kind)) +
         "\",\"key\":" + json_string(problems_[i].key) + ",\"message\":" + json_string(problems_[i].message) + "}";
  }
  o += "],\"params\":[";
  auto dims = [](const std::vector<uint64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "]";
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    o += (i ? ",\n" : "\n") + std::string("{\"name\":") + json_string(p.name) + ",\"module\":" + json_string(p.module) +
         ",\"dtype\":\"" + std::string(dtype_name(p.dtype)) + "\",\"shape\":" + dims(p.shape) +
         ",\"nbytes\":" + std::to_string(p.nbytes);
    if (!p.alias_of.empty()) o += ",\"alias_of\":" + json_string(p.alias_of);
    if (p.converts()) {
      o += ",\"convert\":{\"kind\":\"" + std::string(conversion_name(p.convert.kind)) + "\"";
      if (p.convert.kind == Conversion::Kind::kFp8BlockDequant) {
        o += ",\"rows\":" + std::to_string(p.convert.rows) + ",\"cols\":" + std::to_string(p.convert.cols) +
             ",\"block\":[" + std::to_string(p.convert.block_rows) + "," + std::to_string(p.convert.block_cols) + "]";
      }
      o += ",\"assembled_bytes\":" + std::to_string(p.assembled_bytes) + "}";
    }
    if (p.absent) o += ",\"absent\":true";
    if (!p.must_match.empty()) {
      o += ",\"must_match\":[";
      for (size_t j = 0; j < p.must_match.size(); ++j) {
        o += (j ? ",[" : "[") + json_string(p.must_match[j].first->name) + "," +
             json_string(p.must_match[j].second->name) + "]";
      }
      o += "]";
      if (p.must_match_close) o += ",\"must_match_close\":true";
    }
    if (!p.scales.empty()) {
      o += ",\"scales\":[";
      for (size_t j = 0; j < p.scales.size(); ++j) o += (j ? "," : "") + json_string(p.scales[j]);
      o += "]";
    }
    if (const ParamCertificate& c = certificates_[i]; c.checked) {
      o += ",\"coverage\":{\"ranges\":" + std::to_string(c.ranges) + ",\"bytes\":" + std::to_string(c.bytes) +
           ",\"ok\":" + (c.ok ? "true" : "false") + "}";
    }
    o += ",\"pieces\":[";
    for (size_t j = 0; j < p.pieces.size(); ++j) {
      const auto& q = p.pieces[j];
      o += j ? "," : "";
      if (!q.record) {
        o += "{\"zeros\":" + std::to_string(q.out_bytes) + "}";
        continue;
      }
      o += "{\"source\":" + json_string(q.source) + ",\"key\":" + json_string(q.record->name) +
           ",\"shard\":" + std::to_string(q.record->shard) + ",\"span\":[" + std::to_string(q.span_begin) + "," +
           std::to_string(q.span_end) + "],\"bytes\":" + std::to_string(q.out_bytes) + ",\"view\":" + dims(q.view) +
           ",\"box\":[";
      for (size_t d = 0; d < q.box.size(); ++d) {
        o += (d ? ",[" : "[") + std::to_string(q.box[d].begin) + "," + std::to_string(q.box[d].end) + "]";
      }
      o += "],\"perm\":[";
      for (size_t d = 0; d < q.perm.size(); ++d) o += (d ? "," : "") + std::to_string(q.perm[d]);
      o += "]";
      if (q.padded()) o += ",\"pad\":" + dims(q.pad);
      if (!q.reverse.empty()) {
        o += ",\"reverse\":[";
        bool first = true;
        for (size_t d = 0; d < q.reverse.size(); ++d) {
          if (!q.reverse[d]) continue;
          o += (first ? "" : ",") + std::to_string(d);
          first = false;
        }
        o += "]";
      }
      if (!q.transform.empty()) o += ",\"transform\":" + json_string(q.transform);
      o += "}";
    }
    o += "]}";
  }
  o += "],\"read_order\":[";
  for (size_t i = 0; i < read_order_.size(); ++i) o += (i ? "," : "") + std::to_string(read_order_[i]);
  o += "],\"schedule\":" + schedule_json() + "}\n";
  return o;
}

// The units in claim order, one compact array each (fields named once): what a load reads,
// how, and which byte ranges it releases after each unit. Segments are counted, not listed:
// they follow from the pieces and chunk_bytes.
std::string LoadPlan::schedule_json() const {
  std::string o =
      "{\"chunk_bytes\":" + std::to_string(schedule_.chunk_bytes()) +
      ",\"max_read_gap\":" + std::to_string(schedule_.max_read_gap()) +
      ",\"unit_fields\":[\"kind\",\"shard\",\"begin\",\"end\",\"segments\",\"param\",\"piece\",\"releases\"]"
      ",\"units\":[";
  const auto& units = schedule_.units();
  for (size_t i = 0; i < units.size(); ++i) {
    const ReadUnit& u = units[i];
    o += (i ? ",\n[\"" : "\n[\"") + std::string(unit_kind_name(u.kind)) + "\",";
    if (u.kind == ReadUnit::Kind::kZero) {
      o += "null,0,0,0,";
    } else {
      o += std::to_string(u.shard) + "," + std::to_string(u.begin) + "," + std::to_string(u.end) + "," +
           std::to_string(u.segments) + ",";
    }
    o += u.kind == ReadUnit::Kind::kRead ? "null,null,["
                                         : std::to_string(u.param) + "," + std::to_string(u.piece) + ",[";
    bool first = true;
    for (const ByteRange& r : schedule_.releases(u)) {
      o += (first ? "" : ",") + std::to_string(r.begin) + "," + std::to_string(r.end);
      first = false;
    }
    o += "]]";
  }
  return o + "]}";
}

std::vector<uint64_t> PlannedPiece::out_shape() const {
  if (!record) return {out_bytes};
  if (padded()) return pad;
  std::vector<uint64_t> s;
  for (const uint32_t d : perm) s.push_back(box[d].size());
  return s;
}

uint64_t PlannedPiece::box_bytes() const {
  if (!padded()) return out_bytes;
  uint64_t n = elem_bytes;
  for (const Range& r : box) n *= r.size();
  return n;
}

bool PlannedPiece::gathers_source() const { return record && record->strided() && view != record->shape; }

std::vector<uint64_t> PlannedPiece::source_strides() const {
  const size_t n = view.size();
  std::vector<uint64_t> stride(n, elem_bytes);
  if (record && record->strided() && !gathers_source()) {
    for (size_t d = 0; d < n; ++d) stride[d] = record->strides[d] * elem_bytes;
    return stride;
  }
  for (size_t d = n; d-- > 1;) stride[d - 1] = stride[d] * view[d];
  return stride;
}

}  // namespace wmap
