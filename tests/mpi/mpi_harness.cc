// Shared by the mpirun tests (mpi_load_test.cc on one node, two_node_test.cc on two simulated
// nodes): launching, per-rank output, --json lines, and the bit-exact and traffic checks.
#include "mpi_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace wmap::test {

namespace fs = std::filesystem;

bool have_mpirun() { return run_command("command -v mpirun >/dev/null 2>&1").exit_code == 0; }

std::string wmap_cli() { return shell_quote(WMAP_CLI_PATH); }
// Under the sanitizer suite (ASAN_OPTIONS set) the ranks keep ASan and UBSan but not leak
// checks: Open MPI leaks in MPI_Init/MPI_Finalize, where no suppression can name it reliably
// (its frames are lost to the fast unwinder). The LD_PRELOAD shim must not trip ASan's
// link-order check either. Leaks in wmap's own code are caught by the single-process tests.
// Every app context of an MPMD line needs it (mpirun applies -x per context).
std::string sanitizer_env() {
  const char* asan = std::getenv("ASAN_OPTIONS");
  if (asan == nullptr) return "";
  return "-x " + shell_quote(std::string("ASAN_OPTIONS=") + asan + ":detect_leaks=0:verify_asan_link_order=0") + " ";
}
std::string mpirun(const std::string& env, const MpiLaunch& launch) {
  return launch.shell_env + " timeout " + std::to_string(kMpiTimeoutSeconds) +
         " mpirun --allow-run-as-root --oversubscribe " + launch.options + " " + sanitizer_env() + env + " ";
}

CommandResult run_mpi(const std::string& args, const std::string& env, const MpiLaunch& launch) {
  TempDir out;
  CommandResult r =
      run_command(mpirun(env, launch) + "--output-filename " + shell_quote(out.path().string()) + " " + args);
  r.out.clear();
  r.err.clear();
  std::vector<fs::path> ranks;
  for (const auto& e : fs::recursive_directory_iterator(out.path())) {
    if (e.is_directory() && e.path().filename().string().rfind("rank.", 0) == 0) ranks.push_back(e.path());
  }
  std::sort(ranks.begin(), ranks.end(), [](const fs::path& a, const fs::path& b) {
    return std::stoi(a.filename().string().substr(5)) < std::stoi(b.filename().string().substr(5));
  });
  for (const auto& dir : ranks) {
    if (fs::exists(dir / "stdout")) r.out += read_file(dir / "stdout");
    if (fs::exists(dir / "stderr")) r.err += read_file(dir / "stderr");
  }
  return r;
}

std::string reference_py() { return (source_dir() / "tests/python/reference.py").string(); }

// The --json lines of a run, by rank.
std::map<int, RankJson> ranks_of(const std::string& out) {
  std::map<int, RankJson> r;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("{\"params\"", 0) != 0) continue;
    RankJson j{line};
    r[std::stoi(j.field("rank"))] = j;
  }
  return r;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

void expect_dumps_match(const fs::path& ckpt, const fs::path& dumps, uint32_t t, uint32_t p, const std::string& what,
                        uint32_t gpus_per_node) {
  for (uint32_t r = 0; r < t; ++r) {
    const auto dump = dumps / ("rank" + std::to_string(r) + ".safetensors");
    auto check =
        run_command(python() + " " + shell_quote(reference_py()) + " check " + shell_quote(ckpt.string()) + " " +
                    shell_quote(dump.string()) + " --tp-size " + std::to_string(t) + " --tp-rank " + std::to_string(r) +
                    " --ep-size " + std::to_string(p) + " --gpus-per-node " + std::to_string(gpus_per_node));
    EXPECT_EQ(check.exit_code, 0) << what << " rank " << r << ":\n" << check.out << check.err;
    EXPECT_NE(check.out.find(" 0 mismatches"), std::string::npos) << what << " rank " << r << ": " << check.out;
  }
}

