// The executor's two pools and two I/O paths: every combination of 1, 2 and 8 read and load
// workers over mmap, pread and auto gives the numpy reference's bytes; worker counts come from
// flags over WMAP_READ_WORKERS / WMAP_LOAD_WORKERS and are validated; the report names what ran;
// a shard that shrinks under a mapped copy is a wmap::Error naming it, never a SIGBUS.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "test_util.h"
#include "wmap/util/error.h"
#include "wmap/exec/executor.h"
#include "wmap/loader/loader.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

std::string reference_check(const fs::path& ckpt, const fs::path& dump, uint32_t t, uint32_t r) {
  const std::string layout = " --tp-size " + std::to_string(t) + " --tp-rank " + std::to_string(r);
  auto check = run_command(python() + " " + shell_quote((source_dir() / "tests/python/reference.py").string()) +
                           " check " + shell_quote(ckpt.string()) + " " + shell_quote(dump.string()) + layout);
  return check.exit_code == 0 && check.out.find(" 0 mismatches") != std::string::npos ? "" : check.out + check.err;
}

class ExecutorCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    auto r = run_wmap("synth llama " + shell_quote((*dir_ / "ckpt").string()) + " --preset small --shards 3");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path ckpt() { return *dir_ / "ckpt"; }
  static inline TempDir* dir_ = nullptr;
};

TEST_F(ExecutorCli, BitExactForEveryPoolSizeAndIoPath) {
  // The numpy reference checks each layout's first dump; every other combination must then write
  // the same bytes (one Python start per layout instead of 27 keeps the sanitizer stage short).
  TempDir out;
  const auto dump = out / "rank.safetensors";
  for (auto [t, r] : {std::pair{1u, 0u}, std::pair{4u, 1u}}) {
    std::string checked;
    for (const std::string io : {"mmap", "pread", "auto"}) {
      for (const char* rw : {"1", "2", "8"}) {
        for (const char* lw : {"1", "2", "8"}) {
          const std::string flags = " --io " + io + " --read-workers " + rw + " --load-workers " + lw + " --tp-size " +
                                    std::to_string(t) + " --tp-rank " + std::to_string(r);
          auto load =
              run_wmap("-q load " + shell_quote(ckpt().string()) + flags + " --dump " + shell_quote(dump.string()));
          ASSERT_EQ(load.exit_code, 0) << flags << "\n" << load.err;
          if (checked.empty()) {
            ASSERT_EQ(reference_check(ckpt(), dump, t, r), "") << flags;
            checked = read_file(dump);
            ASSERT_FALSE(checked.empty());
          } else {
            EXPECT_TRUE(read_file(dump) == checked) << flags << ": bytes differ from the first combination's";
          }
        }
      }
    }
  }
}

TEST_F(ExecutorCli, SmallChunksAndNoPrefaultStayBitExact) {
  // Exercised in-process: chunking splits pieces into many reads and groups.
  TempDir out;
  LoaderOptions lo;
  lo.checkpoint = ckpt();
  lo.layout.tp_size = 2;
  lo.layout.tp_rank = 1;
  lo.progress = false;
  lo.plan.chunk_bytes = 1;  // clamped to the 64 KiB minimum
  LoaderSession session(lo);
  auto prepared = session.prepare();
  EXPECT_EQ(prepared->plan->schedule().chunk_bytes(), uint64_t{1} << 16);
  auto device = make_device("host");
  for (IoMode io : {IoMode::kMmap, IoMode::kPread}) {
    for (bool prefault : {false, true}) {
      ExecOptions exec;
      exec.io = io;
      exec.prefault = prefault;
      exec.read_workers = 3;
      exec.load_workers = 2;
      LoadedModel m = session.load(*prepared, *device, exec);
      const auto dump = out / "m.safetensors";
      dump_safetensors(m, *device, dump);
      EXPECT_EQ(reference_check(ckpt(), dump, 2, 1), "") << io_mode_name(io) << " prefault " << prefault;
      EXPECT_EQ(m.stats.io_path, io_mode_name(io));
      EXPECT_EQ(m.stats.read_workers, 3u);
      EXPECT_EQ(m.stats.load_workers, 2u);
    }
  }
}

