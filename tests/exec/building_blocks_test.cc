// The core's building blocks for source layouts beyond Llama's (docs/plugins.md "Building
// blocks"), each on its own: zero padding (Piece::pad) planned, validated, scheduled and
// executed (host, pread and mmap, 1 and 3 workers, banded and whole), against expectations
// computed here element by element; a stacked 3-D expert tensor whose EP and TP parts are one
// byte range per expert; row interleave; the within-head pair permutation; MXFP4 group
// boundaries; padding before the split; the rank-dependent zero; the BF16 -> F32 widening and
// the 128x4 block-scale interleave.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "test_util.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/exec/executor.h"
#include "wmap/format/dtype_convert.h"
#include "wmap/format/layout_transforms.h"
#include "wmap/format/safetensors_writer.h"
#include "wmap/format/strided_copy.h"
#include "wmap/plan/load_plan.h"
#include "wmap/spec/linear_spec.h"
#include "wmap/util/error.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

TensorToWrite u8_tensor(std::string name, std::vector<uint64_t> shape) {
  uint64_t n = 1;
  for (auto d : shape) n *= d;
  return {std::move(name), DType::kU8, std::move(shape), n, [](std::span<std::byte> dst) {
            for (size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<std::byte>((i * 13 + 1) & 0xff);
          }};
}
uint8_t src_byte(uint64_t i) { return static_cast<uint8_t>((i * 13 + 1) & 0xff); }

struct Built {
  std::shared_ptr<const Catalog> catalog;
  LoadPlan plan;
};

Built plan_of(const fs::path& dir, std::vector<ParamSpec> params, uint64_t chunk = 16 << 20,
              uint64_t max_read_gap = PlanOptions{}.max_read_gap) {
  auto catalog = std::make_shared<const Catalog>(Catalog::build(discover_shards(dir)));
  ModelSpec spec;
  spec.plugin = "test";
  spec.architecture = "Test";
  spec.modules.push_back({"m", std::move(params), {}});
  PlanOptions o;
  o.chunk_bytes = chunk;
  o.max_read_gap = max_read_gap;
  LoadPlan plan = LoadPlan::build(spec, catalog, RenameTable(), o);
  return {catalog, std::move(plan)};
}

// Loads `plan` every way the executor can and hands each parameter's bytes to `check`.
void for_each_load(const LoadPlan& plan,
                   const std::function<void(const std::string&, const std::vector<uint8_t>&)>& check) {
  auto device = make_device("host");
  for (IoMode io : {IoMode::kPread, IoMode::kMmap}) {
    for (unsigned workers : {1u, 3u}) {
      SCOPED_TRACE(std::string(io_mode_name(io)) + " workers " + std::to_string(workers));
      ExecOptions exec;
      static const TransformFn widen = widen_bf16_to_f32;  // the built-in the loader registers
      exec.transforms = [](std::string_view n) -> const TransformFn* { return n == "bf16_to_f32" ? &widen : nullptr; };
      exec.io = io;
      exec.read_workers = workers;
      exec.load_workers = workers;
      const LoadedModel m = execute_plan(plan, *device, exec);
      for (const PlannedParam& p : plan.params()) {
        const LoadedParam* lp = m.find(p.name);
        ASSERT_NE(lp, nullptr) << p.name;
        std::vector<uint8_t> got(lp->buffer->size());
        device->copy_to_host(*lp->buffer, std::as_writable_bytes(std::span(got)));
        check(p.name, got);
      }
    }
  }
}

ParamSpec u8_param(std::string name, std::vector<uint64_t> shape, std::vector<Piece> pieces) {
  ParamSpec p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.dtype = DType::kU8;
  p.pieces = std::move(pieces);
  return p;
}

// A stacked [E, R, C] expert tensor: experts [1, 3), rows [2, 5) of each, padded to 4 rows and
// 7 columns (the corner holds the cut, the rest is zero); and a transposed, padded cut.
TEST(BuildingBlocks, PaddedCutsOfAStackedExpertTensorLoadAsComputedHere) {
  TempDir dir;
  const uint64_t E = 4, R = 6, C = 5;
  write_safetensors(dir / "model.safetensors", {u8_tensor("experts", {E, R, C})});
  Piece cut;
  cut.source = "experts";
  cut.source_shape = {E, R, C};
  cut.box = {{1, 3}, {2, 5}, {0, C}};
  Piece transposed = cut;
  transposed.perm = {0, 2, 1};
  const auto built = plan_of(dir.path(), {u8_param("padded", {2, 4, 7}, {spec::padded(cut, {2, 4, 7})}),
                                          u8_param("padded_t", {2, 6, 3}, {spec::padded(transposed, {2, 6, 3})})});
  ASSERT_TRUE(built.plan.ok()) << built.plan.problems().front().message;
  EXPECT_EQ(built.plan.bytes_to_read(), 2u * 2 * 3 * C) << "padding is written, never read";
  for_each_load(built.plan, [&](const std::string& name, const std::vector<uint8_t>& got) {
    const bool t = name == "padded_t";
    const uint64_t d1 = t ? 6 : 4, d2 = t ? 3 : 7;
    ASSERT_EQ(got.size(), 2 * d1 * d2) << name;
    for (uint64_t e = 0; e < 2; ++e) {
      for (uint64_t i = 0; i < d1; ++i) {
        for (uint64_t j = 0; j < d2; ++j) {
          // Source coordinates of output (e, i, j), or none (padding).
          const uint64_t r = t ? j : i, c = t ? i : j;
          const bool inside = r < 3 && c < C;
          const uint8_t want = inside ? src_byte(((1 + e) * R + 2 + r) * C + c) : 0;
          ASSERT_EQ(got[(e * d1 + i) * d2 + j], want) << name << " [" << e << "," << i << "," << j << "]";
        }
      }
    }
  });
}

// A padded cut whose outer dim is not padded is banded like any per-expert copy (each band's
// output contiguous); a rank's rows far apart in a stacked tensor are read one expert at a
// time, not through the other ranks' rows.
TEST(BuildingBlocks, APaddedStackedCutReadsOnlyItsOwnRowsOneExpertABand) {
  TempDir dir;
  const uint64_t E = 8, R = 512, C = 256;  // 128 KiB an expert
  write_safetensors(dir / "model.safetensors", {u8_tensor("experts", {E, R, C})});
  Piece cut;
  cut.source = "experts";
  cut.source_shape = {E, R, C};
  cut.box = {{0, E}, {128, 256}, {0, C}};  // rank 1 of 4: 32 KiB an expert, 96 KiB gaps
  const auto built = plan_of(dir.path(), {u8_param("w", {E, 160, C}, {spec::padded(cut, {E, 160, C})})}, 1 << 20);
  ASSERT_TRUE(built.plan.ok()) << built.plan.problems().front().message;
  uint64_t read = 0, copies = 0;
  for (const ReadUnit& u : built.plan.schedule().units()) {
    if (u.kind != ReadUnit::Kind::kCopy) continue;
    ++copies;
    read += u.end - u.begin;
    EXPECT_EQ(u.rows_end - u.rows_begin, 1u);
    EXPECT_EQ(u.dst_off, u.rows_begin * 160 * C);
  }
  EXPECT_EQ(copies, E);
  EXPECT_EQ(read, E * 128 * C) << "bytes read = bytes the rank keeps";
  for_each_load(built.plan, [&](const std::string&, const std::vector<uint8_t>& got) {
    for (uint64_t e = 0; e < E; ++e) {
      for (uint64_t i = 0; i < 160; ++i) {
        for (uint64_t j = 0; j < C; j += 37) {
          const uint8_t want = i < 128 ? src_byte((e * R + 128 + i) * C + j) : 0;
          ASSERT_EQ(got[(e * 160 + i) * C + j], want) << e << "," << i << "," << j;
        }
      }
    }
  });
}

// Read units of plain cuts stop at a gap wider than 64 KiB (another rank's rows of a stacked
// tensor) even when the span would fit in one chunk: two reads, not one through the gap.
TEST(BuildingBlocks, ReadUnitsDoNotReadThroughAnotherRanksRows) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {u8_tensor("experts", {4, 64, 1024})});  // 64 KiB an expert
  Piece near, far;
  near.source = far.source = "experts";
  near.source_shape = far.source_shape = {4, 64, 1024};
  near.box = {{0, 1}, {0, 60}, {0, 1024}};  // a 4 KiB gap to the next cut
  far.box = {{1, 2}, {0, 8}, {0, 1024}};
  Piece last = far;
  last.box = {{3, 4}, {0, 8}, {0, 1024}};  // 120 KiB after `far`
  const auto built = plan_of(dir.path(), {u8_param("a", {1, 60, 1024}, {near}), u8_param("b", {1, 8, 1024}, {far}),
                                          u8_param("c", {1, 8, 1024}, {last})});
  ASSERT_TRUE(built.plan.ok()) << built.plan.problems().front().message;
  std::vector<std::pair<uint64_t, uint64_t>> reads;
  for (const ReadUnit& u : built.plan.schedule().units()) reads.emplace_back(u.end - u.begin, u.wanted);
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[0].first, (64 + 8) * 1024u) << "a and b share a read across a 4 KiB gap";
  EXPECT_EQ(reads[1].first, reads[1].second) << "c is read alone";
}

