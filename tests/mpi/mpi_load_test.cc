// Multi-rank loads under mpirun (label `mpi`): every rank's dump bit-exact under each
// --io-policy, storage traffic per policy, collective fallback, and failures that end every
// rank promptly. Skipped (with the reason) when mpirun is not installed.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <utime.h>

#include <map>

#include "mpi_harness.h"
#include "test_util.h"
#include "wmap/device/device.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

TEST(MpiLoad, LlamaTp4BitExactUnderEveryPolicy) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  // 8 heads, 2 KV heads: at TP4 each KV head is duplicated on two ranks.
  expect_every_policy_bit_exact(synth(dir, "llama", "--preset small"), 4, 1);
}

// PyTorch .bin shards whose 2-D weights are column-major views: under exchange a rank receives
// exactly the spans its executor reads for them (reads_in_runs() is false for strided sources),
// checked against the safetensors original.
TEST(MpiLoad, StridedTorchViewsUnderExchangeAndRankStriped) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto st = synth(dir, "llama", "--shards 2");
  const auto bin = dir / "bin";
  const auto made =
      run_command(python() + " " + shell_quote((source_dir() / "tests/format/make_torch_checkpoints.py").string()) +
                  " convert " + shell_quote(st.string()) + " " + shell_quote(bin.string()) + " --views");
  if (made.exit_code == 77 || made.exit_code == 77 * 256) GTEST_SKIP() << "torch unavailable: " << made.err;
  ASSERT_EQ(made.exit_code, 0) << made.err;
  for (const std::string policy : {"exchange", "rank-striped"}) load_all_ranks(bin, 2, 1, policy, "", st);
}

// --io mmap maps whole read units (gaps between strided runs included): under exchange the rank
// copies its received bytes instead, and under rank-striped it maps the warm files.
TEST(MpiLoad, MmapRequestedStaysBitExact) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto ckpt = synth(dir, "llama", "--preset small");
  for (const std::string policy : {"rank-striped", "exchange"}) {
    for (const auto& [rank, j] : load_all_ranks(ckpt, 4, 1, policy, "--io mmap")) {
      EXPECT_EQ(j.field("io_path"), policy == "exchange" ? "pread" : "mmap") << rank;
    }
  }
}

TEST(MpiLoad, DeepSeekTp4Ep2BitExactUnderEveryPolicy) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  expect_every_policy_bit_exact(synth(dir, "deepseek_v3", ""), 4, 2);
}

// --ep-size 1: every routed expert is split row-parallel across the ranks, so each rank's needs
// are strided rows (one extent per piece, not one per row). Under exchange and rank-striped the
// dumps are bit-exact, and byte-identical to single-process loads of the same ranks.
TEST(MpiLoad, DeepSeekRowSplitExpertsUnderExchangeAndRankStriped) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto ckpt = synth(dir, "deepseek_v3", "");
  TempDir single;
  for (uint32_t r = 0; r < 2; ++r) {
    auto one =
        run_wmap("load " + shell_quote(ckpt.string()) + " --tp-size 2 --ep-size 1 --tp-rank " + std::to_string(r) +
                 " --dump " + shell_quote((single / ("rank" + std::to_string(r) + ".safetensors")).string()));
    ASSERT_EQ(one.exit_code, 0) << one.err;
  }
  for (const std::string policy : {"exchange", "rank-striped"}) {
    TempDir out;
    auto r = run_mpi("-np 2 " + wmap_cli() + " load " + shell_quote(ckpt.string()) +
                     " --tp-size 2 --ep-size 1 --io-policy " + policy + " --json --dump " +
                     shell_quote((out / "rank{rank}.safetensors").string()));
    ASSERT_EQ(r.exit_code, 0) << policy << ":\n" << r.err;
    const auto ranks = ranks_of(r.out);
    ASSERT_EQ(ranks.size(), 2u) << r.out;
    for (const auto& [rank, j] : ranks) {
      EXPECT_EQ(j.field("io_policy"), policy) << "rank " << rank << ": " << j.field("io_policy_reason");
      EXPECT_EQ(j.field("io_policy_reason"), "");
      if (policy == "exchange") {
        EXPECT_GT(j.u64("received_bytes"), 0u);
      }
    }
    expect_dumps_match(ckpt, out.path(), 2, 1, policy);
    for (const std::string name : {"rank0.safetensors", "rank1.safetensors"}) {
      EXPECT_TRUE(read_file(out / name) == read_file(single / name))
          << policy << " " << name << " differs from the single-process dump";
    }
  }
}

