#include "wmap/catalog/catalog.h"

#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <fstream>
#include <future>
#include <limits>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "wmap/util/error.h"
#include "wmap/util/json_text.h"
#include "logger.h"
#include "wmap/format/safetensors_header.h"
#include "wmap/util/sha256.h"
#include "wmap/format/torch_checkpoint.h"

namespace wmap {

namespace {

struct ParsedShard {
  ShardRecord record;
  std::vector<HeaderTensor> tensors;
  std::vector<std::vector<uint64_t>> strides;  // torch only: per tensor, empty when contiguous
};

ParsedShard parse_shard(const ShardSet& set, uint32_t shard, const FileSystem& fs) {
  ParsedShard out;
  out.record.file = set.files[shard];
  const auto path = set.path_of(shard);
  auto file = fs.open(path, IoMode::kPread);
  out.record.signature = file->signature();
  if (auto d = file->published_sha256()) {
    out.record.sha256 = d->sha256;
    out.record.sha256_source = d->source;
  }
  if (set.format == ShardFormat::kTorch) {
    // A torch.save zip: the records point at the stored entries' bytes (absolute offsets).
    TorchCheckpoint ckpt = read_torch_checkpoint(*file, path.string());
    out.record.tensor_count = ckpt.tensors.size();
    out.record.header_bytes = ckpt.pickle_bytes;
    for (auto& t : ckpt.tensors) {
      out.tensors.push_back(
          HeaderTensor{std::move(t.name), t.dtype, std::move(t.shape), t.offset, t.offset + t.nbytes});
      out.strides.push_back(std::move(t.strides));
    }
    return out;
  }
  SafetensorsHeader header = read_safetensors_header(*file);
  out.record.header_bytes = header.header_bytes;
  out.record.tensor_count = header.tensors.size();
  out.record.metadata = std::move(header.metadata);
  out.tensors = std::move(header.tensors);
  // Stash the data start in `begin`/`end` conversion below.
  for (auto& t : out.tensors) {
    t.begin += header.data_start();
    t.end += header.data_start();
  }
  return out;
}

// The order that sorts `names` (ties by position); empty when they are sorted already. Each
// shard's header arrives sorted, so `names` is a few sorted runs: they are merged through a heap
// of run heads. A run gives up a whole block at a time: every name that sorts before the next
// run's head, found by galloping (1, 2, 4, ... then a binary search), so a shard that holds whole
// layers costs a few compares per block rather than log(runs) per name. (Pairwise merge passes
// went over every name on each of log(runs) passes; with 400 runs, as 1,152-expert MoE layouts
// have, the cache misses on the names cost more than the compares.)
std::vector<uint32_t> sorted_order(const std::vector<std::string_view>& names) {
  const size_t n = names.size();
  std::vector<size_t> begins{0};
  for (size_t i = 1; i < n; ++i) {
    if (names[i] < names[i - 1]) begins.push_back(i);
  }
  if (begins.size() == 1) return {};
  struct Run {
    uint32_t pos, end;
  };
  // Name i sorts before name j (positions break ties, so the order is total and stable).
  auto before = [&](uint32_t i, uint32_t j) {
    const int c = names[i].compare(names[j]);
    return c != 0 ? c < 0 : i < j;
  };
  std::vector<Run> heap;
  heap.reserve(begins.size());
  for (size_t r = 0; r < begins.size(); ++r) {
    heap.push_back(
        {static_cast<uint32_t>(begins[r]), static_cast<uint32_t>(r + 1 < begins.size() ? begins[r + 1] : n)});
  }
  auto after = [&](const Run& a, const Run& b) { return before(b.pos, a.pos); };  // a min-heap on the heads
  std::make_heap(heap.begin(), heap.end(), after);
  std::vector<uint32_t> order;
  order.reserve(n);
  while (heap.size() > 1) {
    std::pop_heap(heap.begin(), heap.end(), after);
    Run& run = heap.back();
    const uint32_t next = heap.front().pos;  // the smallest head of the other runs
    // The run's names are ascending: find the first one not before `next`, galloping from pos.
    uint32_t lo = run.pos + 1;
    uint64_t step = 1;  // names[run.pos] is before `next`: it was the heap's top
    uint32_t hi = lo;
    while (hi < run.end && before(hi, next)) {
      lo = hi + 1;
      hi = static_cast<uint32_t>(std::min<uint64_t>(run.end, uint64_t{hi} + step));
      step *= 2;
    }
    // Every name in [run.pos, lo) is before `next`; the first that is not lies in [lo, hi].
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      if (before(mid, next)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    for (uint32_t i = run.pos; i < lo; ++i) order.push_back(i);
    run.pos = lo;
    if (run.pos == run.end) {
      heap.pop_back();
    } else {
      std::push_heap(heap.begin(), heap.end(), after);
    }
  }
  for (uint32_t i = heap.front().pos; i < heap.front().end; ++i) order.push_back(i);
  return order;
}

}  // namespace

namespace {

// Every shard's header, parsed on up to options.threads threads; rethrows the first failing
// shard's error in catalog order.
std::vector<ParsedShard> parse_shards(const ShardSet& set, const CatalogBuildOptions& options, const FileSystem& fs) {
  const size_t n = set.files.size();
  std::vector<ParsedShard> parsed(n);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0}, done{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        parsed[i] = parse_shard(set, static_cast<uint32_t>(i), fs);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      done.fetch_add(1);
    }
  };
  // Remote headers are round trips, not CPU work: as many in flight as the storage wants.
  unsigned threads = options.threads ? options.threads
                                     : std::max(fs.concurrency(set.root),
                                                std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  threads = static_cast<unsigned>(std::min<size_t>(threads, n));
  {
    std::vector<std::jthread> pool;  // joined on every path (review F13)
    try {
      for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
    } catch (const std::system_error& e) {
      log().debug("catalog: {} of {} header threads started ({}); this thread parses the rest", pool.size() + 1,
                  threads, e.what());
    }
    work();
  }
  if (options.progress) options.progress(done.load(), n);
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return parsed;
}

// Every key the index maps must be in the shard it names. Both lists are sorted by name: one
// merge walk instead of a binary search per key.
void check_against_index(const ShardIndex& index, const ShardSet& set, std::span<const TensorRecord> tensors,
                         std::span<const ShardRecord> shards) {
  const std::string index_file = index.file.string();
  auto it = tensors.begin();
  for (const auto& [name, shard] : index.weight_map) {
    while (it != tensors.end() && it->name < name) ++it;
    const TensorRecord* r = (it != tensors.end() && it->name == name) ? &*it : nullptr;
    if (r == nullptr) {
      throw Error(ErrorCode::kMalformedInput, index_file + ": maps '" + std::string(name) + "' to " + set.files[shard] +
                                                  ", but no shard holds that tensor");
    }
    if (r->shard != shard) {
      throw Error(ErrorCode::kMalformedInput, index_file + ": maps '" + std::string(name) + "' to " + set.files[shard] +
                                                  ", but it is in " + shards[r->shard].file);
    }
  }
  if (index.weight_map.size() != tensors.size()) {
    log().warn("{}: maps {} tensors but the shards hold {}; the unlisted ones are catalogued anyway", index_file,
               index.weight_map.size(), tensors.size());
  }
}

}  // namespace

Catalog Catalog::build(const ShardSet& set, const CatalogBuildOptions& options) {
  const FileSystem& fs = options.fs ? *options.fs : FileSystem::standard();
  const size_t n = set.files.size();
  std::vector<ParsedShard> parsed = parse_shards(set, options, fs);
  size_t total = 0;
  for (const auto& p : parsed) total += p.tensors.size();
  if (total > std::numeric_limits<uint32_t>::max()) {
    throw Error(ErrorCode::kUnsupported,
                set.root.string() + ": " + std::to_string(total) + " tensors; a catalog holds at most 2^32 - 1");
  }
  // Each record is built once, in its sorted place: names are ordered as views first.
  std::vector<std::string_view> names;
  std::vector<std::pair<uint32_t, uint32_t>> where;  // (shard, index in its header)
  names.reserve(total);
  where.reserve(total);
  for (uint32_t s = 0; s < n; ++s) {
    for (size_t i = 0; i < parsed[s].tensors.size(); ++i) {
      names.emplace_back(parsed[s].tensors[i].name);
      where.emplace_back(s, static_cast<uint32_t>(i));
    }
  }
  const std::vector<uint32_t> order = sorted_order(names);
  Catalog cat;
  cat.root_ = set.root;
  cat.tensors_.resize(total);
  for (size_t k = 0; k < total; ++k) {
    const auto [s, i] = where[order.empty() ? k : order[k]];
    HeaderTensor& t = parsed[s].tensors[i];
    TensorRecord& r = cat.tensors_[k];
    r.name = std::move(t.name);
    r.shard = s;
    r.dtype = t.dtype;
    r.shape = std::move(t.shape);
    r.offset = t.begin;
    r.nbytes = t.end - t.begin;
    if (i < parsed[s].strides.size()) r.strides = std::move(parsed[s].strides[i]);
  }
  for (uint32_t s = 0; s < n; ++s) cat.shards_.push_back(std::move(parsed[s].record));
  names = {};
  cat.finish(/*sorted=*/true);
  if (set.index) check_against_index(*set.index, set, cat.tensors_, cat.shards_);
  return cat;
}

namespace {

// What the header parser guarantees of every record, checked again for records that did not come
// through it (a saved catalog, other formats' loaders, an engine's own parts): a shard that
// exists, strides that fit the shape and the dtype, nbytes that is its dtype x shape, and bytes
// inside the shard's recorded size.
void check_record(const TensorRecord& r, const std::vector<ShardRecord>& shards, const std::string& label) {
  const std::string where = "tensor '" + r.name + "'";
  auto bad = [&](const std::string& msg) {
    throw Error(ErrorCode::kMalformedInput, label + ": " + where + ": " + msg);
  };
  if (r.shard >= shards.size()) bad("names shard " + std::to_string(r.shard) + " of " + std::to_string(shards.size()));
  if (r.strided()) {
    if (r.strides.size() != r.shape.size()) {
      bad(std::to_string(r.strides.size()) + " strides for a " + std::to_string(r.shape.size()) + "-d shape");
    }
    if (dtype_bits(r.dtype) % 8 != 0) bad("strides on a sub-byte dtype");
  }
  if (!checked_numel(r.shape)) bad("shape " + shape_text(r.shape) + " has more than 2^64 elements");
  if (checked_nbytes(r.dtype, r.shape) != r.nbytes) {
    bad("nbytes " + std::to_string(r.nbytes) + " does not match " + std::string(dtype_name(r.dtype)) + " " +
        shape_text(r.shape));
  }
  uint64_t span = r.nbytes;
  if (r.strided() && r.nbytes != 0) {
    const std::optional<uint64_t> elements = strided_extent(r.shape, r.strides);
    if (!elements || __builtin_mul_overflow(*elements, uint64_t{dtype_bits(r.dtype) / 8}, &span)) {
      bad("strided extent overflows 64 bits");
    }
  }
  const ShardRecord& shard = shards[r.shard];
  const uint64_t size = shard.signature.size;
  if (r.offset > size || span > size - r.offset) {
    bad("bytes [" + std::to_string(r.offset) + ", +" + std::to_string(span) + ") lie outside " + shard.file + " (" +
        std::to_string(size) + " bytes)");
  }
}

}  // namespace

Catalog Catalog::from_parts(std::filesystem::path root, std::vector<ShardRecord> shards,
                            std::vector<TensorRecord> tensors, const std::string& label) {
  for (const auto& t : tensors) check_record(t, shards, label);
  Catalog cat;
  cat.root_ = std::move(root);
  cat.shards_ = std::move(shards);
  cat.tensors_ = std::move(tensors);
  cat.finish();
  return cat;
}

struct Catalog::IdCache {
  std::once_flag once;
  std::string id;
};

const std::string& Catalog::content_id() const {
  std::call_once(id_->once, [this] { id_->id = sha256_hex(to_json(false)); });
  return id_->id;
}

void Catalog::finish(bool sorted) {
  id_ = std::make_shared<IdCache>();
  std::vector<std::string_view> names;
  if (!sorted) {
    names.reserve(tensors_.size());
    for (const auto& t : tensors_) names.emplace_back(t.name);
  }
  if (const std::vector<uint32_t> order = sorted ? std::vector<uint32_t>{} : sorted_order(names); !order.empty()) {
    std::vector<TensorRecord> sorted;
    sorted.reserve(tensors_.size());
    for (uint32_t from : order) sorted.push_back(std::move(tensors_[from]));
    tensors_.swap(sorted);
  }
  for (size_t i = 1; i < tensors_.size(); ++i) {
    if (tensors_[i].name == tensors_[i - 1].name) {
      const auto& a = shards_[tensors_[i - 1].shard].file;
      const auto& b = shards_[tensors_[i].shard].file;
      throw Error(ErrorCode::kDuplicateTensor, "tensor '" + tensors_[i].name + "' is in both " + a + " and " + b);
    }
  }
}

uint64_t Catalog::total_bytes() const {
  uint64_t total = 0;
  for (const auto& t : tensors_) total += t.nbytes;
  return total;
}

const TensorRecord* Catalog::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorRecord& r, std::string_view n) { return r.name < n; });
  return (it != tensors_.end() && it->name == name) ? &*it : nullptr;
}

