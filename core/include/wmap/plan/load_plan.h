#pragma once
// A load described as data before any tensor data moves: for each destination parameter of one
// rank, its sources (after renames), the byte ranges read, the transform, and the schedule the
// executor runs (read units, their order, release points: read_schedule.h).
// Built from a ModelSpec and a catalog's headers alone; validated against that catalog at once
// (missing sources, shape/dtype mismatches, unconsumed checkpoint tensors, spec errors), and
// certified: every loaded parameter's bytes are written exactly once by the schedule and every
// quantised weight has its scales (ParamCertificate), problems sorted. Immutable after build(); thread-safe to read.
// Serialises to JSON with an id. The plan shares ownership of the Catalog it was built from (its pieces point at the
// catalog's records), so moving or dropping the caller's handle cannot leave it dangling.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/spec/layout.h"
#include "wmap/spec/model_spec.h"
#include "wmap/spec/quant_format.h"
#include "wmap/mapping/rename_table.h"
#include "wmap/plan/read_schedule.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// One piece resolved against the catalog, with its geometry in addressable elements (sub-byte
// dtypes are viewed as bytes along the last dim).
struct PlannedPiece {
  std::string source;                    // canonical key; empty for zeros
  const TensorRecord* record = nullptr;  // the checkpoint tensor (null for zeros)
  std::vector<uint64_t> view;
  std::vector<Range> box;
  std::vector<uint32_t> perm;
  uint64_t elem_bytes = 1;
  std::vector<uint64_t> pad;  // output extents with zero padding (addressable units); empty: none
  std::vector<bool> reverse;  // per view dim: walked backwards; empty: none
  uint64_t out_bytes = 0;     // bytes this piece appends to the parameter (padding included)
  uint64_t span_begin = 0;    // absolute file bytes [span_begin, span_end) covering what it reads
  uint64_t span_end = 0;
  std::string transform;

  bool padded() const { return !pad.empty(); }
  // The output's extents (addressable units): `pad`, else the box's sizes in output order; a
  // zero piece is one dim of out_bytes.
  std::vector<uint64_t> out_shape() const;
  // Bytes the box takes from the source (out_bytes without the padding).
  uint64_t box_bytes() const;
  // True when the piece reads source bytes: a source record and a non-empty box (a padded
  // piece whose box is empty is all zeros and is scheduled as a zero unit).
  bool reads_source() const { return record && box_bytes() > 0; }
  // True for a strided (PyTorch view) source the spec reshapes: it is read whole and gathered
  // into row-major order before the piece is cut from it.
  bool gathers_source() const;
  // Byte strides of the view's dims in what the copy reads: the record's own strides for a
  // strided source seen in its own shape (copied straight out of the file), row-major over
  // `view` otherwise (a contiguous source, or a gathered one).
  std::vector<uint64_t> source_strides() const;
};

struct PlannedParam {
  std::string name;
  std::string module;
  std::vector<uint64_t> shape;
  DType dtype = DType::kU8;
  uint64_t nbytes = 0;
  std::vector<PlannedPiece> pieces;
  std::string alias_of;  // shares that parameter's buffer
  bool absent = false;   // optional and not in the checkpoint: not loaded
  bool broken = false;   // has a problem: skipped by a partial load
  // Source tensors whose bytes must be equal (fused NVFP4 global scales), checked on load.
  std::vector<std::pair<const TensorRecord*, const TensorRecord*>> must_match;
  bool must_match_close = false;  // F32 values within torch.allclose's default tolerance suffice
  // A dtype conversion after assembly (ParamSpec::convert): the pieces fill `assembled_bytes`
  // (their out_bytes, in their source dtypes), which are then converted into the nbytes.
  Conversion convert;
  uint64_t assembled_bytes = 0;
  bool converts() const { return convert.kind != Conversion::Kind::kNone; }
  // The bytes the pieces write: nbytes, or the assembled bytes of a converted parameter.
  uint64_t written_bytes() const { return converts() ? assembled_bytes : nbytes; }
  // The parameters holding its quantisation scales (ParamSpec::scales), each checked loaded.
  std::vector<std::string> scales;
};

// A parameter's coverage certificate, made when the plan is built (LoadPlan::certificates()):
// every destination range the executor writes to it (the schedule's zero and copy units and
// read-unit slices, ReadSchedule::unit_output / slice_output) sorted and checked disjoint and
// covering [0, written_bytes()) exactly once (coverage_fault: an interval check, so an overlap
// and a gap cannot cancel), and its declared scales loaded. A fault is a `coverage` problem
// naming the parameter and the bytes, and the parameter is broken (it leaves the schedule).
struct ParamCertificate {
  bool checked = false;  // loaded: not absent, not an alias (its target's certificate covers it)
  bool ok = false;       // checked and certified (false for a parameter with any problem)
  uint64_t ranges = 0;   // destination ranges the schedule writes to it
  uint64_t bytes = 0;    // bytes certified written exactly once: written_bytes() when ok, else 0
};

// One destination range of a parameter, [begin, end) of its written bytes, and the piece writing it.
struct DestRange {
  uint64_t begin = 0, end = 0;
  uint32_t piece = 0;
};
// The coverage check of one parameter of `size` bytes: `ranges` (sorted here, by begin) must be
// disjoint and cover [0, size) exactly; empty ranges write nothing. Returns "" when they do, else
// the first fault by position: "destination bytes [a, b) written twice (pieces i and j)",
// "destination bytes [a, b) written by no piece", "destination bytes [a, b) written past the
// parameter's N bytes (piece i)".
std::string coverage_fault(std::span<DestRange> ranges, uint64_t size);

