#include "wmap/mpi/rank_io.h"

#include <algorithm>
#include <cstdio>

#include "wmap/io/remote.h"
#include "wmap/util/error.h"
#include "wmap/mpi/extent_exchange.h"
#include "wmap/mpi/file_extents.h"
#include "wmap/mpi/launch_env.h"
#include "wmap/mpi/policy_decision.h"
#include "wmap/mpi/striped_warmup.h"

namespace wmap::mpi {
namespace {

RankFacts local_facts(IoPolicy requested, const MpiWorld& world, const PreparedLoad& prepared, uint64_t held,
                      uint64_t extents_bytes, bool params_on_host) {
  RankFacts f;
  f.policy = std::string(io_policy_name(requested));
  f.host = host_name();
  f.params_on_host = params_on_host;
  f.exchange_bytes = held + kExchangeBufferBytes + (params_on_host ? prepared.plan->bytes_to_load() : 0);
  f.available = available_memory_bytes();
  f.extents_bytes = extents_bytes;
  f.threads_ok = world.thread_level() >= MPI_THREAD_FUNNELED;
  f.thread_level = world.thread_level_name();
  const Catalog& c = *prepared.catalog;
  f.remote = c.shards().size() > 0 && is_remote_path(c.shard_path(0));
  for (uint32_t s = 0; s < c.shards().size(); ++s) {
    // A remote object's identity is the size and ETag its catalog (built just now) recorded.
    const FileSignature sig = f.remote ? c.shards()[s].signature : stat_signature(c.shard_path(s));
    f.shards.push_back(c.shards()[s].file + " size " + std::to_string(sig.size) + " mtime_ns " +
                       std::to_string(sig.mtime_ns) + (sig.etag.empty() ? "" : " etag " + sig.etag));
  }
  return f;
}

std::vector<std::vector<FileExtent>> gather_extents(const MpiWorld& world, const std::string& mine, MPI_Comm comm) {
  std::vector<std::vector<FileExtent>> all;
  for (const std::string& s : world.allgather(mine, comm)) all.push_back(decode_extents(s));
  return all;
}

}  // namespace

RankIo::RankIo(MpiWorld& world, IoPolicy requested, const PreparedLoad& prepared, bool params_on_host,
               const FileSystem& fs) {
  report_.requested = requested;
  std::vector<FileExtent> mine;
  std::string encoded, facts_text;
  std::exception_ptr error;
  try {
    mine = needed_extents(*prepared.plan);
    report_.needed_bytes = extent_bytes(mine);
    report_.extents = mine.size();
    encoded = encode_extents(mine);
    facts_text = local_facts(requested, world, prepared, report_.needed_bytes, encoded.size(), params_on_host).encode();
  } catch (...) {
    error = std::current_exception();
  }
  world.agree("the I/O policy check", error);
  std::vector<RankFacts> facts;
  for (const std::string& s : world.allgather(facts_text, world.world())) facts.push_back(RankFacts::decode(s));
  IoPolicy effective = decide_io_policy(facts, report_.reason);

  if (effective == IoPolicy::kRankStriped) {
    const WarmupStats w = striped_warmup(world, *prepared.catalog, gather_extents(world, encoded, world.node()), fs);
    report_.storage_bytes = w.storage_bytes;
    report_.union_bytes = w.node_union_bytes;
    report_.seconds = w.seconds;
  } else if (effective == IoPolicy::kExchange) {
    const auto needed = gather_extents(world, encoded, world.world());
    encoded = std::string();
    // The memory check is an estimate: a rank that still cannot allocate its store makes every
    // rank load natively (agreed like the decision, so nobody enters the exchange alone).
    std::string failed;
    try {
      store_ = std::make_unique<ExtentStoreFileSystem>(*prepared.catalog, std::move(mine));
    } catch (const std::bad_alloc&) {
      failed = "out of memory";
    } catch (const std::exception& e) {
      failed = e.what();
    }
    const std::vector<std::string> all = world.allgather(failed, world.world());
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].empty()) continue;
      char buf[128];
      std::snprintf(buf, sizeof buf, "rank %zu could not allocate %.2f GiB for its exchanged bytes: ", r,
                    static_cast<double>(extent_bytes(needed[r])) / (1 << 30));
      report_.reason = buf + all[r];
      store_.reset();
      effective = IoPolicy::kNative;
      break;
    }
    if (store_) {
      error = nullptr;
      try {
        const ExchangeStats x = exchange_extents(world, *prepared.catalog, needed, *store_, fs);
        report_.storage_bytes = x.storage_bytes;
        report_.received_bytes = x.received_bytes;
        report_.sent_bytes = x.sent_bytes;
        report_.received_off_node_bytes = x.received_off_node_bytes;
        report_.sent_off_node_bytes = x.sent_off_node_bytes;
        report_.union_bytes = x.union_bytes;
        report_.seconds = x.seconds;
      } catch (...) {
        error = std::current_exception();
      }
      world.agree("the exchange", error);
    }
  }
  report_.effective = effective;
}

}  // namespace wmap::mpi