// A receive that fails (the transport refuses MPI_Irecv, or the wait for the receives errs) on
// one rank ends the whole job with the reason, as a failed send does: its peers would otherwise
// wait for it forever. WMAP_FAULT_INJECT is the exchange's test hook.
TEST(MpiLoad, AFailedReceiveAbortsTheJobWithTheReason) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto ckpt = synth(dir, "llama", "--preset small");
  const std::string load = " load " + shell_quote(ckpt.string()) + " --tp-size 2 --io-policy exchange";
  for (const auto& [fault, call] :
       {std::pair{std::string("exchange-irecv"), std::string("MPI_Irecv failed")},
        std::pair{std::string("exchange-recv-wait"), std::string("MPI_Waitall (receives) failed")}}) {
    auto r = run_mpi("-np 1 env WMAP_FAULT_INJECT=" + fault + " " + wmap_cli() + load + " : " + sanitizer_env() +
                     "-np 1 " + wmap_cli() + load);
    EXPECT_NE(r.exit_code, 0) << fault << ":\n" << r.err;
    EXPECT_NE(r.exit_code, 124) << fault << ": a rank hung:\n" << r.err;
    EXPECT_NE(r.err.find("wmap[rank 0/2]: error during the exchange: wmap[rank 0/2]: " + call), std::string::npos)
        << fault << ":\n"
        << r.err;
    EXPECT_NE(r.err.find("aborting the job"), std::string::npos) << r.err;
  }
}

// A shard rewritten between the plan and the exchange's reads (WMAP_FAULT_INJECT touches this
// rank's shards just before its reader opens them): the reader refuses it against the plan's
// identity, naming the shard, and every rank fails instead of sending rows cut at stale offsets.
TEST(MpiLoad, AShardChangedSincePlanningIsRefusedByTheExchangeReader) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto ckpt = synth(dir, "llama", "--preset small");
  const std::string load = " load " + shell_quote(ckpt.string()) + " --tp-size 2 --io-policy exchange --json";
  auto r = run_mpi("-np 1 env WMAP_FAULT_INJECT=exchange-shard-changed " + wmap_cli() + load + " : " + sanitizer_env() +
                   "-np 1 " + wmap_cli() + load);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "a rank hung:\n" << r.err;
  EXPECT_NE(r.err.find("changed since it was planned"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(".safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mtime_ns"), std::string::npos) << r.err;
}

