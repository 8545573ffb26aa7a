#pragma once
// The `--io-policy` values. Header-only and free of MPI, so a CLI built without MPI still
// validates the flag (and reports that a single process falls back to native).

#include <cstdint>
#include <string>
#include <string_view>

#include "wmap/util/error.h"

namespace wmap::mpi {

enum class IoPolicy { kNative, kRankStriped, kExchange };

inline std::string_view io_policy_name(IoPolicy policy) {
  switch (policy) {
    case IoPolicy::kNative: return "native";
    case IoPolicy::kRankStriped: return "rank-striped";
    case IoPolicy::kExchange: return "exchange";
  }
  return "?";
}

// Throws kInvalidArgument naming the value.
inline IoPolicy parse_io_policy(std::string_view name) {
  for (IoPolicy p : {IoPolicy::kNative, IoPolicy::kRankStriped, IoPolicy::kExchange}) {
    if (io_policy_name(p) == name) return p;
  }
  throw Error(ErrorCode::kInvalidArgument,
              "--io-policy '" + std::string(name) + "': expected native, rank-striped or exchange");
}

// What a rank's I/O policy step did (RankIo::report()); a single process keeps the defaults.
struct RankIoReport {
  IoPolicy requested = IoPolicy::kNative, effective = IoPolicy::kNative;
  std::string reason;           // why effective differs from requested (or "")
  uint64_t needed_bytes = 0;    // this rank's plan (its merged extents)
  uint64_t extents = 0;         // how many extents describe them (40 bytes each when gathered)
  uint64_t union_bytes = 0;     // exchange: the job's; rank-striped: the node's
  uint64_t storage_bytes = 0;   // read from the shard files by this rank before the load
  uint64_t received_bytes = 0;  // exchange: from the other ranks
  uint64_t sent_bytes = 0;
  uint64_t received_off_node_bytes = 0;  // exchange: of received_bytes, from other nodes
  uint64_t sent_off_node_bytes = 0;      // exchange: of sent_bytes, to other nodes
  double seconds = 0;                    // warm-up or exchange
};

}  // namespace wmap::mpi