TEST_F(ExecutorCli, WorkerCountsFromFlagsOverEnvironment) {
  const std::string load = "-q load " + shell_quote(ckpt().string()) + " --json";
  auto r = run_command("WMAP_READ_WORKERS=3 WMAP_LOAD_WORKERS=2 " + shell_quote(WMAP_CLI_PATH) + " " + load);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"read_workers\":{\"requested\":3,\"effective\":3}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"load_workers\":{\"requested\":2,\"effective\":2}"), std::string::npos) << r.out;
  r = run_command("WMAP_READ_WORKERS=3 WMAP_LOAD_WORKERS=2 " + shell_quote(WMAP_CLI_PATH) + " " + load +
                  " --read-workers 1 --load-workers 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"read_workers\":{\"requested\":1,\"effective\":1}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"load_workers\":{\"requested\":2,\"effective\":2}"), std::string::npos) << r.out;
  for (const std::string bad : {"0", "-1", "two", "", "3x", "99999999"}) {
    for (const std::string var : {"WMAP_READ_WORKERS", "WMAP_LOAD_WORKERS"}) {
      r = run_command(var + "=" + shell_quote(bad) + " " + shell_quote(WMAP_CLI_PATH) + " " + load);
      EXPECT_EQ(r.exit_code, 2) << var << "=" << bad;
      EXPECT_NE(r.err.find(var + "='" + bad + "'"), std::string::npos) << r.err;
    }
  }
  EXPECT_EQ(run_wmap(load + " --read-workers 0").exit_code, 2);
  EXPECT_EQ(run_wmap(load + " --io sideways").exit_code, 2);
}

TEST_F(ExecutorCli, ReportNamesPathPhasesAndBytes) {
  auto r = run_wmap("-q load " + shell_quote(ckpt().string()) + " --json --tp-size 4 --tp-rank 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* key : {"\"io_path\":\"pread\"", "\"io_requested\":\"auto\"",
                          "\"phases\":{\"catalog\":", "\"read\":", "\"transform\":", "\"copy\":", "\"bytes_needed\":",
                          "\"peak_rss\":", "\"prefault\":", "\"prefault_decision\":\"auto: 4 KiB buffers "}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  }
  // Forced either way, and said so.
  r = run_wmap("-q load " + shell_quote(ckpt().string()) + " --json --prefault on");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"prefault\":true,\"prefault_decision\":\"on (requested)\""), std::string::npos) << r.out;
  r = run_wmap("-q load " + shell_quote(ckpt().string()) + " --json --prefault off");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"prefault\":false,\"prefault_decision\":\"off (requested)\""), std::string::npos) << r.out;
  r = run_wmap("load " + shell_quote(ckpt().string()) + " --io mmap");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("io mmap (requested mmap"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("read workers"), std::string::npos) << r.out;
}

TEST(ExecutorUnit, WorkerCountFromEnv) {
  ::unsetenv("WMAP_TEST_WORKERS");
  EXPECT_EQ(worker_count_from_env("WMAP_TEST_WORKERS"), 0u);
  ::setenv("WMAP_TEST_WORKERS", "7", 1);
  EXPECT_EQ(worker_count_from_env("WMAP_TEST_WORKERS"), 7u);
  ::setenv("WMAP_TEST_WORKERS", "0", 1);
  try {
    worker_count_from_env("WMAP_TEST_WORKERS");
    FAIL() << "0 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("WMAP_TEST_WORKERS='0'"), std::string::npos) << e.what();
  }
  ::unsetenv("WMAP_TEST_WORKERS");
  EXPECT_GE(default_read_workers(), 1u);
  EXPECT_GE(default_load_workers(), 1u);
}

// --- SIGBUS safety -------------------------------------------------------------------------