// load --verify under every policy: a rank's plan reads half of each shard (partial: --verify is
// refused, best-effort reports it), and
// --verify=full hashes every shard, reading what the rank's plan does not from the storage (under
// exchange the plan's own bytes are the received ones); a corrupt byte fails every rank, named.
TEST(MpiLoad, VerifyFullUnderEveryPolicyCatchesACorruptShard) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto ckpt = synth(dir, "llama", "--preset small --shards 2");
  const std::string shard = "model-00002-of-00002.safetensors";
  std::string manifest;
  for (const auto& f : {std::string("model-00001-of-00002.safetensors"), shard}) {
    auto r = run_command("cd " + shell_quote(ckpt.string()) + " && sha256sum " + f);
    ASSERT_EQ(r.exit_code, 0);
    manifest += r.out;
  }
  write_file(dir / "SHA256SUMS", manifest);
  auto load = [&](const std::string& policy, const std::string& verify) {
    return run_mpi("-np 2 " + wmap_cli() + " -q load " + shell_quote(ckpt.string()) + " --tp-size 2 --io-policy " +
                   policy + " " + verify + " --manifest " + shell_quote((dir / "SHA256SUMS").string()));
  };
  for (const char* policy : {"native", "rank-striped", "exchange"}) {
    // Each rank reads half of each shard: --verify cannot be met and every rank refuses before
    // the policy's reads; best-effort loads and says so.
    auto refused = load(policy, "--verify");
    EXPECT_EQ(refused.exit_code, 1) << policy << refused.err;
    EXPECT_NE(refused.err.find("cannot be met for 2 shard(s)"), std::string::npos) << policy << refused.err;
    auto partial = load(policy, "--verify=best-effort");
    EXPECT_EQ(partial.exit_code, 0) << policy << partial.err;
    EXPECT_NE(partial.out.find("2 not verified (partial read)"), std::string::npos) << policy << partial.out;
    auto full = load(policy, "--verify=full");
    EXPECT_EQ(full.exit_code, 0) << policy << full.err;
    EXPECT_NE(full.out.find("verify: 2 of 2 shards match"), std::string::npos) << policy << full.out;
  }
  std::string bytes = read_file(ckpt / shard);
  bytes[bytes.size() / 2] ^= 0x10;
  write_file(ckpt / shard, bytes);
  for (const char* policy : {"native", "exchange"}) {
    auto r = load(policy, "--verify=full");
    EXPECT_EQ(r.exit_code, 1) << policy << r.err;
    EXPECT_NE(r.err.find("SHA-256 mismatch: " + (ckpt / shard).string()), std::string::npos) << policy << r.err;
  }
}

// TensorRT-LLM caps DeepSeek's dense-MLP split at the GPUs of a node: under mpirun wmap takes that
// count from the node's ranks unless --gpus-per-node says otherwise.
TEST(MpiLoad, GpusPerNodeIsTheNodesRankCountUnlessGiven) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto ckpt = synth(dir, "deepseek_v3", "");
  for (const auto& [extra, want] :
       {std::pair{std::string(), uint64_t{2}}, std::pair{std::string("--gpus-per-node 8"), uint64_t{8}}}) {
    for (const auto& [rank, j] : load_all_ranks(ckpt, 2, 1, "native", extra)) {
      EXPECT_EQ(j.u64("gpus_per_node"), want) << "rank " << rank << " " << extra;
      EXPECT_EQ(j.field("target"), "trtllm");
    }
  }
}

// Rank 3 loads a copy whose second shard has another mtime: nobody may share reads with it, so
// all four fall back to native together, each saying why, and still load bit-exact.
TEST(MpiLoad, DifferentFilesOnOneRankFallBackToNativeOnAllRanks) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto a = synth(dir, "llama", "--shards 3");
  const auto b = dir / "copy";
  // cp -a keeps the mtimes, so only the one file changed below differs.
  ASSERT_EQ(run_command("cp -a " + shell_quote(a.string()) + " " + shell_quote(b.string())).exit_code, 0);
  const auto shard = b / "model-00002-of-00003.safetensors";
  ASSERT_TRUE(fs::exists(shard));
  struct utimbuf t {
    1000000000, 1000000000
  };
  ASSERT_EQ(::utime(shard.c_str(), &t), 0);
  for (const std::string policy : {"exchange", "rank-striped"}) {
    TempDir out;
    auto args = [&](const fs::path& ckpt) {
      return wmap_cli() + " load " + shell_quote(ckpt.string()) + " --tp-size 4 --io-policy " + policy +
             " --json --dump " + shell_quote((out / "rank{rank}.safetensors").string());
    };
    auto r = run_mpi("-np 3 " + args(a) + " : " + sanitizer_env() + "-np 1 " + args(b));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto ranks = ranks_of(r.out);
    ASSERT_EQ(ranks.size(), 4u) << r.out;
    for (const auto& [rank, j] : ranks) {
      EXPECT_EQ(j.field("io_policy"), "native") << rank;
      EXPECT_EQ(j.field("io_policy_requested"), policy);
      EXPECT_NE(j.field("io_policy_reason").find("rank 3 on host "), std::string::npos) << j.field("io_policy_reason");
      EXPECT_NE(j.field("io_policy_reason").find(": shard 'model-00002-of-00003.safetensors"), std::string::npos)
          << j.field("io_policy_reason");
    }
    EXPECT_EQ(count(r.err, "fell back: rank 3 on host "), 4u) << "each rank prints the reason:\n" << r.err;
    expect_dumps_match(a, out.path(), 4, 1, policy + " fallback");
  }
}

