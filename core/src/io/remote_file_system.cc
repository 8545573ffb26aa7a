// FileSystem::standard(): local paths go to posix(), remote ones (wmap/io/remote.h) to ranged GETs.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "http_transfer.h"
#include "remote_location.h"
#include "s3_listing.h"
#include "wmap/io/file_io.h"
#include "wmap/io/remote.h"
#include "wmap/util/env.h"
#include "wmap/util/error.h"
#include "wmap/util/install_paths.h"
#include "logger.h"

namespace wmap {
namespace {

using remote::HttpGet;
using remote::Location;

// The first bytes of an object, fetched by the request that learns its size and ETag: a
// safetensors header usually fits, so cataloguing a shard is one request.
constexpr uint64_t kProbeBytes = uint64_t{64} << 10;
// A read larger than this is split into concurrent ranged GETs of at least this size.
constexpr uint64_t kMinPartBytes = uint64_t{8} << 20;

// What one object is: its size and ETag, and its first bytes once fetched.
struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;
  std::shared_ptr<const std::vector<std::byte>> prefix;  // [0, min(size, kProbeBytes)) or null
};

// Everything derived from one RemoteOptions: the credentials are resolved once, and the objects
// seen (by a listing or a first request) are remembered by path, so a shard catalogued in this
// process opens without a request and every later GET carries the ETag it was catalogued with.
// New options (set_remote_options) start a new cache.
struct Context {
  RemoteOptions options;
  remote::Auth s3, hf;
  mutable std::shared_mutex mutex;
  mutable std::map<std::string, ObjectInfo> seen;
  explicit Context(const RemoteOptions& o)
      : options(o), s3(remote::resolve_s3_auth(o)), hf(remote::resolve_hf_auth(o)) {}
  Location locate(const std::filesystem::path& path) const {
    auto loc = remote::parse_location(path.native(), options, s3, hf);
    if (!loc) throw Error(ErrorCode::kInternal, path.string() + ": not a remote path");
    return *loc;
  }
};

std::mutex g_options_mutex;
std::optional<RemoteOptions> g_options;
std::shared_ptr<const Context> g_context;

std::shared_ptr<const Context> context() {
  std::lock_guard lock(g_options_mutex);
  if (!g_context)
    g_context = std::make_shared<const Context>(g_options ? *g_options : RemoteOptions::from_environment());
  return g_context;
}

class RemoteFile final : public RandomAccessFile {
 public:
  RemoteFile(std::shared_ptr<const Context> ctx, Location loc, ObjectInfo info)
      : ctx_(std::move(ctx)), loc_(std::move(loc)), info_(std::move(info)) {}

  const std::string& path() const override { return loc_.path; }
  uint64_t size() const override { return info_.size; }
  FileSignature signature() const override { return {info_.size, 0, 0, info_.etag}; }

  void read(uint64_t offset, std::span<std::byte> dst) const override {
    check_range(offset, dst.size());
    if (dst.empty()) return;
    if (info_.prefix && offset < info_.prefix->size()) {
      // The probe's bytes first; only the rest is fetched (a header larger than the probe).
      const uint64_t have = std::min<uint64_t>(dst.size(), info_.prefix->size() - offset);
      std::memcpy(dst.data(), info_.prefix->data() + offset, have);
      if (have == dst.size()) return;
      offset += have;
      dst = dst.subspan(have);
    }
    // Large reads: concurrent parts, each landing in its slice of dst.
    const uint64_t n = dst.size();
    const uint64_t parts = std::clamp<uint64_t>(n / kMinPartBytes, 1, std::max(1u, ctx_->options.concurrency));
    const uint64_t part = (n + parts - 1) / parts;
    std::vector<HttpGet> gets;
    for (uint64_t b = 0; b < n; b += part) {
      const uint64_t len = std::min(part, n - b);
      gets.push_back(get(offset + b, offset + b + len));
      gets.back().pieces.push_back({offset + b, len, dst.data() + b});
    }
    remote::run_gets(gets, ctx_->options);
  }

  // Segments closer than gap_bytes share one request (the gap is fetched and dropped).
  uint64_t read_segments(std::span<const ReadSegment> all) const override {
    std::vector<ReadSegment> kept;  // an empty segment would be an empty (invalid) Range
    for (const auto& seg : all) {
      check_range(seg.offset, seg.len);
      if (seg.len) kept.push_back(seg);
    }
    const std::span<const ReadSegment> s(kept);
    if (s.empty()) return 0;
    std::vector<HttpGet> gets;
    uint64_t bytes = 0;
    for (size_t b = 0; b < s.size();) {
      size_t e = b + 1;
      while (e < s.size() && s[e].offset >= s[e - 1].offset + s[e - 1].len &&
             s[e].offset - (s[e - 1].offset + s[e - 1].len) <= ctx_->options.gap_bytes)
        ++e;
      const uint64_t begin = s[b].offset, end = s[e - 1].offset + s[e - 1].len;
      if (e == b + 1 && end - begin >= 2 * kMinPartBytes) {
        read(begin, std::span(s[b].dst, s[b].len));  // one large segment: in concurrent parts
      } else {
        gets.push_back(get(begin, end));
        gets.back().pieces.assign(s.begin() + static_cast<ptrdiff_t>(b), s.begin() + static_cast<ptrdiff_t>(e));
      }
      bytes += end - begin;
      b = e;
    }
    remote::run_gets(gets, ctx_->options);
    return bytes;
  }