const TensorRecord& Catalog::require(std::string_view name) const {
  if (const TensorRecord* r = find(name)) return *r;
  throw Error(ErrorCode::kNotFound, "tensor '" + std::string(name) + "' is not in the checkpoint (" +
                                        std::to_string(tensors_.size()) + " tensors in " + root_.string() + ")");
}

std::span<const TensorRecord> Catalog::prefix(std::string_view prefix) const {
  std::string p(prefix);
  p += '.';
  auto lo = std::lower_bound(tensors_.begin(), tensors_.end(), p,
                             [](const TensorRecord& r, const std::string& n) { return r.name < n; });
  auto hi = lo;
  // Names with the prefix form one contiguous run; its end is the first name not starting with p.
  hi = std::partition_point(lo, tensors_.end(),
                            [&](const TensorRecord& r) { return r.name.compare(0, p.size(), p) == 0; });
  return {tensors_.data() + (lo - tensors_.begin()), static_cast<size_t>(hi - lo)};
}

namespace {

// Appends without temporaries: to_json writes ~170 bytes for each of up to ~100k tensors, and
// the content id hashes it on every build.
void append_uint(std::string& out, uint64_t v) {
  char buf[24];
  out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}
void append_int(std::string& out, int64_t v) {
  char buf[24];
  out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}
// Same bytes as append_json_string, with a fast path for the usual name that needs no escape.
void append_name(std::string& out, std::string_view s) {
  const bool plain = std::none_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c < 0x20 || c == '"' || c == '\\';
  });
  if (!plain) return append_json_string(out, s);
  out += '"';
  out.append(s);
  out += '"';
}

}  // namespace

