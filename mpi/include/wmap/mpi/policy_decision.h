#pragma once
// The choice of the I/O policy every rank of a job runs: each rank gathers the others' facts,
// then computes the same policy and the same reason from them (decide_io_policy is a pure
// function), so no rank enters a collective the others skip. Whatever keeps a policy from
// running (different files, too little memory, too much metadata for one allgather, a thread
// level MPI did not grant) makes every rank fall back to native together, with that reason.
// Plain values; no MPI.

#include <cstdint>
#include <string>
#include <vector>

#include "wmap/mpi/io_policy.h"

namespace wmap::mpi {

struct RankFacts {
  std::string policy;  // requested
  std::string host;
  uint64_t exchange_bytes = 0;      // host memory the exchange takes on this rank: the bytes it holds,
                                    // its transfer buffers and, on a host device, its parameters
  bool params_on_host = true;       // false with --device cuda:N
  uint64_t available = 0;           // host memory this rank may use (0: unknown)
  uint64_t extents_bytes = 0;       // its encoded needed-extent list, which an allgather carries
  bool threads_ok = true;           // MPI granted at least MPI_THREAD_FUNNELED (the exchange runs a reader thread)
  std::string thread_level;         // the level granted, by name
  bool remote = false;              // the checkpoint is remote storage (s3://, http(s)://, hf://)
  std::vector<std::string> shards;  // "file size N mtime_ns M" (remote: "... etag E")

  // One field per line (shards last), so decode(encode()) is the identity.
  std::string encode() const;
  static RankFacts decode(const std::string& text);
};

// The most bytes one MPI_Allgatherv carries (its counts and displacements are ints).
constexpr uint64_t kMaxAllgatherBytes = 2147483647;

// The policy every rank runs, and why it is not the requested one ("" when it is).
IoPolicy decide_io_policy(const std::vector<RankFacts>& facts, std::string& reason);

}  // namespace wmap::mpi
