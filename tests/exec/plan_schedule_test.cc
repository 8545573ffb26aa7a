// The executor runs the plan's own schedule: a source shared by two parameters is released
// once, after its last reader; the reads a load issues (one read worker) are the schedule's
// units in the schedule's order; the schedule is in the plan's JSON and its id.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "test_util.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/exec/executor.h"
#include "wmap/format/safetensors_writer.h"
#include "wmap/loader/loader.h"
#include "wmap/plan/load_plan.h"
#include "wmap/plan/piece_runs.h"
#include "wmap/util/error.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

// Records every read (read(), populate()) and release() of the files it opens, in call order.
class RecordingFs final : public FileSystem {
 public:
  struct Event {
    enum Kind { kRead, kRelease } kind;
    uint64_t begin, end;
    std::string file;
  };
  std::unique_ptr<RandomAccessFile> open(const fs::path& path, IoMode mode) const override {
    return std::make_unique<File>(FileSystem::posix().open(path, mode), *this);
  }
  std::vector<Event> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }

 private:
  class File final : public RandomAccessFile {
   public:
    File(std::unique_ptr<RandomAccessFile> f, const RecordingFs& fs) : f_(std::move(f)), fs_(fs) {}
    const std::string& path() const override { return f_->path(); }
    uint64_t size() const override { return f_->size(); }
    void read(uint64_t o, std::span<std::byte> d) const override {
      fs_.add({Event::kRead, o, o + d.size(), path()});
      f_->read(o, d);
    }
    std::span<const std::byte> view(uint64_t o, uint64_t l) const override { return f_->view(o, l); }
    void release(uint64_t o, uint64_t l) const override {
      fs_.add({Event::kRelease, o, o + l, path()});
      f_->release(o, l);
    }
    void will_need(uint64_t o, uint64_t l) const override { f_->will_need(o, l); }
    void populate(uint64_t o, uint64_t l) const override {
      fs_.add({Event::kRead, o, o + l, path()});
      f_->populate(o, l);
    }

   private:
    std::unique_ptr<RandomAccessFile> f_;
    const RecordingFs& fs_;
  };
  void add(const Event& e) const {
    std::lock_guard lock(mu_);
    events_.push_back(e);
  }
  mutable std::mutex mu_;
  mutable std::vector<Event> events_;
};

