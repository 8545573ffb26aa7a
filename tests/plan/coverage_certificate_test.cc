// The coverage certificate every plan carries (issue 29): for every loaded parameter, the
// destination ranges the executor writes (the schedule's zero and copy units and read-unit slices)
// are disjoint and cover its bytes exactly once, checked as intervals (an overlap and a gap of the
// same size cannot cancel), and every quantised weight has its scales. Broken specs (pieces that
// leave a gap, pieces that run past the end, a missing, absent, broken or undeclared scale) are
// refused with the parameter and the bytes named; real family plans certify every parameter.
#include <gtest/gtest.h>

#include "wmap/spec/model_config.h"
#include "wmap/spec/quant_format.h"
#include <simdjson.h>

#include <algorithm>
#include <map>
#include <set>

#include "test_util.h"
#include "wmap/catalog/catalog.h"
#include "wmap/mapping/rename_table.h"
#include "wmap/plan/load_plan.h"
#include "wmap/plan/piece_runs.h"
#include "wmap/spec/linear_spec.h"
#include "wmap/spec/model_spec.h"
#include "wmap/util/error.h"

namespace wmap::test {
namespace {

// --- The interval check itself ---

std::string fault_of(std::vector<DestRange> ranges, uint64_t size) { return coverage_fault(ranges, size); }

TEST(CoverageCheck, AnExactTilingInAnyOrderIsCertified) {
  EXPECT_EQ(fault_of({{512, 1024, 1}, {0, 512, 0}, {1024, 4096, 2}}, 4096), "");
  EXPECT_EQ(fault_of({}, 0), "") << "a zero-size parameter needs no range";
  EXPECT_EQ(fault_of({{0, 4096, 0}, {4096, 4096, 1}}, 4096), "") << "an empty range writes nothing";
}

TEST(CoverageCheck, AnOverlapAndAGapOfTheSameSizeDoNotCancel) {
  // 4 x 1024 bytes for a 4096-byte parameter: the sum is right, the intervals are not.
  const std::vector<DestRange> ranges{{0, 1024, 0}, {1024, 2048, 1}, {1024, 2048, 2}, {3072, 4096, 3}};
  uint64_t sum = 0;
  for (const auto& r : ranges) sum += r.end - r.begin;
  ASSERT_EQ(sum, 4096u);
  EXPECT_EQ(fault_of(ranges, 4096), "destination bytes [1024, 2048) written twice (pieces 1 and 2)");
  // The same with the overlap after the gap: the gap is the first fault.
  EXPECT_EQ(fault_of({{0, 1024, 0}, {2048, 3072, 1}, {3072, 4096, 2}, {3072, 4096, 3}}, 4096),
            "destination bytes [1024, 2048) written by no piece");
}

TEST(CoverageCheck, EachKindOfFaultNamesItsBytes) {
  EXPECT_EQ(fault_of({{0, 3000, 0}, {2000, 4096, 1}}, 4096),
            "destination bytes [2000, 3000) written twice (pieces 0 and 1)");
  EXPECT_EQ(fault_of({{0, 3000, 4}, {2000, 2500, 4}, {3000, 4096, 5}}, 4096),
            "destination bytes [2000, 2500) written twice (piece 4)");
  EXPECT_EQ(fault_of({{0, 1024, 0}}, 4096), "destination bytes [1024, 4096) written by no piece");
  EXPECT_EQ(fault_of({}, 16), "destination bytes [0, 16) written by no piece");
  EXPECT_EQ(fault_of({{0, 4096, 0}, {4096, 4112, 1}}, 4096),
            "destination bytes [4096, 4112) written past the parameter's 4096 bytes (piece 1)");
  EXPECT_EQ(fault_of({{0, 4100, 0}}, 4096),
            "destination bytes [4096, 4100) written past the parameter's 4096 bytes (piece 0)");
}

// --- Broken specs, planned against a tiny catalog ---

struct Tensor {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
};

// One shard holding `tensors` back to back (headers only: the plan reads none of the data).
std::shared_ptr<const Catalog> catalog_of(const std::vector<Tensor>& tensors) {
  std::vector<TensorRecord> records;
  uint64_t at = 64;
  for (const Tensor& t : tensors) {
    const uint64_t n = checked_nbytes(t.dtype, t.shape).value();
    records.push_back(
        {.name = t.name, .shard = 0, .dtype = t.dtype, .shape = t.shape, .offset = at, .nbytes = n, .strides = {}});
    at += n;
  }
  ShardRecord shard;
  shard.file = "model.safetensors";
  shard.signature = {.size = at, .mtime_ns = 1, .inode = 1, .etag = {}};
  shard.header_bytes = 56;
  shard.tensor_count = records.size();
  return std::make_shared<const Catalog>(Catalog::from_parts("/nowhere", {shard}, std::move(records)));
}

ModelSpec spec_of(std::vector<ParamSpec> params) {
  ModelSpec spec;
  spec.plugin = "broken";
  spec.architecture = "BrokenForCausalLM";
  spec.modules.push_back({"m", std::move(params), {}});
  return spec;
}

size_t index_of(const LoadPlan& plan, const std::string& name) {
  for (size_t i = 0; i < plan.params().size(); ++i) {
    if (plan.params()[i].name == name) return i;
  }
  ADD_FAILURE() << name << " is not planned";
  return 0;
}

// The one problem of `kind` about `key` (failing the test when there is not exactly one).
PlanProblem only_problem(const LoadPlan& plan, PlanProblem::Kind kind, const std::string& key) {
  std::vector<PlanProblem> found;
  for (const auto& p : plan.problems()) {
    if (p.kind == kind && p.key == key) found.push_back(p);
  }
  EXPECT_EQ(found.size(), 1u) << plan.report(true);
  return found.empty() ? PlanProblem{kind, key, ""} : found.front();
}

void expect_refused(const LoadPlan& plan, const std::string& name) {
  EXPECT_FALSE(plan.ok());
  const size_t i = index_of(plan, name);
  EXPECT_TRUE(plan.params()[i].broken) << name << " is skipped by a partial load";
  EXPECT_TRUE(plan.certificates()[i].checked);
  EXPECT_FALSE(plan.certificates()[i].ok);
  for (const ReadUnit& u : plan.schedule().units()) {
    if (u.kind != ReadUnit::Kind::kRead) {
      EXPECT_NE(u.param, i) << "a refused parameter is not scheduled";
      continue;
    }
    for (const UnitSlice& s : plan.schedule().slices(u))
      EXPECT_NE(s.param, i) << "a refused parameter is not scheduled";
  }
  EXPECT_THROW(plan.require_runnable(false), Error);
  EXPECT_NE(plan.certificate().find("REFUSED"), std::string::npos) << plan.certificate();
}

TEST(CoverageSpec, PiecesThatLeaveAGapAreRefusedNamingTheBytes) {
  // Rows [0, 2) and [3, 4) of a [4, 4] F32 source for a [4, 4] parameter: row 2 (bytes [32, 48)
  // of the source) is skipped, so the parameter's last 16 bytes are written by nothing.
  ParamSpec p;
  p.name = "m.qkv.weight";
  p.shape = {4, 4};
  p.pieces = {spec::rows("m.w", {4, 4}, {0, 2}), spec::rows("m.w", {4, 4}, {3, 4})};
  const LoadPlan plan = LoadPlan::build(spec_of({p}), catalog_of({{"m.w", DType::kF32, {4, 4}}}), RenameTable());
  const PlanProblem problem = only_problem(plan, PlanProblem::Kind::kSpec, "m.qkv.weight");
  EXPECT_NE(problem.message.find("m.qkv.weight F32[4, 4] needs 64 bytes but its pieces give 48: destination bytes "
                                 "[48, 64) written by no piece"),
            std::string::npos)
      << problem.message;
  expect_refused(plan, "m.qkv.weight");
}

TEST(CoverageSpec, OverlappingPiecesRunPastTheEndAndAreRefusedNamingTheBytes) {
  // Rows [0, 3) and [2, 4): row 2 twice. Pieces append, so the overlap of source rows is 16 bytes
  // too many for the parameter: the second piece writes [48, 80) of a 64-byte parameter.
  ParamSpec p;
  p.name = "m.gate_up.weight";
  p.shape = {4, 4};
  p.pieces = {spec::rows("m.w", {4, 4}, {0, 3}), spec::rows("m.w", {4, 4}, {2, 4})};
  const LoadPlan plan = LoadPlan::build(spec_of({p}), catalog_of({{"m.w", DType::kF32, {4, 4}}}), RenameTable());
  const PlanProblem problem = only_problem(plan, PlanProblem::Kind::kSpec, "m.gate_up.weight");
  EXPECT_NE(problem.message.find("needs 64 bytes but its pieces give 80: destination bytes [64, 80) written past "
                                 "the parameter's 64 bytes (piece 1)"),
            std::string::npos)
      << problem.message;
  expect_refused(plan, "m.gate_up.weight");
}

// An FP8 weight [4, 4] and its F32 scale [1, 1] (one 128 x 128 block).
const std::vector<Tensor> kFp8{{"m.weight", DType::kF8_E4M3, {4, 4}}, {"m.weight_scale_inv", DType::kF32, {1, 1}}};

ParamSpec fp8_weight(std::vector<std::string> scales) {
  ParamSpec w = spec::replicated("m.weight", "m.weight", {4, 4});
  w.scales = std::move(scales);
  return w;
}

ParamSpec fp8_scale() {
  ParamSpec s = spec::replicated("m.weight_scale_inv", "m.weight_scale_inv", {1, 1});
  s.dtype = DType::kF32;
  return s;
}

TEST(CoverageScales, AWeightWithItsScaleIsCertified) {
  const LoadPlan plan =
      LoadPlan::build(spec_of({fp8_weight({"m.weight_scale_inv"}), fp8_scale()}), catalog_of(kFp8), RenameTable());
  ASSERT_TRUE(plan.ok()) << plan.report(true);
  const ParamCertificate& c = plan.certificates()[index_of(plan, "m.weight")];
  EXPECT_TRUE(c.checked && c.ok);
  EXPECT_EQ(c.bytes, 16u);
  EXPECT_EQ(c.ranges, 1u);
  EXPECT_EQ(plan.params()[0].scales, std::vector<std::string>{"m.weight_scale_inv"});
  EXPECT_NE(plan.to_json().find(R"("scales":["m.weight_scale_inv"],"coverage":{"ranges":1,"bytes":16,"ok":true})"),
            std::string::npos)
      << plan.to_json();
  EXPECT_NE(plan.certificate().find("1 quantised weight(s) with their scales"), std::string::npos)
      << plan.certificate();
}

TEST(CoverageScales, AnAbsentScaleRefusesTheWeightNamingBoth) {
  // The scale is optional and not in the checkpoint: the weight alone is not its values.
  ParamSpec scale = fp8_scale();
  scale.optional = true;
  const LoadPlan plan =
      LoadPlan::build(spec_of({fp8_weight({"m.weight_scale_inv"}), scale}), catalog_of({kFp8.front()}), RenameTable());
  const PlanProblem problem = only_problem(plan, PlanProblem::Kind::kCoverage, "m.weight");
  EXPECT_EQ(problem.message,
            "m.weight F8_E4M3[4, 4] (bytes [0, 16)): its scale 'm.weight_scale_inv' is absent (optional, and its "
            "sources are not in the checkpoint); the weight is not loaded without it");
  expect_refused(plan, "m.weight");
  EXPECT_NE(plan.report(false).find("wmap: coverage: m.weight F8_E4M3[4, 4]"), std::string::npos) << plan.report(false);
}

TEST(CoverageScales, AnUndeclaredScaleRefusesTheWeight) {
  // The weight names its scale but the spec never declares it (the checkpoint has it: unconsumed).
  const LoadPlan plan = LoadPlan::build(spec_of({fp8_weight({"m.weight_scale_inv"})}), catalog_of(kFp8), RenameTable());
  const PlanProblem problem = only_problem(plan, PlanProblem::Kind::kCoverage, "m.weight");
  EXPECT_NE(problem.message.find("its scale 'm.weight_scale_inv' is not a parameter of the spec"), std::string::npos)
      << problem.message;
  expect_refused(plan, "m.weight");
  only_problem(plan, PlanProblem::Kind::kUnconsumed, "m.weight_scale_inv");
}

TEST(CoverageScales, ABrokenScaleRefusesTheWeight) {
  // The scale's source has another shape: the scale has its own problem, and its weight is refused too.
  ParamSpec scale = fp8_scale();
  scale.pieces.front().source_shape = {2, 1};
  scale.shape = {2, 1};
  const LoadPlan plan =
      LoadPlan::build(spec_of({fp8_weight({"m.weight_scale_inv"}), scale}), catalog_of(kFp8), RenameTable());
  only_problem(plan, PlanProblem::Kind::kShape, "m.weight_scale_inv");
  const PlanProblem problem = only_problem(plan, PlanProblem::Kind::kCoverage, "m.weight");
  EXPECT_NE(problem.message.find("its scale 'm.weight_scale_inv' has a problem of its own and is not loaded"),
            std::string::npos)
      << problem.message;
  expect_refused(plan, "m.weight");
}

TEST(CoverageScales, AQuantisedWeightThatDeclaresNoScaleIsRefused) {
  // An F8_E4M3 parameter with no declared scales, and no parameter's scale: a plugin that forgot
  // the scale (the scale tensor is declared skipped, so nothing else is reported).
  ModelSpec spec = spec_of({fp8_weight({})});
  spec.skipped_keys = {"m.weight_scale_inv"};
  const LoadPlan plan = LoadPlan::build(spec, catalog_of(kFp8), RenameTable());
  ASSERT_EQ(plan.problems().size(), 1u) << plan.report(true);
  const PlanProblem problem = only_problem(plan, PlanProblem::Kind::kCoverage, "m.weight");
  EXPECT_EQ(problem.message,
            "m.weight F8_E4M3[4, 4] (bytes [0, 16)) holds quantised values but declares no scales "
            "(ParamSpec::scales) and is no parameter's scale");
  expect_refused(plan, "m.weight");
}

// Review F9.4: the backstop keyed on the dtype, so U8-stored MXFP4 blocks and packed NVFP4
// weights escaped it. It keys on the checkpoint's format: a source the format packs must come
// with declared scales, whatever its dtype; under no quantisation format the same U8 tensor is
// plain bytes.
TEST(CoverageScales, APackedWeightOfTheCheckpointsFormatThatDeclaresNoScaleIsRefused) {
  ParamSpec blocks;
  blocks.name = "m.experts.w13_weight";
  blocks.shape = {4, 16};
  blocks.dtype = DType::kU8;
  blocks.pieces = {spec::whole("m.experts.gate_up_proj_blocks", {4, 16})};
  ModelSpec spec = spec_of({blocks});
  spec.skipped_keys = {"m.experts.gate_up_proj_scales"};
  const auto catalog = catalog_of(
      {{"m.experts.gate_up_proj_blocks", DType::kU8, {4, 16}}, {"m.experts.gate_up_proj_scales", DType::kU8, {4, 1}}});
  PlanOptions mxfp4;
  mxfp4.format = QuantFormat::detect(ModelConfig::parse(R"({"quantization_config": {"quant_method": "mxfp4"}})", "c"));
  const LoadPlan refused = LoadPlan::build(spec, catalog, RenameTable(), mxfp4);
  const PlanProblem problem = only_problem(refused, PlanProblem::Kind::kCoverage, "m.experts.w13_weight");
  EXPECT_NE(problem.message.find("holds quantised values but declares no scales"), std::string::npos)
      << problem.message;
  expect_refused(refused, "m.experts.w13_weight");
  EXPECT_TRUE(LoadPlan::build(spec, catalog, RenameTable()).ok()) << "without a quantisation format: plain bytes";
  // compressed-tensors' weight_packed likewise.
  PlanOptions ct;
  ct.format = QuantFormat::detect(
      ModelConfig::parse(R"({"quantization_config": {"quant_method": "compressed-tensors"}})", "c"));
  EXPECT_TRUE(ct.format.packed_weight("model.layers.0.mlp.down_proj.weight_packed", DType::kU8));
  EXPECT_FALSE(ct.format.packed_weight("model.layers.0.mlp.down_proj.weight_scale", DType::kF8_E4M3));
  EXPECT_FALSE(mxfp4.format.packed_weight("model.layers.0.mlp.experts.gate_up_proj_bias", DType::kBF16));
}

TEST(CoverageScales, TheLinearBuildersDeclareEachWeightsScales) {
  std::vector<ParamSpec> fp8, nvfp4, plain;
  spec::add_linear(fp8, "l", ".", {spec::whole_linear("x", {256, 256})},
                   spec::LinearQuant::fp8({128, 128}, "weight_scale", false));
  ASSERT_EQ(fp8.size(), 2u);
  EXPECT_EQ(fp8[0].scales, std::vector<std::string>{"l.weight_scale"});
  EXPECT_TRUE(fp8[1].scales.empty());
  using Nvfp4 = spec::LinearQuant::Nvfp4Params;
  spec::add_linear(nvfp4, "l", ".", {spec::whole_linear("x", {16, 8})},
                   spec::LinearQuant::nvfp4(Nvfp4::kVllmModelOpt, false, true));
  ASSERT_EQ(nvfp4.size(), 4u);
  EXPECT_EQ(nvfp4[0].scales, (std::vector<std::string>{"l.weight_scale", "l.weight_scale_2", "l.input_scale"}));
  std::vector<ParamSpec> trt;  // TensorRT-LLM's unfused linear: swizzled scale, input scale, its products
  spec::add_linear(trt, "l", ".", {spec::whole_linear("x", {16, 8})},
                   spec::LinearQuant::nvfp4(Nvfp4::kTrtllm, true, true));
  ASSERT_EQ(trt.size(), 6u);
  EXPECT_EQ(trt[0].scales, (std::vector<std::string>{"l.weight_scale", "l.input_scale", "l.weight_scale_2", "l.alpha",
                                                     "l.inv_input_scale"}));
  EXPECT_EQ(trt[1].shape, std::vector<uint64_t>{128 * 4});  // rup(16, 128) x rup(1, 4), swizzled
  EXPECT_EQ(trt[1].convert.kind, Conversion::Kind::kBlockScaleSwizzle);
  spec::add_linear(plain, "l", ".", {spec::whole_linear("x", {16, 8})}, spec::LinearQuant::none());
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_TRUE(plain[0].scales.empty());
  const auto experts =
      spec::moe_experts("e", "s", 2, 128, 128, Layout{}, spec::LinearQuant::fp8({128, 128}, "sf", false));
  ASSERT_EQ(experts.size(), 4u);
  EXPECT_EQ(experts[0].scales, std::vector<std::string>{"e.w3_w1_sf"});
  EXPECT_EQ(experts[2].scales, std::vector<std::string>{"e.w2_sf"});
}

// --- The certificate is over the executor's own work list ---

// Every read unit slice's range is exactly the union of the segments the executor writes for
// it (ReadSchedule::segments), with chunks small enough that runs are cut into parts.
TEST(CoverageWorkList, ASlicesRangeIsTheUnionOfItsSegments) {
  ParamSpec p;
  p.name = "m.cols";
  p.shape = {512, 96};
  p.pieces = {spec::cols("m.w", {512, 256}, {32, 128})};           // 512 runs of 192 bytes, 320-byte gaps
  ParamSpec big = spec::replicated("m.big", "m.big", {3, 65536});  // one run of 384 KiB cut in 64 KiB parts
  const LoadPlan plan = LoadPlan::build(
      spec_of({p, big}), catalog_of({{"m.w", DType::kBF16, {512, 256}}, {"m.big", DType::kBF16, {3, 65536}}}),
      RenameTable(), PlanOptions{.chunk_bytes = uint64_t{1} << 16});
  ASSERT_TRUE(plan.ok()) << plan.report(true);
  std::vector<UnitSegment> segs;
  size_t slices = 0;
  for (const ReadUnit& u : plan.schedule().units()) {
    if (u.kind != ReadUnit::Kind::kRead) continue;
    for (const UnitSlice& s : plan.schedule().slices(u)) {
      const PlannedPiece& piece = plan.params()[s.param].pieces[s.piece];
      const ByteRange r = plan.schedule().slice_output(s, RunCursor(piece).run_bytes());
      // The slice's segments alone: a unit of this one slice.
      ReadUnit one = u;
      one.slice_begin = static_cast<uint64_t>(&s - plan.schedule().slices(u).data()) + u.slice_begin;
      one.slice_end = one.slice_begin + 1;
      plan.schedule().segments(one, plan.params(), segs);
      ASSERT_FALSE(segs.empty());
      uint64_t at = r.begin;
      for (const UnitSegment& g : segs) {
        EXPECT_EQ(g.dst_off, at) << "segments abut";
        at = g.dst_off + g.len;
      }
      EXPECT_EQ(at, r.end);
      ++slices;
    }
  }
  EXPECT_GT(slices, 2u) << "the runs are spread over several units";
  for (size_t i = 0; i < plan.params().size(); ++i) {
    EXPECT_TRUE(plan.certificates()[i].ok);
    EXPECT_EQ(plan.certificates()[i].bytes, plan.params()[i].nbytes);
  }
  EXPECT_EQ(plan.certificates()[1].ranges, 6u) << "the 384 KiB parameter is written in 64 KiB parts";
}

// --- Real family plans certify every parameter ---

// Checks a prepared plan's certificate: every loaded parameter certified, its bytes written once,
// every quantised parameter with its scales loaded; returns how many declared scales.
size_t expect_certified(const LoadPlan& plan, const std::string& label) {
  EXPECT_TRUE(plan.ok()) << label << "\n" << plan.report(true);
  std::set<std::string> loaded;
  for (const auto& p : plan.params()) {
    if (!p.absent && !p.broken) loaded.insert(p.name);
  }
  size_t checked = 0, scaled = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < plan.params().size(); ++i) {
    const PlannedParam& p = plan.params()[i];
    const ParamCertificate& c = plan.certificates()[i];
    if (p.absent || !p.alias_of.empty()) {
      EXPECT_FALSE(c.checked) << label << " " << p.name;
      continue;
    }
    ++checked;
    EXPECT_TRUE(c.checked && c.ok) << label << " " << p.name;
    EXPECT_EQ(c.bytes, p.written_bytes()) << label << " " << p.name;
    if (p.written_bytes() > 0) {
      EXPECT_GE(c.ranges, 1u) << label << " " << p.name;
    }
    bytes += c.bytes;
    for (const auto& s : p.scales) EXPECT_TRUE(loaded.count(s)) << label << " " << p.name << " scale " << s;
    scaled += !p.scales.empty();
    if (!p.converts() && (p.dtype == DType::kF8_E4M3 || p.dtype == DType::kU8 || p.dtype == DType::kI64) &&
        p.name.find("scale") == std::string::npos && p.name.find("weight") != std::string::npos) {
      EXPECT_FALSE(p.scales.empty()) << label << ": a quantised weight declares its scales: " << p.name;
    }
  }
  // The JSON reports it: a top-level summary and each parameter's certificate.
  simdjson::dom::parser parser;
  const simdjson::padded_string text(plan.to_json());
  const simdjson::dom::element doc = parser.parse(text).value();
  EXPECT_EQ(doc["version"].get_uint64().value(), 10u);
  const simdjson::dom::object cert = doc["certificate"].get_object().value();
  EXPECT_TRUE(cert["ok"].get_bool().value()) << label;
  EXPECT_EQ(cert["params"].get_uint64().value(), checked) << label;
  EXPECT_EQ(cert["certified"].get_uint64().value(), checked) << label;
  EXPECT_EQ(cert["bytes"].get_uint64().value(), bytes) << label;
  EXPECT_EQ(cert["scaled"].get_uint64().value(), scaled) << label;
  size_t with_coverage = 0;
  const simdjson::dom::array params = doc["params"].get_array().value();  // named: see listing.h
  for (simdjson::dom::object p : params) {
    simdjson::dom::object c;
    if (p["coverage"].get_object().get(c) != simdjson::SUCCESS) continue;
    ++with_coverage;
    EXPECT_TRUE(c["ok"].get_bool().value()) << label << " " << p["name"].get_string().value();
    simdjson::dom::object convert;
    const uint64_t written = p["convert"].get_object().get(convert) == simdjson::SUCCESS
                                 ? convert["assembled_bytes"].get_uint64().value()
                                 : p["nbytes"].get_uint64().value();
    EXPECT_EQ(c["bytes"].get_uint64().value(), written) << label << " " << p["name"].get_string().value();
  }
  EXPECT_EQ(with_coverage, checked) << label;
  return scaled;
}

TEST(CoverageFamilies, EveryParameterOfRealFamilyPlansIsCertified) {
  TempDir dir;
  struct Case {
    std::string family, args, layout;
    uint32_t tp, rank, ep;
    Target target;
    bool quantised;
  };
  const std::vector<Case> cases{
      {"llama", "", "llama", 2, 1, 1, Target::kTrtllm, false},
      {"llama", "--nvfp4", "llama nvfp4", 2, 0, 1, Target::kTrtllm, true},
      {"deepseek_v3", "--fp8 --moe-intermediate 256", "deepseek fp8 trtllm", 2, 1, 2, Target::kTrtllm, true},
      {"deepseek_v3", "--fp8 --moe-intermediate 256", "deepseek fp8 vllm", 2, 0, 2, Target::kVllm, true},
      {"deepseek_v32", "--fp8 --moe-intermediate 256", "deepseek v3.2 fp8 vllm", 2, 1, 1, Target::kVllm, true},
      {"gpt_oss", "", "gpt-oss trtllm", 2, 1, 2, Target::kTrtllm, true},
      {"gpt_oss", "", "gpt-oss vllm", 2, 0, 1, Target::kVllm, true},
  };
  std::map<std::string, std::filesystem::path> made;
  for (const Case& c : cases) {
    const std::string key = c.family + c.args;
    if (!made.count(key))
      made[key] = synth_checkpoint(dir.path(), c.family, "ck" + std::to_string(made.size()), c.args);
    LoaderSession session(rank_options(made[key], c.tp, c.rank, c.ep, c.target));
    const auto prepared = session.prepare();
    const size_t scaled = expect_certified(*prepared->plan, c.layout);
    if (c.quantised) {
      EXPECT_GT(scaled, 0u) << c.layout << ": its quantised weights declare their scales";
    } else {
      EXPECT_EQ(scaled, 0u) << c.layout;
    }
  }
}

TEST(CoverageFamilies, PlanPrintsTheCertificate) {
  TempDir dir;
  const auto ck = synth_checkpoint(dir.path(), "deepseek_v3", "ds", "--fp8");
  auto r = run_wmap("plan " + shell_quote(ck.string()) + " --tp-size 2 --tp-rank 1 --ep-size 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("certificate: certified: every destination byte of "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("quantised weight(s) with their scales"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace wmap::test