// PlanOptions::max_read_gap: a row-parallel slice (1 KiB of every 8 KiB row, as a TP8 o_proj)
// is read through its 7 KiB gaps by default, and one read per row below them; both load the
// same bytes, and the plan id tells the two schedules apart.
TEST(BuildingBlocks, MaxReadGapChoosesBetweenReadingThroughAndAReadPerRow) {
  TempDir dir;
  const uint64_t R = 64, C = 8192;
  write_safetensors(dir / "model.safetensors", {u8_tensor("o_proj", {R, C})});
  Piece slice;
  slice.source = "o_proj";
  slice.source_shape = {R, C};
  slice.box = {{0, R}, {3 * 1024, 4 * 1024}};
  const auto through = plan_of(dir.path(), {u8_param("o", {R, 1024}, {slice})});
  const auto strided = plan_of(dir.path(), {u8_param("o", {R, 1024}, {slice})}, 16 << 20, 4096);
  ASSERT_TRUE(through.plan.ok() && strided.plan.ok());
  ASSERT_EQ(through.plan.schedule().units().size(), 1u);
  const ReadUnit& whole = through.plan.schedule().units()[0];
  EXPECT_EQ(whole.end - whole.begin, (R - 1) * C + 1024) << "one read through every gap";
  EXPECT_EQ(whole.wanted, R * 1024);
  ASSERT_EQ(strided.plan.schedule().units().size(), R);
  for (const ReadUnit& u : strided.plan.schedule().units()) EXPECT_EQ(u.end - u.begin, 1024u) << "a read per row";
  EXPECT_EQ(strided.plan.schedule().max_read_gap(), 4096u);
  EXPECT_NE(through.plan.plan_id(), strided.plan.plan_id());
  for (const Built* b : {&through, &strided}) {
    for_each_load(b->plan, [&](const std::string&, const std::vector<uint8_t>& got) {
      for (uint64_t i = 0; i < R; ++i) {
        for (uint64_t j = 0; j < 1024; j += 61) ASSERT_EQ(got[i * 1024 + j], src_byte(i * C + 3 * 1024 + j));
      }
    });
  }
}