TensorToWrite f32_tensor(std::string name, std::vector<uint64_t> shape, uint8_t seed) {
  uint64_t n = 4;
  for (auto d : shape) n *= d;
  return {std::move(name), DType::kF32, std::move(shape), n, [seed](std::span<std::byte> dst) {
            for (size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
          }};
}

// One shard: `big` (128 KiB, two 64 KiB chunks), `shared` (read by p_first and p_last), `t`
// (transposed: a copy unit), and a zero-only parameter.
class PlanSchedule : public ::testing::Test {
 protected:
  void SetUp() override {
    write_safetensors(dir_ / "model.safetensors", {f32_tensor("big", {512, 64}, 1), f32_tensor("shared", {64, 32}, 2),
                                                   f32_tensor("t", {32, 16}, 3), f32_tensor("tail", {16}, 4)});
    catalog_ = std::make_shared<const Catalog>(Catalog::build(discover_shards(dir_.path())));
    ModelSpec spec;
    spec.plugin = "test";
    spec.architecture = "Test";
    Piece transposed = spec::whole("t", {32, 16});
    transposed.perm = {1, 0};
    ParamSpec zeros;
    zeros.name = "p_zeros";
    zeros.shape = {10};
    zeros.dtype = DType::kF32;
    zeros.pieces = {spec::zeros(10)};
    ParamSpec t;
    t.name = "p_t";
    t.shape = {16, 32};
    t.pieces = {transposed};
    spec.modules.push_back(
        {"m",
         {spec::replicated("p_first", "shared", {64, 32}), spec::replicated("p_big", "big", {512, 64}), t, zeros,
          spec::replicated("p_tail", "tail", {16}), spec::replicated("p_last", "shared", {64, 32})},
         {}});
    spec_ = spec;
  }
  LoadPlan plan(uint64_t chunk_bytes) const {
    PlanOptions o;
    o.chunk_bytes = chunk_bytes;
    return LoadPlan::build(spec_, catalog_, RenameTable(), o);
  }
  const TensorRecord& record(const std::string& name) const { return *catalog_->find(name); }

  TempDir dir_;
  std::shared_ptr<const Catalog> catalog_;
  ModelSpec spec_;
};

TEST_F(PlanSchedule, ReleasesCoverEverySpanOnceByItsLastReader) {
  const LoadPlan p = plan(1 << 16);
  ASSERT_TRUE(p.ok()) << p.problems().front().message;
  const ReadSchedule& s = p.schedule();
  ASSERT_FALSE(s.units().empty());
  EXPECT_EQ(s.units().front().kind, ReadUnit::Kind::kZero);  // zero units first
  // Every byte of every span is released by exactly one unit, the last whose span covers it.
  const uint64_t size = fs::file_size(dir_ / "model.safetensors");
  std::vector<int> owner(size, -1), released(size, 0);
  uint64_t previous_begin = 0;
  for (size_t i = 0; i < s.units().size(); ++i) {
    const ReadUnit& u = s.units()[i];
    if (u.kind == ReadUnit::Kind::kZero) continue;
    for (uint64_t b = u.begin; b < u.end; ++b) owner[b] = static_cast<int>(i);
    EXPECT_LE(previous_begin, u.begin) << "unit " << i << " out of (shard, offset) order";
    previous_begin = u.begin;
  }
  for (size_t i = 0; i < s.units().size(); ++i) {
    for (const ByteRange& r : s.releases(s.units()[i])) {
      for (uint64_t b = r.begin; b < r.end; ++b) {
        ++released[b];
        EXPECT_EQ(owner[b], static_cast<int>(i)) << "byte " << b;
      }
    }
  }
  for (uint64_t b = 0; b < size; ++b) EXPECT_EQ(released[b], owner[b] >= 0 ? 1 : 0) << "byte " << b;
  // `shared` is read by two units; the later one releases it.
  const TensorRecord& shared = record("shared");
  int readers = 0;
  for (const ReadUnit& u : s.units())
    readers += u.kind != ReadUnit::Kind::kZero && u.begin < shared.offset + shared.nbytes && shared.offset < u.end;
  EXPECT_EQ(readers, 2);
  // The read order is the schedule's: p_big's bytes come before p_t's, the zero-only parameter last.
  EXPECT_EQ(p.read_order().back(), 3u);
}

TEST_F(PlanSchedule, JsonShowsTheUnitsAndTheIdCoversTheChunkSize) {
  const LoadPlan small = plan(1 << 16), big = plan(16 << 20);
  const std::string json = small.to_json();
  EXPECT_NE(json.find("\"schedule\":{\"chunk_bytes\":65536,\"max_read_gap\":65536,\"unit_fields\":[\"kind\",\"shard\","
                      "\"begin\",\"end\",\"segments\","
                      "\"param\",\"piece\",\"releases\"],\"units\":["),
            std::string::npos)
      << json;
  size_t units = 0;
  for (size_t at = 0; (at = json.find("\n[\"", at)) != std::string::npos; ++at) ++units;
  EXPECT_EQ(units, small.schedule().units().size());
  EXPECT_NE(json.find("\n[\"zero\",null,0,0,0,3,0,[]]"), std::string::npos) << json;
  EXPECT_NE(json.find("\n[\"copy\",0,"), std::string::npos) << json;
  // `big` takes two 64 KiB units at the small chunk size, one at 16 MiB.
  EXPECT_GT(small.schedule().units().size(), big.schedule().units().size());
  EXPECT_NE(small.plan_id(), big.plan_id());
  EXPECT_EQ(plan(1 << 16).plan_id(), small.plan_id());
  EXPECT_EQ(plan(1).schedule().chunk_bytes(), ReadSchedule::kMinChunkBytes);
}

// The reads a load issues, in order: each read unit's segments, each copy unit's span.
std::vector<std::pair<uint64_t, uint64_t>> planned_reads(const LoadPlan& p, bool mmap) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  std::vector<UnitSegment> segs;
  for (const ReadUnit& u : p.schedule().units()) {
    if (u.kind == ReadUnit::Kind::kCopy || (u.kind == ReadUnit::Kind::kRead && mmap)) out.emplace_back(u.begin, u.end);
    if (u.kind == ReadUnit::Kind::kRead && !mmap) {
      p.schedule().segments(u, p.params(), segs);
      for (const UnitSegment& seg : segs) out.emplace_back(seg.offset, seg.offset + seg.len);
    }
  }
  return out;
}