// The policy decides which collectives run, so ranks asking for different ones all run native.
TEST(MpiLoad, RanksAskingForDifferentPoliciesAllRunNative) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto ckpt = synth(dir, "llama", "");
  auto args = [&](const std::string& policy) {
    return wmap_cli() + " load " + shell_quote(ckpt.string()) + " --tp-size 4 --json --io-policy " + policy;
  };
  auto r = run_mpi("-np 2 " + args("exchange") + " : " + sanitizer_env() + "-np 2 " + args("rank-striped"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto ranks = ranks_of(r.out);
  ASSERT_EQ(ranks.size(), 4u) << r.out;
  for (const auto& [rank, j] : ranks) {
    EXPECT_EQ(j.field("io_policy"), "native") << rank;
    EXPECT_EQ(j.field("io_policy_reason"), "rank 2 asked for --io-policy rank-striped, rank 0 for exchange") << rank;
  }
}

// Rank 3's checkpoint has a truncated shard: its catalog fails, and every rank exits non-zero
// at that phase boundary instead of waiting for it in the exchange.
TEST(MpiLoad, OneRankFailingStopsEveryRankPromptly) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto a = synth(dir, "llama", "--shards 3");
  const auto b = dir / "broken";
  fs::copy(a, b, fs::copy_options::recursive);
  const auto shard = b / "model-00003-of-00003.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  auto args = [&](const fs::path& ckpt) {
    return wmap_cli() + " load " + shell_quote(ckpt.string()) + " --tp-size 4 --io-policy exchange";
  };
  auto r = run_mpi("-np 3 " + args(a) + " : " + sanitizer_env() + "-np 1 " + args(b));
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "a rank hung:\n" << r.err;
  EXPECT_EQ(count(r.err, "wmap[rank 3/4]: error during catalog/plan: "), 1u) << r.err;
  EXPECT_EQ(count(r.err, "stopping: rank 3 failed during catalog/plan"), 3u) << r.err;
}

// A read error while exchanging: exactly one rank (the byte's owner) reads it, fails, sends error
// markers instead of data, and every rank exits non-zero naming it.
TEST(MpiLoad, ReadErrorOfOneOwnerDuringTheExchangeStopsEveryRank) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto ckpt = synth(dir, "llama", "--preset small");
  const std::string env = "-x LD_PRELOAD=" + shell_quote(WMAP_EIO_PRELOAD) +
                          " -x WMAP_EIO_FILE=model-00002-of-00003 -x WMAP_EIO_OFFSET=2000000";
  auto r =
      run_mpi("-np 4 " + wmap_cli() + " load " + shell_quote(ckpt.string()) + " --tp-size 4 --io-policy exchange", env);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "a rank hung:\n" << r.err;
  EXPECT_EQ(count(r.err, "error during the exchange: "), 1u) << r.err;
  EXPECT_EQ(count(r.err, "failed during the exchange: "), 3u) << r.err;
  EXPECT_NE(r.err.find("model-00002-of-00003"), std::string::npos) << r.err;
}