// A run-dense slice (192 of every 1440 bytes of every expert, a TP8 gpt-oss down_proj under vLLM)
// is grouped many runs per step: its units are what they would be run by run (each within a
// chunk, their segments every run once in order), and it loads as computed here.
TEST(BuildingBlocks, RunDenseSlicesAreGroupedIntoChunkSizedReads) {
  TempDir dir;
  const uint64_t E = 4, H = 96, W = 1440;
  write_safetensors(dir / "model.safetensors", {u8_tensor("down", {E, H, W})});
  Piece cut;
  cut.source = "down";
  cut.source_shape = {E, H, W};
  cut.box = {{0, E}, {0, H}, {576, 768}};
  const auto built = plan_of(dir.path(), {u8_param("d", {E, H, 192}, {cut})}, 1 << 16);
  ASSERT_TRUE(built.plan.ok());
  const ReadSchedule& s = built.plan.schedule();
  std::vector<UnitSegment> segs;
  uint64_t next = 0, units = 0;
  for (const ReadUnit& u : s.units()) {
    ASSERT_EQ(u.kind, ReadUnit::Kind::kRead);
    ++units;
    EXPECT_LE(u.end - u.begin, s.chunk_bytes());
    s.segments(u, built.plan.params(), segs);
    ASSERT_EQ(segs.size(), u.segments);
    EXPECT_EQ(segs.front().offset, u.begin);
    EXPECT_EQ(segs.back().offset + segs.back().len, u.end);
    for (const UnitSegment& g : segs) {
      const uint64_t row = next++;
      EXPECT_EQ(g.len, 192u);
      EXPECT_EQ(g.offset, built.catalog->find("down")->offset + row * W + 576) << row;
      EXPECT_EQ(g.dst_off, row * 192) << row;
    }
  }
  EXPECT_EQ(next, E * H) << "every run once";
  // A unit takes as many 1440-byte strides as fit in 64 KiB (45 runs, the last 192 bytes in).
  EXPECT_EQ(units, (E * H + 45) / 46);
  for_each_load(built.plan, [&](const std::string&, const std::vector<uint8_t>& got) {
    for (uint64_t r = 0; r < E * H; ++r) {
      for (uint64_t j = 0; j < 192; j += 17) ASSERT_EQ(got[r * 192 + j], src_byte(r * W + 576 + j)) << r;
    }
  });
}