TEST_F(PlanSchedule, ExecutorReadsInThePlansOrderAndReleasesASharedSourceOnceAfterItsLastReader) {
  const LoadPlan p = plan(1 << 16);
  ASSERT_TRUE(p.ok());
  auto device = make_device("host");
  const TensorRecord& shared = record("shared");
  for (IoMode io : {IoMode::kPread, IoMode::kMmap}) {
    for (unsigned workers : {1u, 3u}) {
      SCOPED_TRACE(std::string(io_mode_name(io)) + " workers " + std::to_string(workers));
      RecordingFs rec;
      ExecOptions exec;
      exec.io = io;
      exec.fs = &rec;
      exec.read_workers = workers;
      exec.load_workers = workers;
      exec.prefetch = ExecOptions::Prefetch::kOff;
      const LoadedModel m = execute_plan(p, *device, exec);
      const auto events = rec.events();
      std::vector<std::pair<uint64_t, uint64_t>> reads;
      size_t last_shared_read = 0, shared_releases = 0, shared_release_at = 0;
      for (size_t i = 0; i < events.size(); ++i) {
        const auto& e = events[i];
        const bool touches = e.begin < shared.offset + shared.nbytes && shared.offset < e.end;
        if (e.kind == RecordingFs::Event::kRead) {
          reads.emplace_back(e.begin, e.end);
          if (touches) last_shared_read = i;
        } else if (touches) {
          ++shared_releases;
          shared_release_at = i;
          EXPECT_LE(e.begin, shared.offset);
          EXPECT_GE(e.end, shared.offset + shared.nbytes);
        }
      }
      EXPECT_EQ(shared_releases, 1u);
      EXPECT_GT(shared_release_at, last_shared_read);
      if (workers == 1) {
        EXPECT_EQ(reads, planned_reads(p, io == IoMode::kMmap));
      }
      // Both readers of `shared` got its bytes; the transpose and the zeros are right.
      std::vector<std::byte> file(fs::file_size(dir_ / "model.safetensors"));
      FileSystem::posix().open(dir_ / "model.safetensors", IoMode::kPread)->read(0, file);
      for (const char* name : {"p_first", "p_last"}) {
        const LoadedParam* lp = m.find(name);
        ASSERT_NE(lp, nullptr);
        std::vector<std::byte> got(lp->buffer->size());
        device->copy_to_host(*lp->buffer, got);
        EXPECT_EQ(std::memcmp(got.data(), file.data() + shared.offset, shared.nbytes), 0) << name;
      }
      const LoadedParam* lt = m.find("p_t");
      std::vector<std::byte> t(lt->buffer->size());
      device->copy_to_host(*lt->buffer, t);
      const uint64_t t_off = record("t").offset;
      for (uint64_t r = 0; r < 16; ++r) {
        for (uint64_t c = 0; c < 32; ++c) {
          ASSERT_EQ(std::memcmp(t.data() + (r * 32 + c) * 4, file.data() + t_off + (c * 16 + r) * 4, 4), 0)
              << r << "," << c;
        }
      }
      const LoadedParam* lz = m.find("p_zeros");
      std::vector<std::byte> z(lz->buffer->size(), std::byte{1});
      device->copy_to_host(*lz->buffer, z);
      EXPECT_EQ(z, std::vector<std::byte>(40, std::byte{0}));
    }
  }
}

