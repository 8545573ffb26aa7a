#include "wmap/mpi/policy_decision.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace wmap::mpi {
namespace {

double gib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

// "rank R on host H": which node's copy of the files a fact is about.
std::string who(const std::vector<RankFacts>& facts, int r) {
  return "rank " + std::to_string(r) + " on host " + facts[r].host;
}

// Why the ranks in `group` cannot share reads of their files ("" when they can).
std::string files_differ(const std::vector<RankFacts>& facts, const std::vector<int>& group) {
  const RankFacts& a = facts[group.front()];
  for (int r : group) {
    const RankFacts& b = facts[r];
    if (b.shards.size() != a.shards.size()) {
      return who(facts, r) + " has " + std::to_string(b.shards.size()) + " shard files, " + who(facts, group.front()) +
             " has " + std::to_string(a.shards.size());
    }
    for (size_t i = 0; i < a.shards.size(); ++i) {
      if (a.shards[i] != b.shards[i]) {
        return who(facts, r) + ": shard '" + b.shards[i] + "' differs from " + who(facts, group.front()) + ": '" +
               a.shards[i] + "'";
      }
    }
  }
  return "";
}

// Why the needed-extent lists of `group` cannot be all-gathered in one call ("" when they can).
std::string too_much_metadata(const std::vector<RankFacts>& facts, const std::vector<int>& group,
                              const std::string& whose) {
  uint64_t total = 0;
  for (int r : group) total += facts[r].extents_bytes;
  if (total <= kMaxAllgatherBytes) return "";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s needed-extent lists take %.2f GiB, over the 2 GiB one MPI_Allgatherv carries",
                whose.c_str(), gib(total));
  return buf;
}

}  // namespace

std::string RankFacts::encode() const {
  std::ostringstream o;
  o << policy << '\n'
    << host << '\n'
    << exchange_bytes << '\n'
    << params_on_host << '\n'
    << available << '\n'
    << extents_bytes << '\n'
    << threads_ok << '\n'
    << remote << '\n'
    << thread_level << '\n';
  for (const auto& s : shards) o << s << '\n';
  return o.str();
}

RankFacts RankFacts::decode(const std::string& text) {
  std::istringstream in(text);
  RankFacts f;
  std::string line;
  auto number = [&] {
    std::getline(in, line);
    return std::stoull(line);
  };
  std::getline(in, f.policy);
  std::getline(in, f.host);
  f.exchange_bytes = number();
  f.params_on_host = number() != 0;
  f.available = number();
  f.extents_bytes = number();
  f.threads_ok = number() != 0;
  f.remote = number() != 0;
  std::getline(in, f.thread_level);
  while (std::getline(in, line)) f.shards.push_back(line);
  return f;
}

namespace {

// The policy for `requested` (the ranks agree on it), and why it is not that one.
IoPolicy decide(const std::vector<RankFacts>& facts, IoPolicy requested, std::string& reason) {
  if (requested == IoPolicy::kNative) return requested;
  if (facts.size() == 1) {
    reason = "a single rank has nothing to share";
    return IoPolicy::kNative;
  }
  // Ranks per host: rank-striped shares a host's page cache; exchange needs one set of files.
  std::vector<std::vector<int>> hosts;
  for (int r = 0; r < static_cast<int>(facts.size()); ++r) {
    auto it =
        std::find_if(hosts.begin(), hosts.end(), [&](const auto& g) { return facts[g.front()].host == facts[r].host; });
    if (it == hosts.end()) {
      hosts.push_back({r});
    } else {
      it->push_back(r);
    }
  }
  if (requested == IoPolicy::kRankStriped) {
    for (const auto& g : hosts) {
      reason = files_differ(facts, g);
      if (reason.empty()) reason = too_much_metadata(facts, g, "host " + facts[g.front()].host + "'s ranks'");
      if (!reason.empty()) return IoPolicy::kNative;
    }
    return requested;
  }
  std::vector<int> everyone(facts.size());
  for (size_t r = 0; r < facts.size(); ++r) everyone[r] = static_cast<int>(r);
  reason = files_differ(facts, everyone);
  if (!reason.empty()) return IoPolicy::kNative;
  for (size_t r = 0; r < facts.size(); ++r) {
    if (!facts[r].threads_ok) {
      reason = "rank " + std::to_string(r) + "'s MPI granted " + facts[r].thread_level +
               ", the exchange needs MPI_THREAD_FUNNELED (it reads on a thread beside the MPI thread)";
      return IoPolicy::kNative;
    }
  }
  reason = too_much_metadata(facts, everyone, "the ranks'");
  if (!reason.empty()) return IoPolicy::kNative;
  // A host holds its ranks' exchanged bytes and transfer buffers and, on a host device, their
  // parameters too.
  for (const auto& g : hosts) {
    uint64_t need = 0, avail = UINT64_MAX;
    bool params = false;
    for (int r : g) {
      need += facts[r].exchange_bytes;
      params = params || facts[r].params_on_host;
      if (facts[r].available) avail = std::min(avail, facts[r].available);
    }
    if (avail != UINT64_MAX && static_cast<double>(need) > 0.9 * static_cast<double>(avail)) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "host %s needs %.1f GiB for its %zu ranks' exchanged bytes%s, %.1f GiB available",
                    facts[g.front()].host.c_str(), gib(need), g.size(), params ? " and parameters" : "", gib(avail));
      reason = buf;
      return IoPolicy::kNative;
    }
  }
  return requested;
}

}  // namespace

IoPolicy decide_io_policy(const std::vector<RankFacts>& facts, std::string& reason) {
  reason.clear();
  for (size_t r = 1; r < facts.size(); ++r) {
    if (facts[r].policy != facts[0].policy) {
      reason =
          "rank " + std::to_string(r) + " asked for --io-policy " + facts[r].policy + ", rank 0 for " + facts[0].policy;
      return IoPolicy::kNative;
    }
  }
  const IoPolicy requested = parse_io_policy(facts[0].policy);
  if (requested == IoPolicy::kRankStriped && facts[0].remote) {
    // rank-striped warms a host's page cache for its ranks; remote bytes pass no page cache, so
    // a striped warm-up would fetch them twice. The exchange fetches each byte once per job.
    const std::string why =
        "rank-striped shares a host's page cache, which remote storage does not fill: running exchange, which "
        "fetches each byte once per job";
    IoPolicy p = decide(facts, IoPolicy::kExchange, reason);
    reason = why + (reason.empty() ? "" : "; then " + reason);
    return p;
  }
  return decide(facts, requested, reason);
}

}  // namespace wmap::mpi