// A fused source cut before the split (Phi-3's qkv_proj rows [q; k; v]): each part is split as
// if it were its own tensor, rows counted from the part's start; out-of-range parts and rows are
// refused naming the weight.
TEST(BuildingBlocks, FusedPartRowsAreRowsOfThePartThenTheSplit) {
  const std::vector<uint64_t> fused{40, 8};  // q 16 rows, k 12, v 12
  Split tp{.size = 4, .rank = 3};
  const auto q = spec::fused_part_rows("a.qkv_proj", fused, {0, 16}, tp);
  EXPECT_EQ(q.rows, (Range{12, 16}));
  const auto k = spec::fused_part_rows("a.qkv_proj", fused, {16, 28}, tp);
  EXPECT_EQ(k.rows, (Range{25, 28}));
  EXPECT_EQ(k.linear, "a.qkv_proj");
  EXPECT_EQ(k.shape, fused);
  const auto v = spec::fused_part_rows("a.qkv_proj", fused, {28, 40}, Range{3, 6});  // a KV head of 3 rows
  EXPECT_EQ(v.rows, (Range{31, 34}));
  tp.exact = true;
  tp.size = 5;
  EXPECT_THROW(
      {
        try {
          spec::fused_part_rows("a.qkv_proj", fused, {16, 28}, tp);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("a.qkv_proj.weight rows [16, 28)"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW(spec::fused_part_rows("a.qkv_proj", fused, {28, 44}, Range{0, 1}), Error);
  EXPECT_THROW(spec::fused_part_rows("a.qkv_proj", fused, {28, 40}, Range{10, 13}), Error);
  // The parts load as the rows they name.
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {u8_tensor("a.qkv_proj.weight", fused)});
  ParamSpec p;
  p.name = "qkv";
  p.dtype = DType::kU8;
  p.shape = {4 + 3 + 3, 8};
  for (const auto& s : {q, k, v}) {
    Piece piece;
    piece.source = s.linear + ".weight";
    piece.source_shape = s.shape;
    piece.box = {s.rows, s.cols};
    p.pieces.push_back(piece);
  }
  const auto built = plan_of(dir.path(), {p});
  ASSERT_TRUE(built.plan.ok()) << built.plan.problems().front().message;
  for_each_load(built.plan, [&](const std::string&, const std::vector<uint8_t>& got) {
    const uint64_t rows[] = {12, 13, 14, 15, 25, 26, 27, 31, 32, 33};
    for (uint64_t i = 0; i < 10; ++i) {
      for (uint64_t j = 0; j < 8; ++j) ASSERT_EQ(got[i * 8 + j], src_byte(rows[i] * 8 + j)) << i << "," << j;
    }
  });
}

// Row interleave undone (gpt-oss gate/up rows 2j, 2j+1 under TensorRT-LLM) and kept; the
// within-head pair permutation (vLLM's Llama 4 q/k).
TEST(BuildingBlocks, InterleaveAndPairPermutationLoadAsComputedHere) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {u8_tensor("gate_up", {2, 8, 3}), u8_tensor("q", {12, 2})});
  // Expert 1, stream rows [1, 3) of phase 1 (up) then phase 0 (gate): rows 3, 5 then 2, 4.
  const Range one{1, 2};
  const Piece up = spec::interleaved("gate_up", {2, 8, 3}, 1, 2, 1, {1, 3}, {one, {}, {0, 3}});
  const Piece gate = spec::interleaved("gate_up", {2, 8, 3}, 1, 2, 0, {1, 3}, {one, {}, {0, 3}});
  // q: 3 heads of 4 rows; heads [1, 3), each head's rows 0,2 then 1,3.
  const Piece q = spec::pairs_to_halves("q", {12, 2}, 4, {1, 3});
  // The same [up; gate] as one piece: the stream dim moved before the rows and walked backwards.
  Piece both;
  both.source = "gate_up";
  both.source_shape = {2, 8, 3};
  both.view = {2, 4, 2, 3};
  both.box = {one, {1, 3}, {0, 2}, {0, 3}};
  both.perm = {0, 2, 1, 3};
  both.reverse = {2};
  const auto built = plan_of(dir.path(), {u8_param("up_gate", {4, 3}, {up, gate}), u8_param("q_perm", {8, 2}, {q}),
                                          u8_param("up_gate_reversed", {6, 3}, {spec::padded(both, {1, 2, 3, 3})})});
  ASSERT_TRUE(built.plan.ok()) << built.plan.problems().front().message;
  for_each_load(built.plan, [&](const std::string& name, const std::vector<uint8_t>& got) {
    if (name == "up_gate_reversed") {
      // [up rows 3, 5 then gate rows 2, 4], each stream padded from 2 rows to 3 (a zero row).
      const int64_t rows[] = {3, 5, -1, 2, 4, -1};
      ASSERT_EQ(got.size(), 18u);
      for (uint64_t i = 0; i < 6; ++i) {
        for (uint64_t c = 0; c < 3; ++c) {
          ASSERT_EQ(got[i * 3 + c], rows[i] < 0 ? 0 : src_byte((8 + rows[i]) * 3 + c)) << i << "," << c;
        }
      }
    } else if (name == "up_gate") {
      const uint64_t rows[] = {3, 5, 2, 4};
      for (uint64_t i = 0; i < 4; ++i) {
        for (uint64_t c = 0; c < 3; ++c) ASSERT_EQ(got[i * 3 + c], src_byte((8 + rows[i]) * 3 + c)) << i << "," << c;
      }
    } else {
      const uint64_t rows[] = {4, 6, 5, 7, 8, 10, 9, 11};
      for (uint64_t i = 0; i < 8; ++i) {
        for (uint64_t c = 0; c < 2; ++c) ASSERT_EQ(got[i * 2 + c], src_byte(rows[i] * 2 + c)) << i << "," << c;
      }
    }
  });
  EXPECT_THROW(spec::interleaved("x", {2, 7, 3}, 1, 2, 0, {0, 1}), Error);  // 7 rows are not pairs
  EXPECT_THROW(spec::pairs_to_halves("x", {12, 2}, 3, {0, 1}), Error);      // odd head rows
}

TEST(BuildingBlocks, PaddedSplitGroupsAndRankZero) {
  // TensorRT-LLM pads I = 96 to 256 over 2 ranks: rank 0 holds [0, 96) and 32 zero rows, rank 1 only zeros.
  EXPECT_EQ(spec::padded_split(96, 256, {2, 0}).source, (Range{0, 96}));
  EXPECT_EQ(spec::padded_split(96, 256, {2, 0}).size, 128u);
  EXPECT_EQ(spec::padded_split(96, 256, {2, 1}).source, (Range{96, 96}));
  EXPECT_EQ(spec::padded_split(2880, 3072, {4, 3}).source, (Range{2304, 2880}));
  EXPECT_EQ(spec::whole_groups({64, 96}, 32, 96, "t"), (Range{2, 3}));
  EXPECT_EQ(spec::whole_groups({64, 90}, 32, 90, "t"), (Range{2, 3})) << "a part may end at the width";
  try {
    spec::whole_groups({48, 96}, 32, 96, "layers.0.mlp.experts.down_proj_blocks");
    FAIL() << "a split inside a group must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("layers.0.mlp.experts.down_proj_blocks: elements [48, 96) of 96 do not "
                                         "start and end on a group of 32"),
              std::string::npos)
        << e.what();
  }
  ParamSpec bias = spec::replicated("b", "bias", {4});
  EXPECT_THROW(spec::zero_unless(false, bias), Error) << "zeros need the dtype";
  bias.dtype = DType::kBF16;
  EXPECT_EQ(spec::zero_unless(true, bias).pieces.front().source, "bias");
  const ParamSpec zero = spec::zero_unless(false, bias);
  ASSERT_EQ(zero.pieces.size(), 1u);
  EXPECT_TRUE(zero.pieces.front().is_zero());
  EXPECT_EQ(zero.pieces.front().zero_elements, 4u);
}