  std::span<const std::byte> view(uint64_t, uint64_t) const override { return {}; }
  void release(uint64_t, uint64_t) const override {}
  void will_need(uint64_t, uint64_t) const override {}
  void populate(uint64_t, uint64_t) const override {}

 private:
  HttpGet get(uint64_t begin, uint64_t end) const {
    HttpGet g;
    g.where = &loc_;
    g.begin = begin;
    g.end = end;
    g.if_match = info_.etag;
    g.expected_size = info_.size;
    return g;
  }
  void check_range(uint64_t offset, uint64_t len) const {
    if (offset > info_.size || len > info_.size - offset) {
      throw Error(ErrorCode::kIo, loc_.path + ": read of " + std::to_string(len) + " bytes at offset " +
                                      std::to_string(offset) + " runs past the end of the object (" +
                                      std::to_string(info_.size) + " bytes)");
    }
  }

  std::shared_ptr<const Context> ctx_;
  Location loc_;
  ObjectInfo info_;
};

// Remote storage has no directories to stat: a name with a checkpoint file's suffix is a file,
// anything else a folder ("…/Llama-3.1-8B" has a dot but is a folder).
bool names_a_file(std::string_view path) {
  path = path.substr(0, path.find('?'));
  for (std::string_view suffix : {".safetensors", ".json", ".bin", ".pth", ".pt"}) {
    if (path.size() > suffix.size() && path.substr(path.size() - suffix.size()) == suffix) return true;
  }
  return false;
}

// posix() for local paths; remote paths through libcurl.
class StandardFileSystem final : public FileSystem {
 public:
  std::unique_ptr<RandomAccessFile> open(const std::filesystem::path& path, IoMode mode) const override {
    if (!is_remote_path(path)) return FileSystem::posix().open(path, mode);
    auto ctx = context();
    Location loc = ctx->locate(path);
    if (mode == IoMode::kMmap) {
      throw Error(
          ErrorCode::kInvalidArgument,
          loc.path + ": --io mmap maps local files; a remote object is read with ranged GETs (--io pread or auto)");
    }
    return std::make_unique<RemoteFile>(ctx, loc, info(*ctx, loc, false, /*need_prefix=*/true).value());
  }

  PathStatus status(const std::filesystem::path& path) const override {
    if (!is_remote_path(path)) return FileSystem::status(path);
    const std::string_view p = std::string_view(path.native()).substr(0, path.native().find('?'));
    if (p.empty() || p.back() == '/' || !names_a_file(p)) return {PathStatus::Kind::kDirectory};
    auto ctx = context();
    return {info(*ctx, ctx->locate(path), true) ? PathStatus::Kind::kFile : PathStatus::Kind::kNone};
  }

  std::optional<std::vector<std::string>> list(const std::filesystem::path& dir) const override {
    if (!is_remote_path(dir)) return FileSystem::list(dir);
    auto ctx = context();
    const Location loc = ctx->locate(dir);
    if (loc.scheme != Location::Scheme::kS3) return std::nullopt;  // HTTP has no listing
    return list_s3(*ctx, loc);
  }

  FileSignature signature(const std::filesystem::path& path) const override {
    if (!is_remote_path(path)) return FileSystem::signature(path);
    auto ctx = context();
    const ObjectInfo i = info(*ctx, ctx->locate(path), false, false, /*fresh=*/true).value();
    return {i.size, 0, 0, i.etag};
  }

  unsigned concurrency(const std::filesystem::path& path) const override {
    return is_remote_path(path) ? std::max(1u, context()->options.concurrency) : 0;
  }

 private:
  // The object's size and ETag: remembered, else one ranged GET of its first bytes (kept, so the
  // header read that follows costs nothing). nullopt for a missing object when allow_missing.
  std::optional<ObjectInfo> info(const Context& ctx, const Location& loc, bool allow_missing, bool need_prefix = false,
                                 bool fresh = false) const {
    if (!fresh) {
      std::shared_lock lock(ctx.mutex);
      if (auto it = ctx.seen.find(loc.path); it != ctx.seen.end() && (it->second.prefix || !need_prefix))
        return it->second;
    }
    std::vector<std::byte> buf(kProbeBytes);
    HttpGet g;
    g.where = &loc;
    g.begin = 0;
    g.end = kProbeBytes;
    g.clamp_end = true;
    g.allow_not_found = allow_missing;
    g.pieces.push_back({0, kProbeBytes, buf.data()});
    HttpGet gets[] = {std::move(g)};
    remote::run_gets(gets, ctx.options);
    if (gets[0].not_found) return std::nullopt;
    ObjectInfo i;
    i.size = gets[0].object_size;
    i.etag = gets[0].etag;
    buf.resize(std::min<uint64_t>(i.size, kProbeBytes));
    i.prefix = std::make_shared<const std::vector<std::byte>>(std::move(buf));
    std::unique_lock lock(ctx.mutex);
    auto& slot = ctx.seen[loc.path];
    if (slot.etag != i.etag || slot.size != i.size || !slot.prefix) slot = i;
    return i;
  }