// Copy units are cut at chunk_bytes (review F12): a per-expert transpose ([E, R, C] -> [E, C, R],
// perm {0, 2, 1}) of a slab larger than one chunk is read and staged in bands of whole experts,
// each span within one chunk and each band's output a contiguous range of the parameter; a
// transpose of the outer dim (PlanSchedule's `t`) stays one unit. Loads give the same bytes as
// an unbanded plan, and as the transpose computed here.
TEST(PlanScheduleCopyBands, APerExpertTransposeIsCutIntoBandsOfRowsAndLoadsTheSameBytes) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {f32_tensor("slab", {8, 64, 48}, 5)});  // 96 KiB, 12 KiB per expert
  const auto catalog = std::make_shared<const Catalog>(Catalog::build(discover_shards(dir.path())));
  ModelSpec spec;
  spec.plugin = "test";
  spec.architecture = "Test";
  Piece all = spec::whole("slab", {8, 64, 48});
  all.perm = {0, 2, 1};
  Piece part = all;
  part.box = {{2, 8}, {0, 64}, {0, 48}};  // experts 2..7, as an EP rank would hold them
  ParamSpec a, b;
  a.name = "p_all";
  a.shape = {8, 48, 64};
  a.pieces = {all};
  b.name = "p_part";
  b.shape = {6, 48, 64};
  b.pieces = {part};
  spec.modules.push_back({"m", {a, b}, {}});
  auto plan_at = [&](uint64_t chunk) {
    PlanOptions o;
    o.chunk_bytes = chunk;
    return LoadPlan::build(spec, catalog, RenameTable(), o);
  };
  const LoadPlan banded = plan_at(1 << 16), unbanded = plan_at(16 << 20);
  ASSERT_TRUE(banded.ok()) << banded.problems().front().message;
  ASSERT_TRUE(unbanded.ok());
  auto copies = [](const LoadPlan& p) {
    std::vector<ReadUnit> out;
    for (const ReadUnit& u : p.schedule().units()) {
      if (u.kind == ReadUnit::Kind::kCopy) out.push_back(u);
    }
    return out;
  };
  const uint64_t row_out = 48 * 64 * 4;  // one expert's output bytes
  const std::vector<ReadUnit> bands = copies(banded);
  ASSERT_EQ(bands.size(), 4u);  // 5 experts fit in 64 KiB: p_all [0,5) [5,8); p_part [0,5) [5,6)
  const std::vector<std::pair<uint64_t, uint64_t>> want_rows = {{0, 5}, {5, 8}, {0, 5}, {5, 6}};
  std::vector<std::pair<uint64_t, uint64_t>> rows;
  for (const ReadUnit& u : bands) {
    rows.emplace_back(u.rows_begin, u.rows_end);
    EXPECT_LE(u.end - u.begin, banded.schedule().chunk_bytes());
    EXPECT_EQ(u.dst_off, u.rows_begin * row_out);
    EXPECT_EQ(u.end - u.begin, (u.rows_end - u.rows_begin) * row_out);  // whole experts, nothing else
  }
  std::sort(rows.begin(), rows.end());
  std::vector<std::pair<uint64_t, uint64_t>> sorted_want = want_rows;
  std::sort(sorted_want.begin(), sorted_want.end());
  EXPECT_EQ(rows, sorted_want);
  for (const ReadUnit& u : copies(unbanded)) EXPECT_EQ(u.rows_end, 0u);
  EXPECT_EQ(copies(unbanded).size(), 2u);

  std::vector<std::byte> file(fs::file_size(dir / "model.safetensors"));
  FileSystem::posix().open(dir / "model.safetensors", IoMode::kPread)->read(0, file);
  const uint64_t src = catalog->find("slab")->offset;
  auto device = make_device("host");
  for (const LoadPlan* p : {&banded, &unbanded}) {
    for (IoMode io : {IoMode::kPread, IoMode::kMmap}) {
      for (unsigned workers : {1u, 3u}) {
        SCOPED_TRACE(std::string(p == &banded ? "banded " : "whole ") + std::string(io_mode_name(io)) + " workers " +
                     std::to_string(workers));
        ExecOptions exec;
        exec.io = io;
        exec.read_workers = workers;
        exec.load_workers = workers;
        const LoadedModel m = execute_plan(*p, *device, exec);
        for (const auto& [name, first] : {std::pair<const char*, uint64_t>{"p_all", 0}, {"p_part", 2}}) {
          const LoadedParam* lp = m.find(name);
          ASSERT_NE(lp, nullptr);
          std::vector<std::byte> got(lp->buffer->size());
          device->copy_to_host(*lp->buffer, got);
          for (uint64_t e = 0; e < got.size() / row_out; ++e) {
            for (uint64_t c = 0; c < 48; ++c) {
              for (uint64_t r = 0; r < 64; ++r) {
                ASSERT_EQ(std::memcmp(got.data() + ((e * 48 + c) * 64 + r) * 4,
                                      file.data() + src + (((first + e) * 64 + r) * 48 + c) * 4, 4),
                          0)
                    << name << " expert " << e << " [" << c << ", " << r << "]";
              }
            }
          }
        }
      }
    }
  }
}