// `--device cuda` under mpirun is the GPU at the rank's node-local index; a rank that cannot
// open it stops every rank before the catalog is read. (On a machine with GPUs this is skipped:
// the loads would succeed.)
TEST(MpiLoad, DeviceCudaIsTheNodeLocalGpuAndAMissingOneStopsEveryRank) {
  SKIP_WITHOUT_MPIRUN();
  std::string why;
  if (cuda_device_count(&why) >= 2) GTEST_SKIP() << "GPUs present: the failure path cannot be provoked";
  TempDir dir;
  const auto ckpt = synth(dir, "llama", "");
  auto r = run_mpi("-np 2 " + wmap_cli() + " load " + shell_quote(ckpt.string()) + " --tp-size 2 --device cuda");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "a rank hung:\n" << r.err;
  EXPECT_EQ(count(r.err, "error during device: "), cuda_device_count(&why) == 1 ? 1u : 2u) << r.err;
  EXPECT_NE(r.err.find("device cuda:1:"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("catalog/plan"), std::string::npos) << "the device is checked before the catalog:\n" << r.err;
}

// TP 2 x PP 2 over 4 ranks: stage-major rank numbering (rank = pp_rank * tp_size + tp_rank, as
// both engines number them), each rank's dump bit-exact for its (tp_rank, pp_rank), under every
// policy; a world that is not tp x pp ranks fails every rank with one message.
TEST(MpiLoad, TensorTimesPipelineRanksUnderEveryPolicy) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto ckpt = synth(dir, "qwen3_moe", "--layers 3 --shards 3");
  for (const std::string policy : {"native", "rank-striped", "exchange"}) {
    TempDir out;
    auto r = run_mpi("-np 4 " + wmap_cli() + " load " + shell_quote(ckpt.string()) +
                     " --tp-size 2 --pp-size 2 --io-policy " + policy + " --json --dump " +
                     shell_quote((out / "rank{rank}.safetensors").string()));
    ASSERT_EQ(r.exit_code, 0) << policy << "\n" << r.err;
    const auto ranks = ranks_of(r.out);
    ASSERT_EQ(ranks.size(), 4u) << r.out;
    for (uint32_t rank = 0; rank < 4; ++rank) {
      const uint32_t tp_rank = rank % 2, pp_rank = rank / 2;
      EXPECT_EQ(ranks.at(static_cast<int>(rank)).u64("tp_rank"), tp_rank);
      EXPECT_EQ(ranks.at(static_cast<int>(rank)).u64("pp_rank"), pp_rank);
      EXPECT_EQ(reference_mismatches(ckpt, out / ("rank" + std::to_string(rank) + ".safetensors"),
                                     "--tp-size 2 --tp-rank " + std::to_string(tp_rank) + " --pp-size 2 --pp-rank " +
                                         std::to_string(pp_rank)),
                "")
          << policy << " rank " << rank;
    }
  }
  auto r = run_mpi("-np 3 " + wmap_cli() + " load " + shell_quote(ckpt.string()) + " --tp-size 2 --pp-size 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << r.err;
  EXPECT_EQ(count(r.err, "--tp-size 2 x --pp-size 2 = 4 does not match the 3 MPI ranks launched"), 1u) << r.err;
  r = run_mpi("-np 4 " + wmap_cli() + " load " + shell_quote(ckpt.string()) + " --tp-size 2 --pp-size 2 --pp-rank 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--pp-rank 0 differs from MPI rank 2's pipeline stage 1"), std::string::npos) << r.err;
}

TEST(MpiLoad, TpSizeOtherThanTheWorldSizeFailsEveryRankWithOneMessage) {
  SKIP_WITHOUT_MPIRUN();
  TempDir dir;
  const auto ckpt = synth(dir, "llama", "");
  auto r = run_mpi("-np 4 " + wmap_cli() + " load " + shell_quote(ckpt.string()) + " --tp-size 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << r.err;
  EXPECT_EQ(count(r.err, "--tp-size 2 does not match the 4 MPI ranks"), 1u) << r.err;
  // An explicit --tp-rank must be the MPI rank.
  r = run_mpi("-np 2 " + wmap_cli() + " load " + shell_quote(ckpt.string()) + " --tp-size 2 --tp-rank 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--tp-rank 0 differs from MPI rank 1's tensor-parallel rank 1"), std::string::npos) << r.err;
  // A bad flag is refused when parsing, before MPI starts: every rank exits 2 naming it.
  r = run_mpi("-np 2 " + wmap_cli() + " load " + shell_quote(ckpt.string()) + " --tp-size 2 --io carrier-pigeon");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("--io: carrier-pigeon not in {auto,mmap,pread}"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace wmap::test
