// The process-wide weight cache: entries, fingerprints, eviction.
#include "wmap/loader/weight_cache.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>

#include "wmap/catalog/catalog.h"
#include "wmap/plan/load_plan.h"
#include "wmap/util/error.h"
#include "wmap/util/log.h"

namespace wmap {

namespace {

constexpr size_t kSamples = 1024;

// One element's value, as a double: float dtypes by value, others by their integer bits.
double element(const std::byte* p, DType dtype) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      const uint32_t bits = uint32_t{h} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: {
      uint64_t v = 0;
      std::memcpy(&v, p, std::min<size_t>(8, std::max<size_t>(1, dtype_bits(dtype) / 8)));
      return static_cast<double>(v);
    }
  }
}

// DESIGN.md's fingerprint (shape, dtype, the float sum of the sampled elements), plus the sum of
// the sampled elements' bits: a float sum alone misses a change lost in rounding next to a large
// value, or hidden by a NaN or an infinity among the samples.
struct Fingerprint {
  std::vector<uint64_t> shape;
  DType dtype;
  double sum = 0;         // finite samples only
  uint64_t bits_sum = 0;  // every sample's bits, wrapping
  bool operator==(const Fingerprint& o) const {
    return shape == o.shape && dtype == o.dtype && std::memcmp(&sum, &o.sum, sizeof sum) == 0 && bits_sum == o.bits_sum;
  }
};

Fingerprint fingerprint(const LoadedParam& p) {
  Fingerprint f{p.shape, p.dtype, 0, 0};
  const std::byte* data = p.buffer ? p.buffer->host_data() : nullptr;
  const uint64_t size = std::max<uint64_t>(1, dtype_bits(p.dtype) / 8);
  const uint64_t n = p.buffer && data ? p.buffer->size() / size : 0;
  if (n == 0) return f;
  const uint64_t stride = std::max<uint64_t>(1, (n + kSamples - 1) / kSamples);  // the samples span the whole tensor
  for (uint64_t i = 0, taken = 0; i < n && taken < kSamples; i += stride, ++taken) {
    const std::byte* e = data + i * size;
    const double v = element(e, p.dtype);
    if (std::isfinite(v)) f.sum += v;
    uint64_t bits = 0;
    std::memcpy(&bits, e, std::min<uint64_t>(size, 8));
    f.bits_sum += bits * (2 * taken + 1);  // position-weighted: a swap of two samples shows too
  }
  return f;
}

}  // namespace

struct WeightCache::Impl {
  struct Entry {
    std::string key;
    LoadedModel model;
    std::vector<Fingerprint> prints;
  };
  mutable std::mutex mu;
  std::list<Entry> entries;  // oldest first
  Info stats;
};

WeightCache::WeightCache() : impl_(std::make_unique<Impl>()) {}
WeightCache::~WeightCache() = default;

WeightCache& WeightCache::process() {
  static WeightCache* cache = new WeightCache();  // never destroyed: entries may be in use at exit
  return *cache;
}

std::string WeightCache::key_of(const LoadPlan& plan, const Catalog& catalog) {
  std::string key = catalog.content_id() + "/" + plan.plan_id();
  for (const auto& s : catalog.shards()) {
    key += "/" + s.file + ":" + std::to_string(s.signature.size) + ":" + std::to_string(s.signature.mtime_ns) + ":" +
           std::to_string(s.signature.inode);
  }
  return key;
}

size_t WeightCache::max_entries_from_env() {
  const char* v = std::getenv("WMAP_WEIGHT_CACHE_MAX_ENTRIES");
  if (v == nullptr) return 1;
  const std::string s(v);
  const bool digits = !s.empty() && s.size() <= 4 && s.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoul(s) > 1024) {
    throw Error(ErrorCode::kInvalidArgument,
                "WMAP_WEIGHT_CACHE_MAX_ENTRIES='" + s + "': expected an integer 0..1024 (entries kept; 0 disables the cache)");
  }
  return std::stoul(s);
}

std::optional<LoadedModel> WeightCache::lookup(const std::string& key) {
  std::lock_guard lock(impl_->mu);
  for (auto it = impl_->entries.begin(); it != impl_->entries.end(); ++it) {
    if (it->key != key) continue;
    std::vector<std::string> changed;
    for (size_t i = 0; i < it->model.params.size(); ++i) {
      if (!(fingerprint(it->model.params[i]) == it->prints[i])) changed.push_back(it->model.params[i].name);
    }
    if (!changed.empty()) {
      std::string names;
      for (size_t i = 0; i < changed.size() && i < 5; ++i) names += (i ? ", " : "") + changed[i];
      if (changed.size() > 5) names += ", ...";
      log().warn("weight cache: {} parameter(s) were modified in place since they were cached ({}): the entry is dropped "
                 "and the load reads the files again",
                 changed.size(), names);
      impl_->entries.erase(it);
      ++impl_->stats.healed;
      ++impl_->stats.misses;
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
    return hit;
  }
  ++impl_->stats.misses;
  return std::nullopt;
}

void WeightCache::insert(const std::string& key, const LoadedModel& model, size_t max_entries) {
  Impl::Entry e{key, model, {}};
  if (max_entries > 0) {
    for (const auto& p : model.params) e.prints.push_back(fingerprint(p));
  }
  std::lock_guard lock(impl_->mu);
  impl_->entries.remove_if([&](const Impl::Entry& x) { return x.key == key; });
  if (max_entries > 0) impl_->entries.push_back(std::move(e));
  // A lowered limit (0 included) also drops what is over it.
  while (impl_->entries.size() > max_entries) {
    impl_->entries.pop_front();
    ++impl_->stats.evicted;
  }
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
  return i;
}

}  // namespace wmap