// DeepSeek MTP: with --mtp-layers 2 on a one-MTP-layer checkpoint, model layers 3 and 4 both
// read checkpoint layer 3. Every byte is released at most once, and never read after its release.
TEST(PlanScheduleMtp, SharedMtpLayerIsReleasedOnceAfterItsLastReader) {
  TempDir dir;
  const auto ckpt = dir / "ckpt";
  ASSERT_EQ(run_wmap("synth deepseek_v3 " + shell_quote(ckpt.string())).exit_code, 0);
  LoaderOptions lo;
  lo.checkpoint = ckpt;
  lo.layout.mtp_layers = 2;
  lo.progress = false;
  LoaderSession session(lo);
  auto prepared = session.prepare();
  ASSERT_TRUE(prepared->plan->ok());
  auto device = make_device("host");
  for (IoMode io : {IoMode::kPread, IoMode::kMmap}) {
    SCOPED_TRACE(io_mode_name(io));
    RecordingFs rec;
    ExecOptions exec;
    exec.io = io;
    exec.fs = &rec;
    exec.read_workers = 2;
    exec.load_workers = 2;
    session.load(*prepared, *device, exec);
    const auto events = rec.events();
    std::vector<RecordingFs::Event> releases;
    size_t shared_reads = 0;
    for (size_t i = 0; i < events.size(); ++i) {
      const auto& e = events[i];
      if (e.kind != RecordingFs::Event::kRelease) continue;
      for (size_t j = i + 1; j < events.size(); ++j) {
        const auto& later = events[j];
        if (later.kind == RecordingFs::Event::kRead && later.file == e.file) {
          EXPECT_FALSE(later.begin < e.end && e.begin < later.end)
              << "[" << later.begin << ", " << later.end << ") read after its release";
        }
      }
      releases.push_back(e);
    }
    std::sort(releases.begin(), releases.end(),
              [](const auto& a, const auto& b) { return a.file != b.file ? a.file < b.file : a.begin < b.begin; });
    for (size_t i = 1; i < releases.size(); ++i) {
      if (releases[i - 1].file == releases[i].file) {
        EXPECT_LE(releases[i - 1].end, releases[i].begin) << "released twice";
      }
    }
    EXPECT_FALSE(releases.empty());
    // The shared layer really is read twice.
    const TensorRecord& shared = prepared->catalog->require("model.layers.3.eh_proj.weight");
    const std::string shared_file = prepared->catalog->shard_path(shared.shard).string();
    for (const auto& e : events) {
      shared_reads += e.kind == RecordingFs::Event::kRead && e.file == shared_file &&
                      e.begin < shared.offset + shared.nbytes && shared.offset < e.end;
    }
    EXPECT_GE(shared_reads, 2u);
  }
}

