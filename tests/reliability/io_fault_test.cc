// I/O faults on every read path turn into one clean wmap::Error naming the shard and the offset,
// with nothing reported as loaded: the header read (Catalog::build), the pread data path and the
// mmap data path (execute_plan), opens, short reads, seeded one-in-N failures, a shard truncated
// after it was opened, and at the CLI a real EIO (LD_PRELOAD shim) and ENOSPC on --dump.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <regex>

#include "reliability/fault_injection_fs.h"
#include "reliability/reliability_util.h"
#include "wmap/catalog/shard_set.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;
const std::string kShard1 = "model-00001-of-00002.safetensors";
const std::string kShard2 = "model-00002-of-00002.safetensors";

class IoFault : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_ = dir_ / "ckpt";
    synth("llama", ckpt_, "--shards 2");
    session_ = std::make_unique<LoaderSession>(loader_options(ckpt_));
    prepared_ = session_->prepare();
    ASSERT_TRUE(prepared_->plan->ok());
    ASSERT_EQ(prepared_->catalog->shards().size(), 2u);
  }
  // The largest tensor of shard `s` (its data is read by every load of rank 0).
  const TensorRecord& big_tensor(uint32_t s) const {
    const TensorRecord* best = nullptr;
    for (const auto& r : prepared_->catalog->tensors()) {
      if (r.shard == s && (!best || r.nbytes > best->nbytes)) best = &r;
    }
    return *best;
  }
  LoadedModel load(CountingDevice& device, const FileSystem& fs, IoMode io, unsigned workers = 4) {
    ExecOptions exec;
    exec.fs = &fs;
    exec.io = io;
    exec.load_workers = workers;
    return session_->load(*prepared_, device, exec);
  }
  // Loads through `fs`, expecting a kIo error containing every needle and nothing handed out.
  std::string expect_failed_load(const FaultInjectionFs& fs, IoMode io, std::initializer_list<std::string> needles) {
    CountingDevice device(make_device("host"));
    std::optional<LoadedModel> model;
    std::string msg;
    try {
      model = load(device, fs, io);
    } catch (const Error& e) {
      msg = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kIo) << msg;
    }
    EXPECT_FALSE(model.has_value()) << "a failed read was reported as loaded";
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    EXPECT_EQ(device.live(), 0) << "buffers of a failed load are still alive";
    EXPECT_GE(fs.faults(), 1u);
    EXPECT_EQ(fs.open_files(), 0) << "a failed load left shards open";
    return msg;
  }
  TempDir dir_;
  fs::path ckpt_;
  std::unique_ptr<LoaderSession> session_;
  std::unique_ptr<PreparedLoad> prepared_;
};