void Catalog::set_shard_sha256(uint32_t shard, std::string_view hex) {
  if (shard >= shards_.size()) throw Error(ErrorCode::kInvalidArgument, "no shard " + std::to_string(shard));
  if (!looks_like_sha256(hex)) {
    throw Error(ErrorCode::kInvalidArgument, shards_[shard].file + ": '" + std::string(hex) + "' is not a SHA-256");
  }
  std::string lower(hex);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  shards_[shard].sha256 = std::move(lower);
  shards_[shard].sha256_source.clear();  // hashed here: a recorded digest
}

std::string Catalog::to_json(bool with_signatures) const {
  std::string out;
  size_t estimate = 1024 + shards_.size() * 256;
  for (const auto& t : tensors_) estimate += t.name.size() + shards_[t.shard].file.size() + 120;
  out.reserve(estimate);
  out += "{\"format\":\"wmap-catalog\",\"version\":1";
  if (with_signatures) out += ",\"content_id\":\"" + content_id() + "\"";
  out += ",\"shards\":[";
  for (size_t i = 0; i < shards_.size(); ++i) {
    const auto& s = shards_[i];
    if (i) out += ",";
    out += "\n{\"file\":";
    append_name(out, s.file);
    out += ",\"size\":";
    append_uint(out, s.signature.size);
    out += ",\"header_bytes\":";
    append_uint(out, s.header_bytes);
    out += ",\"tensors\":";
    append_uint(out, s.tensor_count);
    if (with_signatures) {
      out += ",\"mtime_ns\":";
      append_int(out, s.signature.mtime_ns);
      out += ",\"inode\":";
      append_uint(out, s.signature.inode);
      if (!s.sha256.empty()) out += ",\"sha256\":\"" + s.sha256 + "\"";
      if (!s.sha256_source.empty()) {
        out += ",\"sha256_source\":";
        append_json_string(out, s.sha256_source);
      }
      if (!s.signature.etag.empty()) {
        out += ",\"etag\":";
        append_json_string(out, s.signature.etag);
      }
    }
    out += ",\"metadata\":{";
    for (size_t m = 0; m < s.metadata.size(); ++m) {
      if (m) out += ",";
      append_json_string(out, s.metadata[m].first);
      out += ":";
      append_json_string(out, s.metadata[m].second);
    }
    out += "}}";
  }
  out += "],\"tensors\":[";
  std::vector<std::string> quoted_files(shards_.size());  // each file name is repeated per tensor
  for (size_t i = 0; i < shards_.size(); ++i) append_name(quoted_files[i], shards_[i].file);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    if (i) out += ",";
    out += "\n{\"name\":";
    append_name(out, t.name);
    out += ",\"dtype\":\"";
    out += dtype_name(t.dtype);
    out += "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d) out += ',';
      append_uint(out, t.shape[d]);
    }
    out += ']';
    if (t.strided()) {  // only non-contiguous torch views carry strides
      out += ",\"strides\":[";
      for (size_t d = 0; d < t.strides.size(); ++d) {
        if (d) out += ',';
        append_uint(out, t.strides[d]);
      }
      out += ']';
    }
    out += ",\"file\":";
    out += quoted_files[t.shard];
    out += ",\"offset\":";
    append_uint(out, t.offset);
    out += ",\"nbytes\":";
    append_uint(out, t.nbytes);
    out += '}';
  }
  out += "]}\n";
  return out;
}

