// The process-wide weight cache: entries, full digests, eviction.
#include "wmap/loader/weight_cache.h"

#include <list>
#include <mutex>
#include <unordered_map>

#include "wmap/catalog/catalog.h"
#include "wmap/plan/load_plan.h"
#include "wmap/util/env.h"
#include "wmap/util/error.h"
#include "logger.h"
#include "wmap/util/xxh3.h"

namespace wmap {

namespace {

// Every byte of a parameter (aliases hash their shared buffer again: tied embeddings only).
uint64_t digest_of(const LoadedParam& p) {
  if (!p.buffer || p.buffer->size() == 0) return xxh3_64({});
  const std::byte* data = p.buffer->host_data();
  if (data == nullptr) throw Error(ErrorCode::kInternal, "weight cache: '" + p.name + "' has no host memory");
  return xxh3_64({data, p.buffer->size()});
}

// Parameter bytes an entry holds, each buffer once.
uint64_t bytes_of(const LoadedModel& model) {
  std::unordered_map<const DeviceBuffer*, uint64_t> buffers;
  for (const auto& p : model.params) {
    if (p.buffer) buffers.emplace(p.buffer.get(), p.buffer->size());
  }
  uint64_t n = 0;
  for (const auto& [b, size] : buffers) n += size;
  return n;
}

}  // namespace

struct WeightCache::Impl {
  struct Entry {
    std::string key;
    LoadedModel model;
    std::vector<uint64_t> digests;  // per parameter, XXH3-64 of its bytes when stored
    uint64_t bytes = 0;
  };
  mutable std::mutex mu;
  std::list<Entry> entries;  // oldest first
  Info stats;

  void evict_over(const Limits& limits) {
    auto held = [&] {
      uint64_t n = 0;
      for (const auto& e : entries) n += e.bytes;
      return n;
    };
    while (!entries.empty() && (entries.size() > limits.max_entries || held() > limits.max_bytes)) {
      entries.pop_front();
      ++stats.evicted;
    }
  }
};

WeightCache::WeightCache() : impl_(std::make_unique<Impl>()) {}
WeightCache::~WeightCache() = default;

WeightCache& WeightCache::process() {
  static WeightCache* cache = new WeightCache();  // never destroyed: entries may be in use at exit
  return *cache;
}

std::string WeightCache::key_of(const LoadPlan& plan) {
  const Catalog& catalog = plan.catalog();
  std::string key = catalog.content_id() + "/" + plan.plan_id();
  for (const auto& s : catalog.shards()) {
    key += "/" + s.file + ":" + std::to_string(s.signature.size) + ":" + std::to_string(s.signature.mtime_ns) + ":" +
           std::to_string(s.signature.inode) + ":" + s.signature.etag;  // etag: a remote object's version
  }
  return key;
}

WeightCache::Limits WeightCache::limits_from_env() {
  Limits l;
  l.max_entries =
      env_integer("WMAP_WEIGHT_CACHE_MAX_ENTRIES", 0, 1024, "weight-cache entries kept; 0 disables the cache")
          .value_or(l.max_entries);
  l.max_bytes =
      env_bytes("WMAP_WEIGHT_CACHE_MAX_BYTES", "parameter bytes the weight cache keeps").value_or(l.max_bytes);
  return l;
}

std::optional<LoadedModel> WeightCache::lookup(const std::string& key,
                                               const std::function<bool(const LoadStats&)>& accept) {
  std::lock_guard lock(impl_->mu);
  for (auto it = impl_->entries.begin(); it != impl_->entries.end(); ++it) {
    if (it->key != key) continue;
    if (accept && !accept(it->model.stats)) {
      ++impl_->stats.bypassed;
      ++impl_->stats.misses;
      return std::nullopt;
    }
    std::vector<std::string> changed;
    for (size_t i = 0; i < it->model.params.size(); ++i) {
      if (digest_of(it->model.params[i]) != it->digests[i]) changed.push_back(it->model.params[i].name);
    }
    if (!changed.empty()) {
      std::string names;
      for (size_t i = 0; i < changed.size() && i < 5; ++i) names += (i ? ", " : "") + changed[i];
      if (changed.size() > 5) names += ", ...";
      log().warn(
          "weight cache: {} parameter(s) were modified in place since they were cached ({}): the entry is dropped "
          "and the load reads the files again",
          changed.size(), names);
      impl_->entries.erase(it);
      ++impl_->stats.healed;
      ++impl_->stats.misses;
      impl_->stats.last_healed = std::move(changed);
      return std::nullopt;
    }
    ++impl_->stats.hits;
    LoadedModel hit;
    hit.params = it->model.params;  // fresh list, the same buffers
    hit.stats = it->model.stats;
    hit.stats.seconds = 0;
    hit.stats.bytes_read = hit.stats.reads = 0;
    hit.stats.read_seconds = hit.stats.copy_seconds = hit.stats.transform_seconds = 0;
    hit.stats.cache = "hit";
    for (auto& c : hit.stats.verification) {
      c.note += std::string(c.note.empty() ? "" : "; ") + "checked when the weight cache's entry was made";
      c.extra_bytes = 0;
    }
    hit.stats.verify_extra_bytes = 0;
    return hit;
  }
  ++impl_->stats.misses;
  return std::nullopt;
}

bool WeightCache::insert(const std::string& key, const LoadedModel& model, const Limits& limits) {
  Impl::Entry e{key, model, {}, bytes_of(model)};
  const bool keep = limits.max_entries > 0 && e.bytes <= limits.max_bytes;
  if (keep) {
    e.digests.reserve(model.params.size());
    for (const auto& p : model.params) e.digests.push_back(digest_of(p));
  }
  std::lock_guard lock(impl_->mu);
  impl_->entries.remove_if([&](const Impl::Entry& x) { return x.key == key; });
  if (keep) impl_->entries.push_back(std::move(e));
  impl_->evict_over(limits);  // a lowered limit (0 included) also drops what is over it
  return keep;
}

void WeightCache::clear() {
  std::lock_guard lock(impl_->mu);
  impl_->entries.clear();
  impl_->stats = {};
}

WeightCache::Info WeightCache::info() const {
  std::lock_guard lock(impl_->mu);
  Info i = impl_->stats;
  i.entries = impl_->entries.size();
  for (const auto& e : impl_->entries) i.bytes += e.bytes;
  return i;
}

}  // namespace wmap