  std::optional<std::vector<std::string>> list_s3(const Context& ctx, const Location& dir) const {
    std::string prefix = dir.key;
    if (!prefix.empty() && prefix.back() != '/') prefix += '/';
    std::vector<std::string> names;
    std::map<std::string, remote::ListedObject> found;
    std::string token;
    std::set<std::string> tokens;
    do {
      HttpGet g;
      g.where = &dir;
      g.ranged = false;
      g.allow_denied = true;
      g.url = remote::s3_list_url(ctx.options, ctx.s3, dir.bucket, prefix, token, ctx.options.s3_list_page);
      HttpGet gets[] = {std::move(g)};
      remote::run_gets(gets, ctx.options);
      if (gets[0].denied) {
        // Buckets that grant GetObject but not ListBucket: find the checkpoint by name, as over HTTP.
        log().warn("{}: listing denied (credentials: {}); looking for the index by name", dir.path,
                   dir.auth ? dir.auth->source : "none");
        return std::nullopt;
      }
      const std::string& xml = gets[0].body;
      token.clear();
      token = remote::parse_list_objects_v2(xml, prefix, found);
      if (!token.empty() && !tokens.insert(token).second)
        throw Error(ErrorCode::kMalformedInput, dir.path + ": ListObjectsV2 returned a continuation token twice");
    } while (!token.empty());
    std::unique_lock lock(ctx.mutex);
    std::string root = dir.path;
    if (root.back() != '/') root += '/';
    for (auto& [name, i] : found) {
      names.push_back(name);
      auto& slot = ctx.seen[root + name];
      if (slot.etag != i.etag || slot.size != i.size) slot = ObjectInfo{i.size, i.etag, nullptr};
    }
    return names;
  }
};

double env_seconds(const char* name, double fallback) {
  auto v = env_value(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || !(s > 0) || s > 86400)
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + *v + "': expected seconds in (0, 86400]");
  return s;
}

}  // namespace

RemoteOptions RemoteOptions::from_environment() {
  RemoteOptions o;
  if (auto v = env_value("AWS_ENDPOINT_URL_S3")) {
    o.s3_endpoint = *v;
  } else if (auto w = env_value("AWS_ENDPOINT_URL")) {
    o.s3_endpoint = *w;
  }
  if (auto v = env_value("AWS_REGION")) {
    o.s3_region = *v;
  } else if (auto w = env_value("AWS_DEFAULT_REGION")) {
    o.s3_region = *w;
  }
  o.aws_profile = env_value("AWS_PROFILE").value_or("");
  if (auto v = env_value("HF_ENDPOINT"); v && !v->empty()) o.hf_endpoint = *v;
  o.hf_token = env_value("HF_TOKEN").value_or("");
  for (const char* name : {"WMAP_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"}) {
    if (auto v = env_value(name); v && !v->empty()) {
      o.ca_bundle = *v;
      break;
    }
  }
  o.concurrency = static_cast<unsigned>(
      env_integer("WMAP_REMOTE_CONCURRENCY", 1, 1024, "remote requests in flight").value_or(o.concurrency));
  o.retries = static_cast<unsigned>(env_integer("WMAP_REMOTE_RETRIES", 0, 100, "remote retries").value_or(o.retries));
  o.stall_seconds = env_seconds("WMAP_REMOTE_TIMEOUT", o.stall_seconds);
  o.gap_bytes = env_bytes("WMAP_REMOTE_GAP_BYTES", "the largest gap fetched through").value_or(o.gap_bytes);
  o.s3_list_page = static_cast<unsigned>(
      env_integer("WMAP_S3_LIST_PAGE", 1, 1000, "keys per ListObjectsV2 page").value_or(o.s3_list_page));
  return o;
}

void set_remote_options(const RemoteOptions& options) {
  std::lock_guard lock(g_options_mutex);
  g_options = options;
  g_context.reset();
}

RemoteOptions remote_options() {
  std::lock_guard lock(g_options_mutex);
  return g_options ? *g_options : RemoteOptions::from_environment();
}

bool is_remote_path(std::string_view p) {
  for (std::string_view scheme : {"s3://", "http://", "https://", "hf://"}) {
    if (p.substr(0, scheme.size()) == scheme) return true;
  }
  return false;
}

RemoteCounters remote_counters() { return remote::counters(); }

std::string display_path(const std::filesystem::path& path) {
  return is_remote_path(path) ? remote::redacted(path.native()) : path.string();
}

const FileSystem& FileSystem::standard() {
  static const StandardFileSystem fs;
  return fs;
}

}  // namespace wmap