TEST(ExecutorUnit, GuardTurnsSigbusOnATruncatedMappingIntoAnAddress) {
  TempDir dir;
  const auto file = dir / "f";
  write_file(file, std::string(1 << 16, 'x'));
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* map = ::mmap(nullptr, 1 << 16, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  fs::resize_file(file, 4096);
  struct Ctx {
    const char* src;
    char dst[8192];
  } ctx{static_cast<const char*>(map) + 8192, {}};
  const void* fault = guard_sigbus(
      [](void* p) {
        auto* c = static_cast<Ctx*>(p);
        std::memcpy(c->dst, c->src, sizeof c->dst);
      },
      &ctx);
  EXPECT_EQ(fault, static_cast<const char*>(map) + 8192);
  // Guarded calls that do not fault return null, and the guard can be used again.
  ctx.src = static_cast<const char*>(map);
  EXPECT_EQ(guard_sigbus(
                [](void* p) {
                  auto* c = static_cast<Ctx*>(p);
                  std::memcpy(c->dst, c->src, 4096);
                },
                &ctx),
            nullptr);
  ::munmap(map, 1 << 16);
  ::close(fd);
}

// Opens shards normally, then truncates the named one (after it was opened and sized, as if
// another process rewrote it during the load). populate() is skipped when `skip_populate`, so
// the copy itself touches the lost pages and must survive the SIGBUS.
class TruncatingFs final : public FileSystem {
 public:
  TruncatingFs(std::string victim, bool skip_populate) : victim_(std::move(victim)), skip_populate_(skip_populate) {}
  std::unique_ptr<RandomAccessFile> open(const fs::path& path, IoMode mode) const override {
    auto f = FileSystem::posix().open(path, mode);
    if (path.filename() == victim_) fs::resize_file(path, 4096);
    if (!skip_populate_) return f;
    return std::make_unique<NoPopulate>(std::move(f));
  }

 private:
  class NoPopulate final : public RandomAccessFile {
   public:
    explicit NoPopulate(std::unique_ptr<RandomAccessFile> f) : f_(std::move(f)) {}
    const std::string& path() const override { return f_->path(); }
    uint64_t size() const override { return f_->size(); }
    FileSignature signature() const override { return f_->signature(); }  // the file's, taken at open
    void read(uint64_t o, std::span<std::byte> d) const override { f_->read(o, d); }
    std::span<const std::byte> view(uint64_t o, uint64_t l) const override { return f_->view(o, l); }
    void release(uint64_t o, uint64_t l) const override { f_->release(o, l); }
    void will_need(uint64_t, uint64_t) const override {}
    void populate(uint64_t, uint64_t) const override {}

   private:
    std::unique_ptr<RandomAccessFile> f_;
  };
  std::string victim_;
  bool skip_populate_;
};

// In a child process, so a regression (death by SIGBUS) fails the test instead of the run.
int load_truncated_in_child(const fs::path& ckpt, const std::string& victim, IoMode io, bool skip_populate,
                            std::string* message_out) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    int code = 4;
    std::string msg;
    try {
      LoaderOptions lo;
      lo.checkpoint = ckpt;
      lo.progress = false;
      LoaderSession session(lo);
      auto prepared = session.prepare();
      auto device = make_device("host");
      TruncatingFs tfs(victim, skip_populate);
      ExecOptions exec;
      exec.io = io;
      exec.fs = &tfs;
      exec.read_workers = 2;
      exec.load_workers = 2;
      session.load(*prepared, *device, exec);
      code = 3;
    } catch (const Error& e) {
      msg = e.what();
      code = e.code() == ErrorCode::kIo ? 0 : 5;
    } catch (...) {
      code = 6;
    }
    (void)!::write(pipefd[1], msg.data(), msg.size());
    ::_exit(code);
  }
  ::close(pipefd[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) message_out->append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

TEST(ExecutorSigbus, ShardTruncatedAfterOpenIsAnErrorNamingShardAndOffset) {
  TempDir dir;
  const auto ckpt = dir / "ckpt";
  ASSERT_EQ(run_wmap("synth llama " + shell_quote(ckpt.string()) + " --preset small --shards 2").exit_code, 0);
  const std::string victim = "model-00002-of-00002.safetensors";
  for (bool skip_populate : {true, false}) {
    for (IoMode io : {IoMode::kMmap, IoMode::kPread}) {
      // The checkpoint is rewritten by each run: restore it.
      fs::remove_all(ckpt);
      ASSERT_EQ(run_wmap("synth llama " + shell_quote(ckpt.string()) + " --preset small --shards 2").exit_code, 0);
      std::string msg;
      const int rc = load_truncated_in_child(ckpt, victim, io, skip_populate, &msg);
      EXPECT_EQ(rc, 0) << io_mode_name(io) << (skip_populate ? " (copy faults)" : " (populate fails)")
                       << ": child exit/signal " << rc << ": " << msg;
      EXPECT_NE(msg.find(victim), std::string::npos) << msg;
      EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
    }
  }
}

// Under --io auto the rearranging copies (Llama 4's transposed experts) are cut out of the
// mapping while runs are preads: a shard shrinking under them is the same clean error.
TEST(ExecutorSigbus, ShardTruncatedUnderAutosMappedCopiesIsAnErrorNamingShardAndOffset) {
  TempDir dir;
  const auto ckpt = dir / "ckpt";
  const std::string synth = "synth llama4 " + shell_quote(ckpt.string()) + " --preset small --shards 2";
  const std::string victim = "model-00002-of-00002.safetensors";
  for (bool skip_populate : {true, false}) {
    fs::remove_all(ckpt);
    ASSERT_EQ(run_wmap(synth).exit_code, 0);
    std::string msg;
    const int rc = load_truncated_in_child(ckpt, victim, IoMode::kAuto, skip_populate, &msg);
    EXPECT_EQ(rc, 0) << (skip_populate ? "(copy faults)" : "(populate fails)") << ": child exit/signal " << rc << ": "
                     << msg;
    EXPECT_NE(msg.find(victim), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset"), std::string::npos) << msg;
  }
}

// auto: runs by pread, rearranging copies out of the mapping, and the report says which; a
// checkpoint with no rearranging copy stays "pread"; --io pread stages every copy. Bit-exact
// either way (the same digests).
TEST(ExecutorIo, AutoCutsRearrangingCopiesOutOfTheMappingAndSaysSo) {
  TempDir dir;
  const auto ckpt = dir / "llama4";
  ASSERT_EQ(run_wmap("synth llama4 " + shell_quote(ckpt.string()) + " --preset small").exit_code, 0);
  const std::string load = "-q load " + shell_quote(ckpt.string()) + " --json --digests";
  const auto a = run_wmap(load), p = run_wmap(load + " --io pread");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(a.out.find("\"io_path\":\"pread+mmap\""), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("rearranging copies (transposes, gathers, padded cuts) out of the mapping"), std::string::npos)
      << a.out;
  EXPECT_NE(p.out.find("\"io_path\":\"pread\""), std::string::npos) << p.out;
  auto digests = [](const std::string& out) {  // the "digests" object alone (timings follow it)
    const size_t at = out.find("\"digests\"");
    return out.substr(at, out.find('}', at) - at);
  };
  ASSERT_NE(a.out.find("\"digests\""), std::string::npos) << a.out;
  EXPECT_EQ(digests(a.out), digests(p.out));
  const auto llama = dir / "llama";
  ASSERT_EQ(run_wmap("synth llama " + shell_quote(llama.string()) + " --preset small").exit_code, 0);
  const auto l = run_wmap("-q load " + shell_quote(llama.string()) + " --json");
  EXPECT_NE(l.out.find("\"io_path\":\"pread\""), std::string::npos) << l.out;
}

TEST(ExecutorSigbus, CliSurvivesAShardTruncatedWhileItLoads) {
  // A real concurrent truncation: depending on timing it lands before the catalog (malformed
  // input, exit 2), during the mapped load (a load failure naming the shard, exit 1) or after
  // (exit 0). Never a signal (a shell reports SIGBUS as 135).
  TempDir dir;
  const auto ckpt = dir / "ckpt";
  ASSERT_EQ(run_wmap("synth llama " + shell_quote(ckpt.string()) + " --preset small --shards 2").exit_code, 0);
  const auto shard = ckpt / "model-00002-of-00002.safetensors";
  const auto size = fs::file_size(shard);
  for (const char* delay : {"0", "0.01", "0.03"}) {
    auto r = run_command("( " + shell_quote(WMAP_CLI_PATH) + " -q load " + shell_quote(ckpt.string()) +
                         " --io mmap --read-workers 1 --load-workers 1 & pid=$!; sleep " + delay + "; truncate -s " +
                         std::to_string(size / 2) + " " + shell_quote(shard.string()) + "; wait $pid )");
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2) << r.exit_code << ": " << r.err;
    if (r.exit_code != 0) {
      EXPECT_NE(r.err.find("model-00002-of-00002.safetensors"), std::string::npos) << r.err;
    }
    fs::resize_file(shard, size);  // zeros: still a well-formed file for the next round
  }
}

}  // namespace
}  // namespace wmap::test
