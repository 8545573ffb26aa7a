#include "wmap/mpi/rank_io.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "wmap/util/error.h"
#include "wmap/mpi/extent_exchange.h"
#include "wmap/mpi/file_extents.h"
#include "wmap/mpi/striped_warmup.h"

namespace wmap::mpi {
namespace {

// What a rank tells the others before the policy is chosen, one field per line.
struct RankFacts {
  std::string policy, host;
  uint64_t needed = 0, available = 0;
  std::vector<std::string> shards;  // "file size mtime_ns"

  std::string encode() const {
    std::ostringstream o;
    o << policy << '\n' << host << '\n' << needed << '\n' << available << '\n';
    for (const auto& s : shards) o << s << '\n';
    return o.str();
  }
  static RankFacts decode(const std::string& text) {
    std::istringstream in(text);
    RankFacts f;
    std::string line;
    std::getline(in, f.policy);
    std::getline(in, f.host);
    std::getline(in, line);
    f.needed = std::stoull(line);
    std::getline(in, line);
    f.available = std::stoull(line);
    while (std::getline(in, line)) f.shards.push_back(line);
    return f;
  }
};

RankFacts local_facts(IoPolicy requested, const PreparedLoad& prepared, uint64_t needed) {
  RankFacts f;
  f.policy = std::string(io_policy_name(requested));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  f.host = host;
  f.needed = needed;
  f.available = available_memory_bytes();
  const Catalog& c = prepared.catalog;
  for (uint32_t s = 0; s < c.shards().size(); ++s) {
    const FileSignature sig = stat_signature(c.shard_path(s));
    f.shards.push_back(c.shards()[s].file + " size " + std::to_string(sig.size) + " mtime_ns " + std::to_string(sig.mtime_ns));
  }
  return f;
}

// Why the ranks in `group` cannot share reads of their files ("" when they can).
std::string files_differ(const std::vector<RankFacts>& facts, const std::vector<int>& group) {
  const RankFacts& a = facts[group.front()];
  for (int r : group) {
    const RankFacts& b = facts[r];
    if (b.shards.size() != a.shards.size()) {
      return "rank " + std::to_string(r) + " has " + std::to_string(b.shards.size()) + " shard files, rank " +
             std::to_string(group.front()) + " has " + std::to_string(a.shards.size());
    }
    for (size_t i = 0; i < a.shards.size(); ++i) {
      if (a.shards[i] != b.shards[i]) {
        return "rank " + std::to_string(r) + "'s shard '" + b.shards[i] + "' differs from rank " + std::to_string(group.front()) +
               "'s '" + a.shards[i] + "'";
      }
    }
  }
  return "";
}

// The policy every rank will run, and why it is not the requested one. Deterministic in `facts`.
IoPolicy decide(const std::vector<RankFacts>& facts, std::string& reason) {
  const IoPolicy requested = parse_io_policy(facts[0].policy);
  for (size_t r = 1; r < facts.size(); ++r) {
    if (facts[r].policy != facts[0].policy) {
      reason = "rank " + std::to_string(r) + " asked for --io-policy " + facts[r].policy + ", rank 0 for " + facts[0].policy;
      return IoPolicy::kNative;
    }
  }
  if (requested == IoPolicy::kNative) return requested;
  if (facts.size() == 1) {
    reason = "a single rank has nothing to share";
    return IoPolicy::kNative;
  }
  // Ranks per host: rank-striped shares a host's page cache; exchange needs one set of files.
  std::vector<std::vector<int>> hosts;
  for (int r = 0; r < static_cast<int>(facts.size()); ++r) {
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& g) { return facts[g.front()].host == facts[r].host; });
    if (it == hosts.end()) {
      hosts.push_back({r});
    } else {
      it->push_back(r);
    }
  }
  if (requested == IoPolicy::kRankStriped) {
    for (const auto& g : hosts) {
      reason = files_differ(facts, g);
      if (!reason.empty()) return IoPolicy::kNative;
    }
    return requested;
  }
  std::vector<int> everyone(facts.size());
  for (size_t r = 0; r < facts.size(); ++r) everyone[r] = static_cast<int>(r);
  reason = files_differ(facts, everyone);
  if (!reason.empty()) return IoPolicy::kNative;
  // A host holds its ranks' exchange buffers and, on a host device, their parameters too.
  for (const auto& g : hosts) {
    uint64_t need = 0, avail = UINT64_MAX;
    for (int r : g) {
      need += 2 * facts[r].needed;
      if (facts[r].available) avail = std::min(avail, facts[r].available);
    }
    if (avail != UINT64_MAX && static_cast<double>(need) > 0.9 * static_cast<double>(avail)) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "host %s needs %.1f GiB for its %zu ranks' exchange buffers and parameters, %.1f GiB available",
                    facts[g.front()].host.c_str(), static_cast<double>(need) / (1 << 30), g.size(),
                    static_cast<double>(avail) / (1 << 30));
      reason = buf;
      return IoPolicy::kNative;
    }
  }
  return requested;
}

std::vector<std::vector<FileExtent>> gather_extents(const MpiWorld& world, const std::vector<FileExtent>& mine, MPI_Comm comm) {
  std::vector<std::vector<FileExtent>> all;
  for (const std::string& s : world.allgather(encode_extents(mine), comm)) all.push_back(decode_extents(s));
  return all;
}

}  // namespace

RankIo::RankIo(MpiWorld& world, IoPolicy requested, const PreparedLoad& prepared) {
  report_.requested = std::string(io_policy_name(requested));
  std::vector<FileExtent> mine;
  std::string facts_text;
  std::exception_ptr error;
  try {
    mine = needed_extents(*prepared.plan);
    report_.needed_bytes = extent_bytes(mine);
    facts_text = local_facts(requested, prepared, report_.needed_bytes).encode();
  } catch (...) {
    error = std::current_exception();
  }
  world.agree("the I/O policy check", error);
  std::vector<RankFacts> facts;
  for (const std::string& s : world.allgather(facts_text, world.world())) facts.push_back(RankFacts::decode(s));
  const IoPolicy effective = decide(facts, report_.reason);
  report_.effective = std::string(io_policy_name(effective));

  if (effective == IoPolicy::kRankStriped) {
    const WarmupStats w = striped_warmup(world, prepared.catalog, gather_extents(world, mine, world.node()));
    report_.storage_bytes = w.storage_bytes;
    report_.union_bytes = w.node_union_bytes;
    report_.seconds = w.seconds;
  } else if (effective == IoPolicy::kExchange) {
    const auto needed = gather_extents(world, mine, world.world());
    error = nullptr;
    try {
      store_ = std::make_unique<ExtentStoreFileSystem>(prepared.catalog, std::move(mine));
    } catch (...) {
      error = std::current_exception();
    }
    world.agree("allocating the exchange buffers", error);
    error = nullptr;
    try {
      const ExchangeStats x = exchange_extents(world, prepared.catalog, needed, *store_);
      report_.storage_bytes = x.storage_bytes;
      report_.received_bytes = x.received_bytes;
      report_.sent_bytes = x.sent_bytes;
      report_.seconds = x.seconds;
    } catch (...) {
      error = std::current_exception();
    }
    std::vector<FileExtent> all;
    for (const auto& e : needed) all.insert(all.end(), e.begin(), e.end());
    report_.union_bytes = extent_bytes(merge_extents(std::move(all)));
    world.agree("the exchange", error);
  }
}

}  // namespace wmap::mpi
