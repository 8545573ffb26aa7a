#pragma once
// The weight cache (DESIGN.md "Weight cache"): loaded host parameter sets kept process-wide for
// repeated loads (an engine rebuilt in the same process, tests, notebooks), keyed by the catalog's
// content id, the plan id and every shard's signature (size, mtime, inode), so a rewritten shard
// misses. At most WMAP_WEIGHT_CACHE_MAX_ENTRIES entries (default 1: each pins a whole rank in host
// memory), the oldest evicted first. Each entry keeps a fingerprint per parameter (shape, dtype,
// the float sum of at most 1,024 elements sampled at a fixed stride, and the sum of their bits);
// a hit recomputes them first,
// and if a parameter was modified in place through a returned view, a warning names up to five,
// the entry is dropped and the caller loads from the files again. Thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wmap/exec/executor.h"

namespace wmap {

class LoadPlan;
class Catalog;

class WeightCache {
 public:
  static WeightCache& process();  // the one cache of this process

  // The cache key of a plan over a catalog (content id, plan id, shard signatures).
  static std::string key_of(const LoadPlan& plan, const Catalog& catalog);
  // WMAP_WEIGHT_CACHE_MAX_ENTRIES: unset -> 1; an integer 0..1024 (0 disables the cache);
  // anything else throws kInvalidArgument naming the variable and its value.
  static size_t max_entries_from_env();

  // A hit: the cached parameters (their buffers shared with the cache), stats of a load that
  // read nothing (cache "hit"). nullopt on a miss, or when a parameter was modified in place
  // (warned; the entry is dropped).
  std::optional<LoadedModel> lookup(const std::string& key);
  // Keeps `model` (host buffers) under `key` (not when max_entries is 0), then evicts the oldest
  // entries beyond max_entries (a lowered limit drops what is over it).
  void insert(const std::string& key, const LoadedModel& model, size_t max_entries);
  void clear();  // entries and counters

  struct Info {
    size_t entries = 0, hits = 0, misses = 0, healed = 0, evicted = 0;
  };
  Info info() const;

 private:
  WeightCache();
  ~WeightCache();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wmap