void Catalog::save_json_file(const std::filesystem::path& file) const {
  const std::string text = to_json(true);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorCode::kIo, file.string() + ": cannot open for writing");
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) throw Error(ErrorCode::kIo, file.string() + ": write failed");
}

namespace {

[[noreturn]] void bad_catalog(const std::string& label, const std::string& msg) {
  throw Error(ErrorCode::kMalformedInput, label + ": " + msg);
}

template <typename T>
T get_field(simdjson::dom::object obj, std::string_view key, const std::string& label, const std::string& where) {
  T v;
  if (obj[key].get(v)) bad_catalog(label, where + ": missing or mistyped \"" + std::string(key) + "\"");
  return v;
}

}  // namespace

Catalog Catalog::parse_json(std::string_view json, const std::string& label) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element root;
  if (auto err = parser.parse(padded).get(root))
    bad_catalog(label, std::string("not valid JSON: ") + simdjson::error_message(err));
  simdjson::dom::object obj;
  if (root.get_object().get(obj)) bad_catalog(label, "not a JSON object");
  std::string_view format;
  if (obj["format"].get(format) || format != "wmap-catalog")
    bad_catalog(label, "not a wmap catalog (\"format\" is not \"wmap-catalog\")");
  const uint64_t version = get_field<uint64_t>(obj, "version", label, "catalog");
  if (version != 1) bad_catalog(label, "catalog version " + std::to_string(version) + " is not supported (expected 1)");
  const std::string_view saved_id = get_field<std::string_view>(obj, "content_id", label, "catalog");

  std::vector<ShardRecord> shards;
  std::unordered_map<std::string, uint32_t> shard_ids;
  for (auto s : get_field<simdjson::dom::array>(obj, "shards", label, "catalog")) {
    simdjson::dom::object so;
    if (s.get_object().get(so)) bad_catalog(label, "shard entry is not an object");
    const std::string where = "shard " + std::to_string(shards.size());
    ShardRecord r;
    r.file = std::string(get_field<std::string_view>(so, "file", label, where));
    r.signature.size = get_field<uint64_t>(so, "size", label, where);
    r.signature.mtime_ns = get_field<int64_t>(so, "mtime_ns", label, where);
    r.signature.inode = get_field<uint64_t>(so, "inode", label, where);
    std::string_view etag;
    if (!so["etag"].get(etag)) r.signature.etag = std::string(etag);
    r.header_bytes = get_field<uint64_t>(so, "header_bytes", label, where);
    r.tensor_count = get_field<uint64_t>(so, "tensors", label, where);
    std::string_view digest;
    if (!so["sha256"].get(digest)) {
      if (!looks_like_sha256(digest)) bad_catalog(label, where + ": sha256 is not 64 hex digits");
      r.sha256 = std::string(digest);
    }
    std::string_view digest_source;
    if (!so["sha256_source"].get(digest_source)) r.sha256_source = std::string(digest_source);
    // A saved catalog names files as an index does: relative paths inside the checkpoint, so a
    // crafted catalog cannot point a load at /etc/shadow or ../../other (review, lesser notes).
    {
      const std::filesystem::path name(r.file);
      bool bad = r.file.empty() || name.is_absolute();
      for (const auto& part : name) bad = bad || part == "..";
      if (bad) bad_catalog(label, where + ": file '" + r.file + "' is not a relative path inside the checkpoint");
    }
    simdjson::dom::object meta;
    if (!so["metadata"].get(meta)) {
      for (auto m : meta) {
        std::string_view v;
        if (m.value.get(v)) bad_catalog(label, where + ": metadata value is not a string");
        r.metadata.emplace_back(std::string(m.key), std::string(v));
      }
    }
    if (!shard_ids.emplace(r.file, static_cast<uint32_t>(shards.size())).second)
      bad_catalog(label, "shard " + r.file + " listed twice");
    shards.push_back(std::move(r));
  }
  std::vector<TensorRecord> tensors;
  for (auto t : get_field<simdjson::dom::array>(obj, "tensors", label, "catalog")) {
    simdjson::dom::object to;
    if (t.get_object().get(to)) bad_catalog(label, "tensor entry is not an object");
    TensorRecord r;
    r.name = std::string(get_field<std::string_view>(to, "name", label, "tensor " + std::to_string(tensors.size())));
    const std::string where = "tensor '" + r.name + "'";
    const auto dtype = parse_dtype(get_field<std::string_view>(to, "dtype", label, where));
    if (!dtype) bad_catalog(label, where + ": unknown dtype");
    r.dtype = *dtype;
    for (auto d : get_field<simdjson::dom::array>(to, "shape", label, where)) {
      uint64_t v;
      if (d.get(v)) bad_catalog(label, where + ": shape holds a non-integer");
      r.shape.push_back(v);
    }
    simdjson::dom::array strides;
    if (to["strides"].get(strides) == simdjson::SUCCESS) {
      for (auto d : strides) {
        uint64_t v;
        if (d.get(v)) bad_catalog(label, where + ": strides hold a non-integer");
        r.strides.push_back(v);
      }
    }
    const std::string file(get_field<std::string_view>(to, "file", label, where));
    auto it = shard_ids.find(file);
    if (it == shard_ids.end()) bad_catalog(label, where + ": names unknown shard '" + file + "'");
    r.shard = it->second;
    r.offset = get_field<uint64_t>(to, "offset", label, where);
    r.nbytes = get_field<uint64_t>(to, "nbytes", label, where);
    tensors.push_back(std::move(r));
  }
  Catalog cat = from_parts({}, std::move(shards), std::move(tensors), label);
  if (cat.content_id() != saved_id) {
    bad_catalog(label, "content id " + std::string(saved_id) + " does not match the content, which hashes to " +
                           cat.content_id() + " (edited or corrupted)");
  }
  return cat;
}