// A rank past the end of a source padded before its split: its cut is empty, its parameter zeros.
TEST(BuildingBlocks, AnEmptyPaddedCutIsAZeroUnitAndBadPadsAreSpecProblems) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {u8_tensor("t", {4, 8})});
  Piece empty;
  empty.source = "t";
  empty.source_shape = {4, 8};
  empty.box = {{4, 4}, {0, 8}};
  Piece small = empty, wrong_rank = empty;
  small.box = {{0, 4}, {0, 8}};
  const auto built = plan_of(dir.path(), {u8_param("z", {2, 8}, {spec::padded(empty, {2, 8})}),
                                          u8_param("bad", {3, 8}, {spec::padded(small, {3, 8})}),
                                          u8_param("bad_rank", {32}, {spec::padded(wrong_rank, {32})})});
  ASSERT_EQ(built.plan.problems().size(), 2u);
  EXPECT_NE(built.plan.problems()[0].message.find("pad [3, 8] is smaller than the cut along output dim 0 (4)"),
            std::string::npos)
      << built.plan.problems()[0].message;
  EXPECT_NE(built.plan.problems()[1].message.find("pad [32] has 1 extents for a view of rank 2"), std::string::npos)
      << built.plan.problems()[1].message;
  const ReadUnit& z = built.plan.schedule().units().front();
  EXPECT_EQ(z.kind, ReadUnit::Kind::kZero);
}

TEST(BuildingBlocks, Bf16WidensExactlyIntoTheRoomItsPaddingReserves) {
  const uint16_t in[] = {0x3f80, 0xc000, 0x7f80, 0x0001};  // 1, -2, +inf, the smallest subnormal
  std::vector<std::byte> data(16);
  std::memcpy(data.data(), in, sizeof in);
  widen_bf16_to_f32(data, DType::kF32, "sinks", {});
  uint32_t out[4];
  std::memcpy(out, data.data(), 16);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], uint32_t{in[i]} << 16) << i;
  std::vector<std::byte> odd(6);
  EXPECT_THROW(widen_bf16_to_f32(odd, DType::kF32, "sinks", {}), Error);
  EXPECT_THROW(widen_bf16_to_f32(data, DType::kBF16, "sinks", {}), Error);
}

