// What a rank tells the others it needs before rank-striped or exchange: strided extents whose
// number is bounded by tensor pieces, not rows (DeepSeek-R1's real layout at TP8, every rank),
// holding exactly the bytes the executor reads (small models, against the per-run description),
// and an in-memory store over them serves every read of the rank's schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "test_util.h"
#include "wmap/loader/loader.h"
#include "wmap/mpi/extent_store_fs.h"
#include "wmap/mpi/file_extents.h"
#include "wmap/plan/piece_runs.h"
#include "wmap/plan/read_schedule.h"

namespace wmap::test {
namespace {

using mpi::FileExtent;
using mpi::FileRange;

std::unique_ptr<PreparedLoad> prepare(LoaderSession& session) {
  auto prepared = session.prepare();
  EXPECT_TRUE(prepared->plan->ok()) << prepared->plan->coverage();
  return prepared;
}

// Sorts and joins overlapping or touching ranges.
std::vector<FileRange> merged(std::vector<FileRange> r) {
  std::sort(r.begin(), r.end(), [](const FileRange& a, const FileRange& b) {
    return a.shard != b.shard ? a.shard < b.shard : a.begin < b.begin;
  });
  std::vector<FileRange> out;
  for (const FileRange& x : r) {
    if (!out.empty() && out.back().shard == x.shard && x.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, x.end);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

// The description before strided extents: one range per run the executor reads, merged.
std::vector<FileRange> per_run_ranges(const LoadPlan& plan) {
  std::vector<FileRange> r;
  mpi::for_each_read(plan, [&](uint32_t shard, uint64_t begin, uint64_t len, bool) {
    r.push_back({shard, begin, begin + len});
  });
  return merged(std::move(r));
}

// The bytes of per_run_ranges() without listing every run: a tensor read by one piece adds its
// runs' bytes (a piece's runs never overlap); the pieces of a tensor read several times (a
// head's k and v rows, their transposed copy) are listed and merged.
uint64_t per_run_bytes(const LoadPlan& plan) {
  std::map<const TensorRecord*, std::vector<const PlannedPiece*>> readers;
  for (const PlannedParam& p : plan.params()) {
    if (p.absent || p.broken || !p.alias_of.empty()) continue;
    EXPECT_TRUE(p.must_match.empty()) << "not counted here: " << p.name;
    for (const PlannedPiece& piece : p.pieces) {
      if (piece.reads_source()) readers[piece.record].push_back(&piece);
    }
  }
  uint64_t n = 0;
  for (const auto& [record, pieces] : readers) {
    std::vector<FileRange> r;
    for (const PlannedPiece* piece : pieces) {
      if (!reads_in_runs(*piece)) {
        r.push_back({record->shard, piece->span_begin, piece->span_end});
      } else if (pieces.size() == 1) {
        const RunCursor cur(*piece);
        n += cur.count() * cur.run_bytes();
      } else {
        const uint64_t base = record->offset;
        const uint32_t shard = record->shard;
        for_each_run(*piece, [&](uint64_t off, uint64_t len) { r.push_back({shard, base + off, base + off + len}); });
      }
    }
    n += mpi::range_bytes(merged(std::move(r)));
  }
  return n;
}

std::vector<FileRange> expanded(const std::vector<FileExtent>& extents) {
  std::vector<FileRange> r;
  for (const FileExtent& x : extents) {
    for (uint64_t i = 0; i < x.count; ++i)
      r.push_back({x.shard, x.begin + i * x.stride, x.begin + i * x.stride + x.row_bytes});
  }
  return merged(std::move(r));
}

// Every read the rank's schedule issues is served by a store over `extents` (the contents are
// not what is checked here: the mpirun tests load from exchanged stores bit-exactly).
void expect_store_serves_the_schedule(const PreparedLoad& prepared, const std::vector<FileExtent>& extents) {
  mpi::ExtentStoreFileSystem store(*prepared.catalog, extents);
  const LoadPlan& plan = *prepared.plan;
  std::vector<UnitSegment> segs;
  size_t reads = 0;
  for (const ReadUnit& u : plan.schedule().units()) {
    if (u.kind == ReadUnit::Kind::kCopy) {
      EXPECT_NO_THROW(store.find(u.shard, u.begin, u.end - u.begin));
      ++reads;
    } else if (u.kind == ReadUnit::Kind::kRead) {
      plan.schedule().segments(u, plan.params(), segs);
      for (const UnitSegment& s : segs) {
        EXPECT_NO_THROW(store.find(s.shard, s.offset, s.len)) << s.shard << " " << s.offset << " +" << s.len;
        ++reads;
      }
    }
  }
  EXPECT_GT(reads, 0u);
}

TEST(NeededExtents, HoldExactlyThePerRunBytesAndServeEverySchedule) {
  TempDir dir;
  const auto deepseek = dir / "deepseek";
  const auto llama = dir / "llama";
  ASSERT_EQ(run_wmap("synth deepseek_v3 " + shell_quote(deepseek.string())).exit_code, 0);
  ASSERT_EQ(run_wmap("synth llama " + shell_quote(llama.string()) + " --preset small").exit_code, 0);
  struct Case {
    std::filesystem::path ckpt;
    uint32_t tp, ep;
  };
  for (const Case& c : {Case{deepseek, 2, 1}, Case{deepseek, 4, 2}, Case{deepseek, 4, 4}, Case{llama, 4, 1}}) {
    for (uint32_t rank = 0; rank < c.tp; ++rank) {
      SCOPED_TRACE(c.ckpt.filename().string() + " tp " + std::to_string(c.tp) + " ep " + std::to_string(c.ep) +
                   " rank " + std::to_string(rank));
      LoaderSession session(rank_options(c.ckpt, c.tp, rank, c.ep));
      auto prepared = prepare(session);
      const std::vector<FileExtent> extents = mpi::needed_extents(*prepared->plan);
      const std::vector<FileRange> runs = per_run_ranges(*prepared->plan);
      EXPECT_EQ(expanded(extents), runs) << "the extents' rows are the runs' bytes, no more";
      EXPECT_EQ(mpi::extent_bytes(extents), mpi::range_bytes(runs));
      EXPECT_LE(extents.size(), runs.size());
      EXPECT_TRUE(std::any_of(extents.begin(), extents.end(), [](const FileExtent& x) { return x.count > 1; }))
          << "row-parallel slices are strided extents";
      expect_store_serves_the_schedule(*prepared, extents);
    }
  }
}

// The real DeepSeek-R1 layout (163 sparse shards, tests/data/layouts/deepseek-r1) at TP8: with
// --ep-size 1 every routed expert is split row-parallel (down_proj: 256 of every 2048 bytes,
// 7168 rows, 256 experts, 58 layers: ~106 M runs a rank), which per run took ~2.5 GB a rank.
class R1Metadata : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    auto r = run_command(python() + " " + shell_quote((source_dir() / "tests/python/sparse_layout.py").string()) + " " +
                         shell_quote((testdata_dir() / "layouts/deepseek-r1").string()) + " " +
                         shell_quote((*dir_ / "r1").string()));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // Every rank's encoded metadata at TP8 with `ep`, each bounded by `max_bytes`; its held bytes
  // are exactly the bytes its pieces read.
  void expect_bounded(uint32_t ep, uint64_t max_bytes) {
    uint64_t largest = 0, total = 0, held = 0;
    std::vector<std::vector<FileExtent>> all;
    for (uint32_t rank = 0; rank < 8; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      LoaderSession session(rank_options(*dir_ / "r1", 8, rank, ep));
      auto prepared = prepare(session);
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<FileExtent> extents = mpi::needed_extents(*prepared->plan);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const uint64_t encoded = mpi::encode_extents(extents).size();
      uint64_t runs = 0;
      for (const PlannedParam& p : prepared->plan->params()) {
        for (const PlannedPiece& piece : p.pieces) {
          if (piece.reads_source()) runs += reads_in_runs(piece) ? RunCursor(piece).count() : 1;
        }
      }
      const uint64_t run_bytes = per_run_bytes(*prepared->plan);
      EXPECT_EQ(mpi::extent_bytes(extents), run_bytes);
      EXPECT_LE(encoded, max_bytes);
      largest = std::max(largest, encoded);
      total += encoded;
      held += run_bytes;
      all.push_back(extents);
      std::printf(
          "R1 TP8 EP%u rank %u: %zu extents, %llu bytes encoded (%llu runs: %.1f MB as one entry each), held %.2f GiB, "
          "%.2fs\n",
          ep, rank, extents.size(), static_cast<unsigned long long>(encoded), static_cast<unsigned long long>(runs),
          static_cast<double>(runs) * 24 / 1e6, static_cast<double>(run_bytes) / (1 << 30), seconds);
    }
    // What the job reads from storage under exchange: every needed byte once, the sub-page gaps
    // between them read through; never more than the ranks hold together.
    const std::vector<FileRange> reads = mpi::read_ranges(all);
    EXPECT_LE(mpi::range_bytes(reads), held);
    std::printf("R1 TP8 EP%u: %zu read ranges, %.2f GiB read once for %.2f GiB held by the 8 ranks\n", ep, reads.size(),
                static_cast<double>(mpi::range_bytes(reads)) / (1 << 30), static_cast<double>(held) / (1 << 30));
    RecordProperty("largest_rank_bytes", std::to_string(largest));
    RecordProperty("all_ranks_bytes", std::to_string(total));
  }
  static TempDir* dir_;
};
TempDir* R1Metadata::dir_ = nullptr;

TEST_F(R1Metadata, Tp8Ep1IsBoundedByTensorPieces) { expect_bounded(1, uint64_t{4} << 20); }
TEST_F(R1Metadata, Tp8Ep8IsBoundedByTensorPieces) { expect_bounded(8, uint64_t{4} << 20); }

}  // namespace
}  // namespace wmap::test