struct PlanProblem {
  // kCoverage: the certificate (ParamCertificate); kDestination: load_into's table.
  enum class Kind { kSpec, kMissing, kShape, kDtype, kUnconsumed, kCoverage, kDestination };
  Kind kind;
  std::string key;      // the parameter or checkpoint key concerned
  std::string message;  // one line, naming file, key, expected and actual values
};
std::string_view problem_kind_name(PlanProblem::Kind kind);

struct PlanOptions {
  // Unconsumed checkpoint tensors are problems (default) or only warnings.
  bool unconsumed_is_error = true;
  // Largest single read (and staging buffer): big identity pieces are read in chunks of this
  // size, neighbouring runs share a read unit while its span fits in one (at least 64 KiB), and a
  // per-row transpose (outer dim kept outermost) is copied in bands of rows that fit in one. A
  // transpose of the outer dim and a gathered strided source are one unit over the whole piece
  // (ReadSchedule; `wmap plan --json` lists each unit's span).
  uint64_t chunk_bytes = uint64_t{16} << 20;
  // The widest gap of unwanted bytes (another rank's part of a row or of a stacked tensor) a read
  // unit reads through rather than starting a new read. 64 KiB by default: on page cache and on
  // this project's disks reading through narrower gaps was measured faster than a pread per run
  // (docs/performance.md); smaller values trade read calls for bytes (a TP8 row-parallel o_proj:
  // 1 KiB of every 8 KiB row, read whole at 64 KiB, one pread per row at 4 KiB).
  uint64_t max_read_gap = uint64_t{64} << 10;
  // The checkpoint's quantisation format (QuantFormat::detect, set by the loader): a parameter
  // with a source the format packs (QuantFormat::packed_weight) must declare its scales.
  QuantFormat format{};
};

class LoadPlan {
 public:
  // The plan is for the layout the spec was built for (spec.layout).
  static LoadPlan build(const ModelSpec& spec, std::shared_ptr<const Catalog> catalog, const RenameTable& renames,
                        const PlanOptions& options = {});
  // The same, with the catalog already renamed (the loader renames once for probe and plan).
  // `renamed` must have been made from `*catalog`.
  static LoadPlan build(const ModelSpec& spec, std::shared_ptr<const Catalog> catalog, const RenamedCatalog& renamed,
                        const PlanOptions& options = {});

  bool ok() const { return problems_.empty(); }
  // The one decision whether this plan may run: complete, or `allow_partial` (its broken
  // parameters are then skipped). Otherwise throws kValidation listing every problem.
  void require_runnable(bool allow_partial) const;
  const std::vector<PlanProblem>& problems() const { return problems_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::vector<PlannedParam>& params() const { return params_; }
  // What the executor runs: read units in order, with their release points.
  const ReadSchedule& schedule() const { return schedule_; }
  // Parameter indexes in the order the schedule first reads their bytes (zero-only, zero-size,
  // absent, broken and alias parameters last, in index order).
  const std::vector<size_t>& read_order() const { return read_order_; }
  // For each catalog tensor (by index in catalog.tensors()), how many pieces read it.
  const std::vector<uint32_t>& readers() const { return readers_; }
  // Checkpoint tensors nothing reads (and not ignored or declared skipped), by source key.
  const std::vector<std::string>& unconsumed() const { return unconsumed_; }

  // SHA-256 of the plan's JSON (without the id itself); computed on first use.
  std::string plan_id() const;
  const std::string& catalog_id() const { return catalog_->content_id(); }
  // The catalog the plan was built from (shared: it lives as long as the plan).
  const Catalog& catalog() const { return *catalog_; }
  const std::shared_ptr<const Catalog>& shared_catalog() const { return catalog_; }
  const Layout& layout() const { return layout_; }
  // The checkpoint's quantisation format the plan was made with (PlanOptions::format).
  const QuantFormat& quant_format() const { return quant_format_; }
  uint64_t bytes_to_load() const;  // parameter bytes (aliases counted once)
  uint64_t bytes_to_read() const;  // source bytes the pieces need
  std::string coverage() const;    // one-line verdict
  // The coverage certificate of each parameter (by index in params()), and its one-line verdict.
  const std::vector<ParamCertificate>& certificates() const { return certificates_; }
  std::string certificate() const;
  // What front ends print on stderr: a "wmap: KIND: message" line per problem, a "wmap: warning:"
  // line per warning, then "wmap: plan VERDICT" when the plan has problems or `verdict_when_ok`.
  std::string report(bool verdict_when_ok) const;
  std::string to_json() const;

 private:
  friend class PlanBuilder;  // load_plan.cc: fills a plan step by step
  std::string plugin_, architecture_;
  Layout layout_;
  QuantFormat quant_format_;
  std::vector<PlannedParam> params_;
  ReadSchedule schedule_;
  std::vector<size_t> read_order_;
  std::vector<uint32_t> readers_;
  std::vector<ParamCertificate> certificates_;
  std::vector<PlanProblem> problems_;
  std::vector<std::string> warnings_;
  std::vector<std::string> unconsumed_;
  size_t catalog_tensors_ = 0, ignored_ = 0, skipped_ = 0, handed_ = 0;
  std::shared_ptr<const Catalog> catalog_;
  std::string json_text(bool with_id) const;
  std::string schedule_json() const;
  struct IdCache;
  std::shared_ptr<IdCache> id_cache_;
};

}  // namespace wmap
WMAP_PUBLIC_END