// F16 -> F32 (FP8 block scales stored as F16, widened as copy_ into an F32 parameter does): every
// class of value, each expected bit pattern numpy's float16 -> float32 gives.
TEST(BuildingBlocks, F16WidensExactlyEveryClassOfValue) {
  const std::pair<uint16_t, uint32_t> cases[] = {
      {0x3c00, 0x3f800000}, {0x7bff, 0x477fe000}, {0x0400, 0x38800000},  // 1, 65504, the smallest normal
      {0x0001, 0x33800000}, {0x03ff, 0x387fc000}, {0x8001, 0xb3800000},  // subnormals, normalised
      {0x8000, 0x80000000}, {0x7c00, 0x7f800000}, {0xfc00, 0xff800000},  // -0, +inf, -inf
      {0x7e01, 0x7fc02000}, {0x7c01, 0x7f802000},                        // NaN payloads kept
  };
  constexpr size_t n = sizeof cases / sizeof cases[0];
  std::vector<std::byte> data(4 * n);
  for (size_t i = 0; i < n; ++i) std::memcpy(data.data() + 2 * i, &cases[i].first, 2);
  widen_f16_to_f32(data, DType::kF32, "scale", {});
  for (size_t i = 0; i < n; ++i) {
    uint32_t out;
    std::memcpy(&out, data.data() + 4 * i, 4);
    EXPECT_EQ(out, cases[i].second) << std::hex << cases[i].first;
  }
  std::vector<std::byte> odd(6);
  EXPECT_THROW(widen_f16_to_f32(odd, DType::kF32, "scale", {}), Error);
}

// spec::widened_bf16_to_f32: a BF16 cut of a 2-D tensor (rows [1, 4) of a [5, 6] router, as
// vLLM's GLM holds its gate in F32) lands as exact F32 values, through the plan and the executor.
TEST(BuildingBlocks, WidenedPiecesCastABf16CutToF32Exactly) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {{"gate", DType::kBF16, {5, 6}, 60, [](std::span<std::byte> dst) {
                                                   for (size_t i = 0; i < dst.size(); ++i)
                                                     dst[i] = static_cast<std::byte>(i * 7 + 3);
                                                 }}});
  const Piece cut = spec::rows("gate", {5, 6}, {1, 4});
  const Piece wide = spec::widened_bf16_to_f32(cut);
  EXPECT_EQ(wide.pad, (std::vector<uint64_t>{6, 6}));
  EXPECT_EQ(wide.transform, "bf16_to_f32");
  ParamSpec p;
  p.name = "gate_f32";
  p.shape = {3, 6};
  p.dtype = DType::kF32;
  p.pieces = {wide};
  const auto built = plan_of(dir.path(), {p});
  ASSERT_TRUE(built.plan.ok()) << built.plan.problems().front().message;
  for_each_load(built.plan, [&](const std::string&, const std::vector<uint8_t>& got) {
    ASSERT_EQ(got.size(), 3u * 6 * 4);
    for (uint64_t e = 0; e < 18; ++e) {
      const uint64_t src = (6 + e) * 2;  // BF16 element 6 + e of the tensor
      const uint32_t bf16 = uint32_t(uint8_t(src * 7 + 3)) | uint32_t(uint8_t((src + 1) * 7 + 3)) << 8;
      uint32_t f32;
      std::memcpy(&f32, got.data() + e * 4, 4);
      ASSERT_EQ(f32, bf16 << 16) << e;
    }
  });
  EXPECT_THROW(spec::widened_bf16_to_f32(wide), Error);  // already padded and transformed
  EXPECT_THROW(spec::widened_bf16_to_f32(spec::zeros(4)), Error);
}

// The element conversions against values worked out by hand: F32 -> BF16 rounds to nearest,
// ties to even, keeps NaN a (quiet) NaN and infinities; FP8 E4M3 ("fn") decodes normals,
// subnormals and its one NaN pattern.
TEST(BuildingBlocks, F32ToBf16RoundsToNearestEvenAndFp8E4m3Decodes) {
  EXPECT_EQ(f32_bits_to_bf16_rne(0x3f800000u), 0x3f80);    // 1.0
  EXPECT_EQ(f32_bits_to_bf16_rne(0x3f808000u), 0x3f80);    // halfway, even below: down
  EXPECT_EQ(f32_bits_to_bf16_rne(0x3f818000u), 0x3f82);    // halfway, odd below: up
  EXPECT_EQ(f32_bits_to_bf16_rne(0x3f808001u), 0x3f81);    // above halfway: up
  EXPECT_EQ(f32_bits_to_bf16_rne(0x7f7fffffu), 0x7f80);    // FLT_MAX rounds to +inf, as torch does
  EXPECT_EQ(f32_bits_to_bf16_rne(0xff800000u), 0xff80);    // -inf
  EXPECT_EQ(f32_bits_to_bf16_rne(0xff800001u), 0x7fc0);    // any NaN: torch's canonical one
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);                  // 0.0111.000
  EXPECT_EQ(fp8_e4m3_to_f32(0xc4), -3.0f);                 // 1.1000.100 = -(1.5 x 2)
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);                // the largest finite value
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  // NaN as torch writes it (c10 fp8e4m3fn_to_fp32_value), sign kept: 0x7ff00000, 0xfff00000.
  auto bits = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  EXPECT_EQ(bits(fp8_e4m3_to_f32(0x7f)), 0x7ff00000u);
  EXPECT_EQ(bits(fp8_e4m3_to_f32(0xff)), 0xfff00000u);
  EXPECT_EQ(fp8_e4m3_to_f32(0x80), -0.0f);
}