Catalog Catalog::load_json_file(const std::filesystem::path& file, const FileSystem& fs) {
  Catalog cat = parse_json(fs.read_whole_file(file, kMaxCatalogFileBytes), file.string());
  cat.root_ = file.parent_path();
  return cat;
}

std::vector<std::string> Catalog::changed_shards(const std::filesystem::path& root, const FileSystem& fs) const {
  std::vector<std::string> out;
  for (const auto& s : shards_) {
    const auto path = root / s.file;
    FileSignature now;
    try {
      now = fs.signature(path);
    } catch (const Error& e) {
      out.push_back(path.string() + ": listed in the catalog but cannot be read (" + e.what() + ")");
      continue;
    }
    if (now == s.signature) continue;
    const std::string msg =
        path.string() + ": changed since the catalog was saved (" + signature_change(s.signature, now);
    out.push_back(msg + ")");
  }
  return out;
}

void Catalog::require_unchanged(uint32_t shard, const FileSignature& now) const {
  const FileSignature& then = shards_[shard].signature;
  if (then.unknown() || now == then) return;
  throw Error(ErrorCode::kValidation, shard_path(shard).string() + ": changed since it was planned (" +
                                          signature_change(then, now) +
                                          "): plan again (planning reads the headers only)");
}

}  // namespace wmap
