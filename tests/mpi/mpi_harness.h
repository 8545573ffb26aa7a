#pragma once
// Helpers of the mpirun tests (label `mpi`): every mpirun bounded by a timeout, each rank's output
// in its own files, the ranks' --json lines, and the checks shared by the one-node tests
// (mpi_load_test.cc) and the two-node ones (two_node_test.cc).

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "test_util.h"

namespace wmap::test {

// Every mpirun is bounded, so a rank stuck in a collective fails the test instead of hanging it.
constexpr int kMpiTimeoutSeconds = 90;

bool have_mpirun();

#define SKIP_WITHOUT_MPIRUN()       \
  if (!::wmap::test::have_mpirun()) \
  GTEST_SKIP() << "mpirun not found (apt-get install openmpi-bin): multi-rank tests skipped"

// How mpirun is started beyond the defaults: `shell_env` (assignments before the command, for the
// launcher's own environment) and `options` (mpirun options, e.g. --host and the rsh agent).
struct MpiLaunch {
  std::string shell_env;
  std::string options;
};

std::string wmap_cli();  // the CLI, shell-quoted
// Under the sanitizer suite (ASAN_OPTIONS set): `-x ASAN_OPTIONS=...` for every app context.
std::string sanitizer_env();
// "timeout N mpirun --allow-run-as-root --oversubscribe [launch] [sanitizer env] [env] ".
std::string mpirun(const std::string& env = "", const MpiLaunch& launch = {});

// Runs an mpirun command line (after the mpirun options) with each rank's output in its own
// files (a pipe shared by ranks may interleave their lines), and returns the ranks' stdout and
// stderr concatenated in rank order.
CommandResult run_mpi(const std::string& args, const std::string& env = "", const MpiLaunch& launch = {});

std::string reference_py();

// One rank's --json line, fields read as text.
struct RankJson {
  std::string line;
  std::string field(const std::string& key) const {
    const std::string k = "\"" + key + "\":";
    const size_t at = line.find(k);
    if (at == std::string::npos) return "";
    size_t b = at + k.size(), e;
    if (line[b] == '"') {
      e = line.find('"', b + 1);
      return line.substr(b + 1, e - b - 1);
    }
    e = line.find_first_of(",}", b);
    return line.substr(b, e - b);
  }
  uint64_t u64(const std::string& key) const { return std::stoull(field(key)); }
};

// The --json lines of a run, by rank.
std::map<int, RankJson> ranks_of(const std::string& out);

size_t count(const std::string& text, const std::string& what);

// Every rank's dump under `dumps` (rank{r}.safetensors) against the numpy reference of `ckpt`,
// for nodes of `gpus_per_node` ranks (part of the layout: the trtllm DeepSeek dense-MLP split is
// capped by it; 8 is the reference's own default).
void expect_dumps_match(const std::filesystem::path& ckpt, const std::filesystem::path& dumps, uint32_t t, uint32_t p,
                        const std::string& what, uint32_t gpus_per_node = 8);

// `wmap synth FAMILY DIR/FAMILY FLAGS`; returns the checkpoint folder.
std::filesystem::path synth(const TempDir& dir, const std::string& family, const std::string& flags);

// `mpirun -np T wmap load` under `policy`; checks every rank's dump and returns the JSON lines.
// `reference` (default: ckpt) is the safetensors checkpoint the dumps are checked against.
std::map<int, RankJson> load_all_ranks(const std::filesystem::path& ckpt, uint32_t t, uint32_t p,
                                       const std::string& policy, const std::string& extra = "",
                                       const std::filesystem::path& reference = {}, const MpiLaunch& launch = {});

// Storage traffic: native reads each rank's needs (plus page-sized gaps read through), the other
// policies read the union of the needs exactly once (rank-striped: once per node).
void expect_storage_traffic(const std::map<std::string, std::map<int, RankJson>>& by_policy);

// load_all_ranks under native, rank-striped and exchange, then expect_storage_traffic.
std::map<std::string, std::map<int, RankJson>> expect_every_policy_bit_exact(
    const std::filesystem::path& ckpt, uint32_t t, uint32_t p, const MpiLaunch& launch = {},
    const std::filesystem::path& reference = {});

}  // namespace wmap::test