TensorToWrite typed_tensor(std::string name, DType dtype, std::vector<uint64_t> shape, std::vector<uint8_t> bytes) {
  const uint64_t n = bytes.size();
  return {std::move(name), dtype, std::move(shape), n,
          [bytes](std::span<std::byte> dst) { std::memcpy(dst.data(), bytes.data(), bytes.size()); }};
}

// Conversions of whole parameters, planned and executed: an F32 norm held as BF16 (both engines'
// DeepSeek-V3.2 norms), and an FP8 [4, 6] weight with 2x4 blocks dequantized into BF16 and F32
// with a BF16 piece copied after it (vLLM's fused indexer wk_weights_proj).
TEST(BuildingBlocks, ConvertedParamsNarrowToBf16AndDequantizeFp8Blocks) {
  TempDir dir;
  std::vector<uint8_t> norm(4 * 5), w(24), scales(4 * 2 * 2), tail(2 * 6 * 2);
  const float norm_values[] = {1.0f, -2.5f, 1.00390625f, 3.0e-3f, 65504.0f};
  std::memcpy(norm.data(), norm_values, sizeof norm_values);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(0x30 + i * 5);  // assorted normals
  const float scale_values[] = {0.5f, 2.0f, -1.0f, 0.125f};                         // [2, 2] blocks of 2x4
  std::memcpy(scales.data(), scale_values, sizeof scale_values);
  for (size_t i = 0; i < tail.size(); ++i) tail[i] = static_cast<uint8_t>(i * 11 + 1);
  write_safetensors(
      dir / "model.safetensors",
      {typed_tensor("norm", DType::kF32, {5}, norm), typed_tensor("wk", DType::kF8_E4M3, {4, 6}, w),
       typed_tensor("wk_scale", DType::kF32, {2, 2}, scales), typed_tensor("proj", DType::kBF16, {2, 6}, tail)});
  ParamSpec narrow;
  narrow.name = "norm_bf16";
  narrow.shape = {5};
  narrow.pieces = {spec::whole("norm", {5})};
  narrow = spec::narrowed_to_bf16(narrow);
  auto dequant = [&](const std::string& name, DType dtype) {
    ParamSpec p;
    p.name = name;
    p.dtype = dtype;
    p.shape = {6, 6};  // 4 dequantized rows, then 2 copied BF16 rows (as F32 only when dtype is BF16)
    p.pieces = {spec::whole("wk", {4, 6}), spec::whole("wk_scale", {2, 2})};
    if (dtype == DType::kBF16) {
      Piece t = spec::whole("proj", {2, 6});
      t.source_dtype = DType::kBF16;
      p.pieces.push_back(t);
    } else {
      p.shape = {4, 6};
    }
    return spec::fp8_block_dequantized(p, 4, 6, 2, 4);
  };
  const auto built =
      plan_of(dir.path(), {narrow, dequant("wk_weights_proj", DType::kBF16), dequant("wk_f32", DType::kF32)});
  ASSERT_TRUE(built.plan.ok()) << built.plan.problems().front().message;
  const std::string json = built.plan.to_json();
  EXPECT_NE(json.find("\"convert\":{\"kind\":\"fp8_block_dequant\",\"rows\":4,\"cols\":6,\"block\":[2,4],"
                      "\"assembled_bytes\":64}"),
            std::string::npos)
      << json;
  auto value = [&](uint64_t r, uint64_t c) {
    return fp8_e4m3_to_f32(w[r * 6 + c]) * scale_values[(r / 2) * 2 + c / 4];
  };
  for_each_load(built.plan, [&](const std::string& name, const std::vector<uint8_t>& got) {
    if (name == "norm_bf16") {
      ASSERT_EQ(got.size(), 10u);
      const uint16_t want[] = {0x3f80, 0xc020, 0x3f80, 0x3b45, 0x4780};  // 1.00390625 ties to even: 1.0
      for (int i = 0; i < 5; ++i) {
        uint16_t h;
        std::memcpy(&h, got.data() + 2 * i, 2);
        EXPECT_EQ(h, want[i]) << i;
      }
    } else if (name == "wk_f32") {
      ASSERT_EQ(got.size(), 4u * 6 * 4);
      for (uint64_t e = 0; e < 24; ++e) {
        float f;
        std::memcpy(&f, got.data() + 4 * e, 4);
        EXPECT_EQ(f, value(e / 6, e % 6)) << e;
      }
    } else {
      ASSERT_EQ(got.size(), 6u * 6 * 2);
      for (uint64_t e = 0; e < 24; ++e) {
        const float x = value(e / 6, e % 6);
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        uint16_t h;
        std::memcpy(&h, got.data() + 2 * e, 2);
        EXPECT_EQ(h, f32_bits_to_bf16_rne(bits)) << e;
      }
      EXPECT_EQ(std::memcmp(got.data() + 48, tail.data(), tail.size()), 0) << "the BF16 rows after are copied";
    }
  });
  // A conversion that does not fit its parameter is a spec problem, offline.
  ParamSpec wrong = narrow;
  wrong.shape = {4};
  wrong.name = "norm_short";
  const auto bad =
      plan_of(dir.path(), {wrong, dequant("wk_weights_proj", DType::kBF16), dequant("wk_f32", DType::kF32)});
  ASSERT_FALSE(bad.plan.ok());
  EXPECT_NE(bad.plan.problems().front().message.find("norm_short BF16[4] (f32_to_bf16) needs 16 bytes but its "
                                                     "pieces give 20"),
            std::string::npos)
      << bad.plan.problems().front().message;
}