TEST_F(IoFault, HeaderLengthReadErrorNamesShardAndOffset) {
  FaultInjectionFs faulty;
  faulty.fail_at(kShard2, 0);
  const ShardSet set = discover_shards(ckpt_, {});
  try {
    Catalog::build(set, {.fs = &faulty, .progress = {}});
    FAIL() << "catalogued a shard whose header could not be read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(kShard2 + ": pread at offset 0 failed: Input/output error"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(faulty.open_files(), 0);
}

TEST_F(IoFault, HeaderJsonReadErrorNamesShardAndOffset) {
  FaultInjectionFs faulty;
  faulty.fail_at(kShard1, 100);  // inside the header JSON (it starts at byte 8)
  const ShardSet set = discover_shards(ckpt_, {});
  expect_wmap_error([&] { Catalog::build(set, {.fs = &faulty, .threads = 2, .progress = {}}); },
                    {kShard1, "offset 100", "Input/output error"});
  EXPECT_EQ(faulty.faults(), 1u);
}

TEST_F(IoFault, HeaderShortReadNamesShardAndOffset) {
  FaultInjectionFs faulty;
  faulty.short_read_at(kShard2, 50);
  const ShardSet set = discover_shards(ckpt_, {});
  expect_wmap_error([&] { Catalog::build(set, {.fs = &faulty, .progress = {}}); },
                    {kShard2, "unexpected end of file at offset 50"});
}

TEST_F(IoFault, OpenErrorNamesShard) {
  FaultInjectionFs faulty;
  faulty.fail_open(kShard2, EACCES);
  expect_wmap_error([&] { Catalog::build(discover_shards(ckpt_, {}), {.fs = &faulty, .progress = {}}); },
                    {kShard2, "Permission denied"});
  expect_failed_load(faulty, IoMode::kPread, {kShard2, "open failed: Permission denied"});
}

TEST_F(IoFault, PreadDataPathErrorNamesShardAndOffset) {
  const TensorRecord& r = big_tensor(1);
  const uint64_t bad = r.offset + r.nbytes / 2;
  FaultInjectionFs faulty;
  faulty.fail_at(kShard2, bad);
  expect_failed_load(faulty, IoMode::kPread, {kShard2, "pread at offset " + std::to_string(bad), "Input/output error"});
  EXPECT_EQ(faulty.views(), 0u) << "pread mode must not map";
}

TEST_F(IoFault, MmapDataPathErrorNamesShardAndOffset) {
  const TensorRecord& r = big_tensor(0);
  const uint64_t bad = r.offset + 1;
  FaultInjectionFs faulty;
  faulty.fail_at(kShard1, bad);
  expect_failed_load(faulty, IoMode::kMmap, {kShard1, "offset " + std::to_string(bad), "Input/output error"});
  EXPECT_GT(faulty.views(), 0u) << "mmap mode did not go through view()";
}

TEST_F(IoFault, ShortDataReadNamesShardAndOffset) {
  const TensorRecord& r = big_tensor(1);
  const uint64_t at = r.offset + r.nbytes / 3;
  FaultInjectionFs faulty;
  faulty.short_read_at(kShard2, at);
  expect_failed_load(faulty, IoMode::kPread, {kShard2, "unexpected end of file at offset " + std::to_string(at)});
}

TEST_F(IoFault, RealShortReadOfAShardTruncatedAfterOpenUnderPread) {
  // The real PosixFile: the shard shrinks on disk after it was opened; pread returns 0 bytes.
  FaultInjectionFs faulty;
  faulty.truncate_after_open(kShard2, prepared_->catalog->shards()[1].header_bytes + 8);
  expect_failed_load(faulty, IoMode::kPread, {kShard2, "unexpected end of file at offset"});
}

// Seeded one-in-N read errors, N about the number of reads of one load, so that some loads pass
// and some fail: a load either fails with a clean error naming a shard and an offset, or returns
// every parameter bit-identical to a clean load. Never anything in between.
TEST_F(IoFault, SeededOneInNReadErrorsFailCleanlyOrLoadExactly) {
  CountingDevice ref_device(make_device("host"));
  FaultInjectionFs counting;
  const LoadedModel ref = load(ref_device, counting, IoMode::kPread);
  const uint64_t reads = counting.reads() + counting.views();
  ASSERT_GT(reads, 4u);
  auto bytes = [&](CountingDevice& d, const LoadedParam& p) {
    std::vector<std::byte> out(p.buffer->size());
    d.copy_to_host(*p.buffer, out);
    return out;
  };
  int failed = 0, passed = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    const IoMode io = seed % 2 ? IoMode::kPread : IoMode::kMmap;
    FaultInjectionFs faulty;
    faulty.fail_one_in(static_cast<uint32_t>(reads), seed);
    CountingDevice device(make_device("host"));
    try {
      const LoadedModel got = load(device, faulty, io, 1 + seed % 4);
      EXPECT_EQ(faulty.faults(), 0u) << "seed " << seed << ": a fault was injected but the load succeeded";
      ASSERT_EQ(got.params.size(), ref.params.size());
      for (size_t i = 0; i < ref.params.size(); ++i) {
        ASSERT_EQ(got.params[i].name, ref.params[i].name);
        ASSERT_EQ(bytes(device, got.params[i]), bytes(ref_device, ref.params[i])) << got.params[i].name;
      }
      ++passed;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kIo) << msg;
      EXPECT_TRUE(msg.find(kShard1) != std::string::npos || msg.find(kShard2) != std::string::npos) << msg;
      EXPECT_NE(msg.find("at offset "), std::string::npos) << msg;
      EXPECT_GE(faulty.faults(), 1u);
      EXPECT_EQ(device.live(), 0) << "seed " << seed;
      ++failed;
    }
    EXPECT_EQ(faulty.open_files(), 0);
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(passed, 0);
}

// A shard truncated after it was mapped: touching the lost pages raises SIGBUS. The load must
// fail with a clean error naming the shard instead of killing the process. Runs in a child.
TEST_F(IoFault, ShardTruncatedUnderMmapIsACleanErrorNotSigbus) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 4;
    try {
      FaultInjectionFs faulty;
      faulty.truncate_after_open(kShard2, 0);
      CountingDevice device(make_device("host"));
      load(device, faulty, IoMode::kMmap, 2);
      code = 3;  // loaded from a truncated file: the worst outcome
    } catch (const Error& e) {
      code = std::string(e.what()).find(kShard2) != std::string::npos ? 0 : 5;
    } catch (...) {
    }
    std::fflush(nullptr);
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  // A SIGBUS here means the guard (guard_sigbus) is broken: that is a failure, never a skip.
  ASSERT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS)
      << "the load died of SIGBUS on a shard truncated under mmap: the SIGBUS guard did not turn it into a "
         "wmap::Error naming "
      << kShard2;
  ASSERT_TRUE(WIFEXITED(status)) << "child died by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_NE(WEXITSTATUS(status), 3) << "a truncated shard was reported as loaded";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "expected a wmap::Error naming " << kShard2;
}

