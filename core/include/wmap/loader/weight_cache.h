#pragma once
// The weight cache (DESIGN.md "Weight cache"): loaded host parameter sets kept process-wide for
// repeated loads (an engine rebuilt in the same process, tests, notebooks), keyed by the catalog's
// content id, the plan id and every shard's signature (size, mtime, inode; a remote object's
// size and identity), taken again at each lookup, so a rewritten shard misses. A hit satisfies
// only the verification its entry was made with (review F3): a later verify= it does not meet
// bypasses the entry. Bounded by WMAP_WEIGHT_CACHE_MAX_ENTRIES (default 1: each pins a whole rank in host
// memory) and WMAP_WEIGHT_CACHE_MAX_BYTES (default: no byte limit), the oldest evicted first.
//
// A hit never returns bytes that differ from the checkpoint's: each entry keeps an XXH3-64 digest
// of every parameter's bytes, taken when it was stored, and a hit hashes every byte again first
// (review F2: a sample of 1,024 elements missed most in-place writes). When a parameter was
// changed through a returned view, a warning names it, the entry is dropped and the caller loads
// from the files again (healed). Front ends hand cached buffers out read-only where the framework
// can say so (numpy, DLPack 1.x). Thread-safe.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wmap/exec/executor.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

class LoadPlan;
class Catalog;

class WeightCache {
 public:
  static WeightCache& process();  // the one cache of this process

  struct Limits {
    size_t max_entries = 1;
    uint64_t max_bytes = UINT64_MAX;
  };
  // WMAP_WEIGHT_CACHE_MAX_ENTRIES: an integer 0..1024 (0 disables the cache), default 1.
  // WMAP_WEIGHT_CACHE_MAX_BYTES: a byte count (digits, optional K/M/G/T), default no limit; an
  // entry larger than it is not kept. Anything else throws kInvalidArgument naming the variable.
  static Limits limits_from_env();

  // The cache key of a plan over its catalog (content id, plan id, shard signatures).
  static std::string key_of(const LoadPlan& plan);

  // A hit: the cached parameters (their buffers shared with the cache), stats of a load that
  // read nothing (cache "hit") but the verification its entry was made with (replayed). nullopt
  // on a miss, when `accept` refuses the entry's stats (a verification it was not made with:
  // counted `bypassed`; the caller loads and verifies, and its insert replaces the entry), or when
  // a parameter's bytes changed since they were cached (warned with the parameters' names; the
  // entry is dropped).
  std::optional<LoadedModel> lookup(const std::string& key, const std::function<bool(const LoadStats&)>& accept = {});
  // Keeps `model` (host buffers) under `key` when the limits allow (returns whether it did), then
  // evicts the oldest entries beyond them (a lowered limit drops what is over it).
  bool insert(const std::string& key, const LoadedModel& model, const Limits& limits);
  void clear();  // entries and counters

  struct Info {
    size_t entries = 0, hits = 0, misses = 0, healed = 0, evicted = 0;
    size_t bypassed = 0;                   // entries found but not made with the verification asked for
    uint64_t bytes = 0;                    // parameter bytes held
    std::vector<std::string> last_healed;  // the parameters the last heal found changed
  };
  Info info() const;

 private:
  WeightCache();
  ~WeightCache();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wmap
WMAP_PUBLIC_END