TEST(BuildingBlocks, BlockScaleInterleaveIsThe128x4SwizzleAndAPermutation) {
  // Hand-checked from TensorRT-LLM's formula, 8 columns.
  EXPECT_EQ(block_scale_interleave_index(1, 0, 8), 16u);
  EXPECT_EQ(block_scale_interleave_index(32, 0, 8), 4u);
  EXPECT_EQ(block_scale_interleave_index(0, 4, 8), 512u);
  EXPECT_EQ(block_scale_interleave_index(128, 0, 8), 1024u);
  EXPECT_EQ(block_scale_interleave_index(37, 5, 8), 1u + 512 + 5 * 16 + 4);
  // In place, band by band: 8 columns, and gpt-oss's 92 (90 padded to whole groups of 4).
  for (const uint64_t cols : {uint64_t{8}, uint64_t{92}}) {
    std::vector<std::byte> m(256 * cols);
    for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<std::byte>(i * 7 & 0xff);
    const std::vector<std::byte> before = m;
    const uint64_t shape[] = {256, cols};
    block_scale_interleave_128x4(m, DType::kI32, "scales", shape);
    std::vector<bool> hit(m.size());
    for (uint64_t r = 0; r < 256; ++r) {
      for (uint64_t k = 0; k < cols; ++k) {
        const uint64_t to = block_scale_interleave_index(r, k, cols);
        ASSERT_LT(to, m.size());
        EXPECT_FALSE(hit[to]);
        hit[to] = true;
        ASSERT_EQ(m[to], before[r * cols + k]) << cols << " " << r << " " << k;
      }
    }
  }
  const uint64_t bad[] = {100, 8};
  std::vector<std::byte> rows100(800);
  EXPECT_THROW(block_scale_interleave_128x4(rows100, DType::kI32, "scales", bad), Error);
}

// The strided 2-D copy (transposes of stacked slabs) against an element-by-element loop, for
// every element size, ragged and whole 8 x 8 / 32 x 32 blocks (the vector 8 x 8 kernels of 2- and
// 4-byte transposes, and their ragged edges), transposed and plain steps, packed output rows and
// rows spread `out_row_step` apart (a column block of a wider matrix, whose other bytes stay);
// and transposes of whole panels with ragged edges, 1 MiB and more (streaming stores) into
// aligned and unaligned output rows.
TEST(BuildingBlocks, StridedCopyMatchesAnElementLoop) {
  for (uint64_t elem : {1u, 2u, 4u, 8u, 3u}) {
    for (const auto& [rows, cols] : {std::pair<uint64_t, uint64_t>{1, 1},
                                     {7, 9},
                                     {8, 8},
                                     {33, 40},
                                     {64, 17},
                                     {64, 96},
                                     {41, 70},
                                     {32, 64},
                                     {64, 64},
                                     {128, 64},
                                     {200, 150},
                                     {1030, 520}}) {
      for (const bool transposed : {true, false}) {
        for (const uint64_t spread : {0u, 3u, 8u}) {
          const uint64_t row_step = transposed ? elem : cols * elem + 5;
          const uint64_t col_step = transposed ? rows * elem + 6 : elem;
          const uint64_t pitch = (cols + spread) * elem;
          std::vector<std::byte> src(rows * row_step + cols * col_step + 16);
          for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>((i * 31 + 7) & 0xff);
          std::vector<std::byte> got(rows * pitch, std::byte{0x5a}), want(rows * pitch, std::byte{0x5a});
          copy_2d_strided(src.data(), rows, cols, row_step, col_step, elem, got.data(), spread ? pitch : 0);
          for (uint64_t i = 0; i < rows; ++i) {
            for (uint64_t j = 0; j < cols; ++j)
              std::memcpy(want.data() + i * pitch + j * elem, src.data() + i * row_step + j * col_step, elem);
          }
          ASSERT_EQ(got, want) << "elem " << elem << " " << rows << "x" << cols << (transposed ? " transposed" : "")
                               << " spread " << spread;
        }
      }
    }
  }
}

}  // namespace
}  // namespace wmap::test