// --- CLI ------------------------------------------------------------------------------------

std::string preload_env(const std::string& file, uint64_t offset) {
  return "WMAP_EIO_FILE=" + shell_quote(file) + " WMAP_EIO_OFFSET=" + std::to_string(offset) +
         " LD_PRELOAD=" + shell_quote(WMAP_EIO_PRELOAD) +
         " ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0\" ";
}

CommandResult run_wmap_env(const std::string& env, const std::string& args) {
  return run_command(env + shell_quote(WMAP_CLI_PATH) + " -q " + args);
}

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST_F(IoFault, CliEioOnTensorDataExitsOneNamingShardAndOffset) {
  const TensorRecord& r = big_tensor(1);
  const std::string load = "load " + shell_quote(ckpt_.string()) + " --io pread";
  auto ok = run_wmap_env(preload_env(kShard2, 1ull << 40), load);
  ASSERT_EQ(ok.exit_code, 0) << "the shim must be transparent: " << ok.err;
  auto res = run_wmap_env(preload_env(kShard2, r.offset + r.nbytes / 2), load);
  EXPECT_EQ(res.exit_code, 1) << res.err;
  // pread or preadv, whichever the executor batches the read into; the offset it names is where
  // the failing read started, at or before the bad byte and within the shard's data.
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(res.err, m, std::regex(kShard2 + ": preadv? at offset (\\d+) failed: Input/output error")))
      << res.err;
  const uint64_t at = std::stoull(m[1]);
  EXPECT_LE(at, r.offset + r.nbytes / 2) << res.err;
  EXPECT_GE(at, prepared_->catalog->shards()[1].header_bytes + 8) << res.err;
  EXPECT_EQ(res.out.find("loaded"), std::string::npos) << res.out;
  EXPECT_EQ(count_lines(res.err), 1) << res.err;
}

TEST_F(IoFault, CliEioOnHeaderIsUnreadableInputExitTwo) {
  auto res = run_wmap_env(preload_env(kShard1, 0), "load " + shell_quote(ckpt_.string()));
  EXPECT_EQ(res.exit_code, 2) << res.err;
  EXPECT_NE(res.err.find(kShard1 + ": pread at offset 0 failed: Input/output error"), std::string::npos) << res.err;
  EXPECT_EQ(res.out.find("loaded"), std::string::npos) << res.out;
}

TEST_F(IoFault, CliDumpToAFullDeviceExitsOneNamingTheFile) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  auto res = run_wmap("load " + shell_quote(ckpt_.string()) + " --dump /dev/full");
  EXPECT_EQ(res.exit_code, 1) << res.err;
  EXPECT_NE(res.err.find("/dev/full: write at offset 0 failed: No space left on device"), std::string::npos) << res.err;
  EXPECT_EQ(res.out.find("loaded"), std::string::npos) << res.out;
  EXPECT_TRUE(fs::exists("/dev/full")) << "a failed dump removed a device node";
}

TEST_F(IoFault, CliDumpOnAFullFileSystemLeavesNoPartialFile) {
  const fs::path mnt = dir_ / "tiny";
  fs::create_directories(mnt);
  if (geteuid() != 0 || ::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=16k") != 0) {
    GTEST_SKIP() << "cannot mount a tiny tmpfs here (needs root): " << std::strerror(errno);
  }
  const fs::path out = mnt / "rank0.safetensors";
  auto res = run_wmap("load " + shell_quote(ckpt_.string()) + " --dump " + shell_quote(out.string()));
  const bool left = fs::exists(out);
  ::umount(mnt.c_str());
  EXPECT_EQ(res.exit_code, 1) << res.err;
  EXPECT_NE(res.err.find(out.string() + ": write at offset"), std::string::npos) << res.err;
  EXPECT_NE(res.err.find("No space left on device"), std::string::npos) << res.err;
  EXPECT_EQ(res.out.find("loaded"), std::string::npos) << res.out;
  EXPECT_FALSE(left) << "a partial dump was left behind as if it were complete";
}

}  // namespace
}  // namespace wmap::test