fs::path synth(const TempDir& dir, const std::string& family, const std::string& flags) {
  const auto ckpt = dir / family;
  auto r = run_wmap("synth " + family + " " + shell_quote(ckpt.string()) + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ckpt;
}

// `mpirun -np T wmap load` under `policy`; checks every rank's dump and returns the JSON lines.
// `reference` (default: ckpt) is the safetensors checkpoint the dumps are checked against.
std::map<int, RankJson> load_all_ranks(const fs::path& ckpt, uint32_t t, uint32_t p, const std::string& policy,
                                       const std::string& extra, const fs::path& reference, const MpiLaunch& launch) {
  TempDir out;
  const std::string args = "load " + shell_quote(ckpt.string()) + " --tp-size " + std::to_string(t) + " --ep-size " +
                           std::to_string(p) + " --io-policy " + policy + " " + extra + " --json --dump " +
                           shell_quote((out / "rank{rank}.safetensors").string());
  auto r = run_mpi("-np " + std::to_string(t) + " " + wmap_cli() + " " + args, "", launch);
  EXPECT_EQ(r.exit_code, 0) << policy << ":\n" << r.err;
  auto ranks = ranks_of(r.out);
  EXPECT_EQ(ranks.size(), t) << r.out;
  for (const auto& [rank, j] : ranks) {
    EXPECT_EQ(j.field("io_policy"), policy) << "rank " << rank << ": " << j.field("io_policy_reason");
    EXPECT_EQ(j.field("io_policy_requested"), policy);
    EXPECT_EQ(j.u64("world_size"), t);
  }
  // The node's rank count is part of the layout (the trtllm DeepSeek dense-MLP split is capped by it).
  const uint32_t g = ranks.empty() ? t : static_cast<uint32_t>(ranks.begin()->second.u64("gpus_per_node"));
  expect_dumps_match(reference.empty() ? ckpt : reference, out.path(), t, p, policy, g);
  return ranks;
}

void expect_storage_traffic(const std::map<std::string, std::map<int, RankJson>>& by_policy) {
  uint64_t needed_sum = 0, union_bytes = 0;
  for (const auto& [rank, j] : by_policy.at("exchange")) {
    needed_sum += j.u64("needed_bytes");
    union_bytes = j.u64("union_bytes");
  }
  ASSERT_GT(union_bytes, 0u);
  EXPECT_LT(union_bytes, needed_sum) << "TP ranks share replicated tensors, so the union is smaller than the sum";
  for (const auto& [policy, ranks] : by_policy) {
    uint64_t storage = 0, received = 0, sent = 0, received_off = 0, sent_off = 0;
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> node;  // node -> (its union, its ranks' storage bytes)
    for (const auto& [rank, j] : ranks) {
      storage += j.u64("storage_bytes");
      received += j.u64("received_bytes");
      sent += j.u64("sent_bytes");
      received_off += j.u64("received_off_node_bytes");
      sent_off += j.u64("sent_off_node_bytes");
      node[j.u64("node")].first = j.u64("union_bytes");
      node[j.u64("node")].second += j.u64("storage_bytes");
    }
    if (policy == "native") {
      // Strided row-parallel runs are read with their sub-page gaps, hence up to 2x.
      EXPECT_GE(storage, needed_sum) << "native reads at least the sum of the ranks' needs";
      EXPECT_LE(storage, 2 * needed_sum);
      EXPECT_GT(storage, union_bytes);
      EXPECT_EQ(received, 0u);
    } else if (policy == "rank-striped") {
      // Each node reads the union of its own ranks' needs once, in stripes: no more, and nothing
      // for the other nodes.
      for (const auto& [id, n] : node) {
        EXPECT_EQ(n.second, n.first) << "rank-striped: node " << id
                                     << " reads the union of its ranks' needs exactly once";
      }
      EXPECT_EQ(received, 0u);
    } else {
      EXPECT_EQ(storage, union_bytes) << policy << " reads each needed byte from storage exactly once in the whole job";
    }
    if (policy == "exchange") {
      EXPECT_EQ(received, sent);
      EXPECT_LT(received, needed_sum) << "a rank reads its own share instead of receiving it";
      EXPECT_EQ(received_off, sent_off) << "what leaves one node arrives at another";
      EXPECT_LE(sent_off, sent);
      if (node.size() == 1) {
        EXPECT_EQ(sent_off, 0u) << "one node: nothing crosses between nodes";
      } else {
        EXPECT_GT(sent_off, 0u) << "ranks on different nodes need each other's chunks";
      }
    } else {
      EXPECT_EQ(sent_off, 0u) << policy;
    }
  }
}

std::map<std::string, std::map<int, RankJson>> expect_every_policy_bit_exact(const fs::path& ckpt, uint32_t t,
                                                                             uint32_t p, const MpiLaunch& launch,
                                                                             const fs::path& reference) {
  std::map<std::string, std::map<int, RankJson>> by_policy;
  for (const std::string policy : {"native", "rank-striped", "exchange"}) {
    by_policy[policy] = load_all_ranks(ckpt, t, p, policy, "", reference, launch);
  }
  expect_storage_traffic(by_policy);
  return by_policy;
}

}  // namespace wmap::test