TEST(PlanRunCursor, SeeksAndStepsThroughTheRunsOfForEachRun) {
  PlannedPiece p;
  p.elem_bytes = 2;
  p.view = {4, 6, 8, 3};
  p.box = {{1, 3}, {2, 5}, {0, 8}, {0, 3}};  // the last two dims merge into one run per (i, j)
  p.perm = {0, 1, 2, 3};
  std::vector<uint64_t> want;
  uint64_t run = 0;
  for_each_run(p, [&](uint64_t off, uint64_t len) { want.push_back(off), run = len; });
  RunCursor c(p);
  ASSERT_EQ(c.count(), want.size());
  EXPECT_EQ(c.run_bytes(), run);
  for (uint64_t k = 0; k < c.count(); ++k) {
    RunCursor s(p);
    s.seek(k);
    EXPECT_EQ(s.offset(), want[k]) << k;
    EXPECT_EQ(c.offset(), want[k]) << k;
    c.next();
  }
  p.view = {};
  p.box = {};
  p.perm = {};
  RunCursor scalar(p);
  EXPECT_EQ(scalar.count(), 1u);
  EXPECT_EQ(scalar.offset(), 0u);
  EXPECT_EQ(scalar.run_bytes(), 2u);
}

// even_runs(): from any run, how many that follow are evenly spaced and how far apart, checked
// against for_each_run's offsets; dims the box covers whole merge with the next one out.
TEST(PlanRunCursor, EvenRunsAreEvenlySpacedInForEachRunsOrder) {
  PlannedPiece p;
  p.elem_bytes = 1;
  p.perm = {0, 1, 2, 3};
  for (const auto& box : std::vector<std::vector<Range>>{
           {{0, 4}, {0, 6}, {2, 5}, {0, 3}},     // dims 0 and 1 whole: one even sequence of 24
           {{1, 3}, {0, 6}, {2, 5}, {0, 3}},     // dim 0 in part, dim 1 whole: one sequence of 12
           {{0, 4}, {1, 6}, {2, 5}, {0, 3}},     // dim 1 in part: sequences of 5
           {{0, 4}, {0, 6}, {0, 8}, {1, 2}}}) {  // runs of one element
    p.view = {4, 6, 8, 3};
    p.box = box;
    std::vector<uint64_t> want;
    for_each_run(p, [&](uint64_t off, uint64_t) { want.push_back(off); });
    RunCursor c(p);
    ASSERT_EQ(c.count(), want.size());
    for (uint64_t k = 0; k < c.count(); ++k) {
      c.seek(k);
      const auto [even, step] = c.even_runs();
      ASSERT_GE(even, 1u);
      ASSERT_LE(k + even, want.size()) << k;
      for (uint64_t i = 1; i < even; ++i) ASSERT_EQ(want[k + i], want[k] + i * step) << k << "+" << i;
      // Maximal: the run after the sequence is not at the same step (or there is none).
      if (k + even < want.size()) {
        EXPECT_NE(want[k + even], want[k] + even * step) << k;
      }
    }
  }
}

TEST_F(PlanSchedule, OneDecisionWhetherAPlanMayRun) {
  spec_.modules[0].params.push_back(spec::replicated("p_missing", "nowhere", {4}));
  const LoadPlan p = plan(1 << 16);
  ASSERT_FALSE(p.ok());
  auto device = make_device("host");
  try {
    execute_plan(p, *device, ExecOptions{});
    FAIL() << "an incomplete plan ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kValidation);
    EXPECT_EQ(std::string(e.what()).rfind("refusing to load: the plan is incomplete (1 problem(s)):\n  'nowhere'", 0),
              0u)
        << e.what();
  }
  EXPECT_NO_THROW(p.require_runnable(true));
  // A partial load skips the broken parameter: it has no unit, and the rest loads.
  for (const ReadUnit& u : p.schedule().units()) {
    if (u.kind != ReadUnit::Kind::kRead) {
      EXPECT_NE(p.params()[u.param].name, "p_missing");
    }
  }
  ExecOptions exec;
  exec.allow_partial = true;
  const LoadedModel m = execute_plan(p, *device, exec);
  EXPECT_EQ(m.find("p_missing"), nullptr);
  EXPECT_NE(m.find("p_last"), nullptr);
}

}  // namespace
}  // namespace wmap::test
