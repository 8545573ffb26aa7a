#pragma once
// The `--io-policy` values. Header-only and free of MPI, so a CLI built without MPI still
// validates the flag (and reports that a single process falls back to native).

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
  throw Error(ErrorCode::kInvalidArgument, "--io-policy '" + std::string(name) + "': expected native, rank-striped or exchange");
}

}  // namespace wmap::mpi
