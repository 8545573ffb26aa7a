// RemoteFileSystem: remote paths (wmap/io/remote.h) read with ranged GETs; local ones go to posix().
#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "aws_credentials.h"
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

// The first bytes of an object, fetched by the request that learns its size and identity: a
// safetensors header usually fits, so cataloguing a shard is one request.
constexpr uint64_t kProbeBytes = uint64_t{64} << 10;
// A read larger than this is split into concurrent ranged GETs of at least this size.
constexpr uint64_t kMinPartBytes = uint64_t{8} << 20;
// What a whole-file reader (verify) asks for at once: several concurrent parts per request.
constexpr uint64_t kPreferredReadBytes = uint64_t{64} << 20;

// What one object is: its size and identity, its first bytes once fetched, the digest its
// storage publishes.
struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;
  std::shared_ptr<const std::vector<std::byte>> prefix;  // [0, min(size, kProbeBytes)) or null
  std::string sha256, sha256_source;
};

// Remote storage has no directories to stat: a name with a checkpoint file's suffix is a file,
// anything else a folder ("…/Llama-3.1-8B" has a dot but is a folder).
bool names_a_file(std::string_view path) {
  for (std::string_view suffix : {".safetensors", ".json", ".bin", ".pth", ".pt"}) {
    if (path.size() > suffix.size() && path.substr(path.size() - suffix.size()) == suffix) return true;
  }
  return false;
}

double parse_seconds(std::string_view name, std::string_view v) {
  const std::string text(v);
  char* end = nullptr;
  const double s = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(s > 0) || s > 86400)
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + text + "': expected seconds in (0, 86400]");
  return s;
}

}  // namespace

struct RemoteFileSystem::Impl {
  Impl(RemoteOptions o, bool remember_objects)
      : options(std::move(o)), remember(remember_objects), s3(options, ctx()), hf([&] {
          remote::Auth a;
          if (!options.hf_token.empty()) {
            a.kind = remote::Auth::Kind::kBearer;
            a.bearer = options.hf_token;
            a.source = (options.hf_token_source.empty() ? "a token" : options.hf_token_source) + " (a bearer token)";
          } else {
            a.source = "none (no HF_TOKEN, no token file)";
          }
          return a;
        }()) {}

  remote::TransferContext ctx() const { return {&options, &cancelled}; }

  const RemoteOptions options;
  const bool remember;
  mutable std::atomic<bool> cancelled{false};
  remote::S3Credentials s3;
  remote::FixedCredentials hf;

  mutable std::shared_mutex mu;
  // Secrets taken out of the paths given (location()): by exact path, or by folder ("…/").
  mutable std::map<std::string, remote::UrlSecrets> secrets;
  // Objects seen since the last forget(), by their full location (secrets included: two presigned
  // URLs of one key are two versions).
  mutable std::map<std::string, ObjectInfo> seen;
  // hf://ORG/MODEL@REV resolved to a commit by its first answer (X-Repo-Commit): "ORG/MODEL@REV" -> sha.
  mutable std::map<std::string, std::string> pins;
  mutable std::once_flag s3_region_once;
  mutable std::string s3_region;

  remote::UrlSecrets secrets_of(const std::string& path) const {
    std::shared_lock lock(mu);
    if (auto it = secrets.find(path); it != secrets.end()) return it->second;
    const remote::UrlSecrets* best = nullptr;
    size_t best_len = 0;
    for (const auto& [key, s] : secrets) {
      if (key.back() == '/' && key.size() > best_len && path.compare(0, key.size(), key) == 0) {
        best = &s;
        best_len = key.size();
      }
    }
    return best ? *best : remote::UrlSecrets{};
  }

  Location locate(const std::filesystem::path& p) const {
    const std::string& path = p.native();
    if (path.find('?') != std::string::npos || path.find('@') != std::string::npos) {
      // A path that still carries secrets (a caller that skipped location()): take them out first.
      const auto [clean, sec] = remote::split_secrets(path);
      if (!sec.userinfo.empty() || !sec.query.empty()) {
        adopt(clean, sec);
        return locate(clean);
      }
    }
    auto loc = remote::parse_location(path, secrets_of(path), options, &s3, &hf);
    if (!loc) throw Error(ErrorCode::kInternal, display_path(p) + ": not a remote path");
    if (loc->scheme == Location::Scheme::kS3) {
      std::call_once(s3_region_once, [&] { s3_region = s3.region(); });
      loc->url = remote::SecretUrl(remote::s3_object_url(options, s3_region, loc->bucket, loc->key));
    } else if (loc->scheme == Location::Scheme::kHf) {
      std::shared_lock lock(mu);
      if (auto it = pins.find(loc->repo + "@" + loc->revision); it != pins.end())
        loc->url = remote::SecretUrl(remote::hf_resolve_url(options, *loc, it->second));
    }
    return *loc;
  }

  void adopt(const std::string& clean, const remote::UrlSecrets& sec) const {
    std::unique_lock lock(mu);
    secrets[clean] = sec;
    if (clean.back() == '/' || !names_a_file(clean)) secrets[clean.back() == '/' ? clean : clean + "/"] = sec;
  }

  // A hub answer's commit: the revision is pinned to it from now on; a revision that moved while
  // this file system was reading it is refused (a mixture of two commits, review F8).
  void pin(const Location& loc, const std::string& commit) const {
    if (loc.scheme != Location::Scheme::kHf || commit.empty()) return;
    std::unique_lock lock(mu);
    auto [it, added] = pins.emplace(loc.repo + "@" + loc.revision, commit);
    if (!added && it->second != commit) {
      throw Error(ErrorCode::kValidation, loc.path + ": revision '" + loc.revision + "' of " + loc.repo +
                                              " moved from commit " + it->second + " to " + commit +
                                              " while the checkpoint was read: plan again");
    }
  }

  void run(std::span<HttpGet> gets) const {
    remote::run_gets(gets, ctx());
    for (const auto& g : gets) pin(*g.where, g.repo_commit);
  }

  // The object's size and identity: remembered, else one ranged GET of its first bytes (kept, so
  // the header read that follows costs nothing). nullopt for a missing object when allow_missing.
  std::optional<ObjectInfo> info(const Location& loc, bool allow_missing, bool need_prefix, bool fresh) const {
    const std::string& key = loc.url.cache_key();
    if (!fresh && remember) {
      std::shared_lock lock(mu);
      if (auto it = seen.find(key); it != seen.end() && (it->second.prefix || !need_prefix)) return it->second;
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
    run(gets);
    if (gets[0].not_found) return std::nullopt;
    ObjectInfo i;
    i.size = gets[0].object_size;
    i.etag = gets[0].etag;
    i.sha256 = gets[0].sha256;
    i.sha256_source = gets[0].sha256_source;
    buf.resize(std::min<uint64_t>(i.size, kProbeBytes));
    i.prefix = std::make_shared<const std::vector<std::byte>>(std::move(buf));
    if (remember) {
      // Keyed by the pinned location: the first probe of an hf:// path learns the commit.
      const Location pinned = locate(loc.path);
      std::unique_lock lock(mu);
      seen[pinned.url.cache_key()] = i;
    }
    return i;
  }

  std::optional<std::vector<std::string>> list_s3(const Location& dir) const;
};

namespace {

class RemoteFile final : public RandomAccessFile {
 public:
  RemoteFile(std::shared_ptr<const RemoteFileSystem::Impl> fs, Location loc, ObjectInfo info)
      : fs_(std::move(fs)), loc_(std::move(loc)), info_(std::move(info)) {}

  const std::string& path() const override { return loc_.path; }
  uint64_t size() const override { return info_.size; }
  FileSignature signature() const override { return {info_.size, 0, 0, info_.etag}; }
  uint64_t preferred_read_bytes() const override { return kPreferredReadBytes; }
  std::optional<PublishedDigest> published_sha256() const override {
    if (info_.sha256.empty()) return std::nullopt;
    return PublishedDigest{info_.sha256, info_.sha256_source};
  }

  void read(uint64_t offset, std::span<std::byte> dst) const override {
    check_range(offset, dst.size());
    if (dst.empty()) return;
    if (from_prefix(offset, dst)) return;
    // Large reads: concurrent parts, each landing in its slice of dst.
    const uint64_t n = dst.size();
    const uint64_t parts = std::clamp<uint64_t>(n / kMinPartBytes, 1, std::max(1u, fs_->options.concurrency));
    const uint64_t part = (n + parts - 1) / parts;
    std::vector<HttpGet> gets;
    for (uint64_t b = 0; b < n; b += part) {
      const uint64_t len = std::min(part, n - b);
      gets.push_back(get(offset + b, offset + b + len));
      gets.back().pieces.push_back({offset + b, len, dst.data() + b});
    }
    fs_->run(gets);
  }

  // Segments closer than gap_bytes share one request (the gap is fetched and dropped); what the
  // probe already fetched is copied, never asked for again (review F7).
  uint64_t read_segments(std::span<const ReadSegment> all) const override {
    std::vector<ReadSegment> kept;  // an empty segment would be an empty (invalid) Range
    uint64_t bytes = 0;
    for (ReadSegment seg : all) {
      check_range(seg.offset, seg.len);
      if (info_.prefix && seg.len && seg.offset < info_.prefix->size()) {
        const uint64_t have = std::min<uint64_t>(seg.len, info_.prefix->size() - seg.offset);
        std::memcpy(seg.dst, info_.prefix->data() + seg.offset, have);
        seg.offset += have;
        seg.dst += have;
        seg.len -= have;
      }
      if (seg.len) kept.push_back(seg);
    }
    const std::span<const ReadSegment> s(kept);
    if (s.empty()) return 0;
    std::vector<HttpGet> gets;
    for (size_t b = 0; b < s.size();) {
      size_t e = b + 1;
      while (e < s.size() && s[e].offset >= s[e - 1].offset + s[e - 1].len &&
             s[e].offset - (s[e - 1].offset + s[e - 1].len) <= fs_->options.gap_bytes)
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
    fs_->run(gets);
    return bytes;
  }

  std::span<const std::byte> view(uint64_t, uint64_t) const override { return {}; }
  void release(uint64_t, uint64_t) const override {}
  void will_need(uint64_t, uint64_t) const override {}
  void populate(uint64_t, uint64_t) const override {}

 private:
  // The part of [offset, +dst) the probe fetched, copied; true when that was all of it.
  bool from_prefix(uint64_t& offset, std::span<std::byte>& dst) const {
    if (!info_.prefix || offset >= info_.prefix->size()) return false;
    const uint64_t have = std::min<uint64_t>(dst.size(), info_.prefix->size() - offset);
    std::memcpy(dst.data(), info_.prefix->data() + offset, have);
    if (have == dst.size()) return true;
    offset += have;
    dst = dst.subspan(have);
    return false;
  }
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

  std::shared_ptr<const RemoteFileSystem::Impl> fs_;
  Location loc_;
  ObjectInfo info_;
};

}  // namespace

std::optional<std::vector<std::string>> RemoteFileSystem::Impl::list_s3(const Location& dir) const {
  std::string prefix = dir.key;
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  std::map<std::string, remote::ListedObject> found;
  std::string token;
  std::set<std::string> tokens;
  const auto auth = s3.current();
  // Pages are bounded by the key cap (review F5: distinct continuation tokens were followed forever).
  const uint64_t max_pages = options.s3_list_max_keys / std::max(1u, options.s3_list_page) + 2;
  for (uint64_t page = 0;; ++page) {
    if (page >= max_pages || found.size() > options.s3_list_max_keys) {
      throw Error(ErrorCode::kMalformedInput,
                  dir.path + ": the listing holds more than " + std::to_string(options.s3_list_max_keys) +
                      " objects directly under it (WMAP_S3_LIST_MAX_KEYS): not a checkpoint folder, or give the "
                      "index.json's URL");
    }
    HttpGet g;
    g.where = &dir;
    g.ranged = false;
    g.allow_denied = true;
    g.auth = auth;
    g.url = remote::SecretUrl(remote::s3_list_url(options, *auth, dir.bucket, prefix, token, options.s3_list_page));
    HttpGet gets[] = {std::move(g)};
    run(gets);
    if (gets[0].denied) {
      // Buckets that grant GetObject but not ListBucket: find the checkpoint by name, as over HTTP.
      log().warn("{}: listing denied (credentials: {}); looking for the index by name", dir.path, auth->source);
      return std::nullopt;
    }
    token = remote::parse_list_objects_v2(gets[0].body, prefix, found);
    if (token.empty()) break;
    if (!tokens.insert(token).second)
      throw Error(ErrorCode::kMalformedInput, dir.path + ": ListObjectsV2 returned a continuation token twice");
  }
  if (found.size() > options.s3_list_max_keys) {
    throw Error(ErrorCode::kMalformedInput, dir.path + ": the listing holds " + std::to_string(found.size()) +
                                                " objects directly under it, more than WMAP_S3_LIST_MAX_KEYS " +
                                                std::to_string(options.s3_list_max_keys));
  }
  std::vector<std::string> names;
  std::string root = dir.path;
  if (root.back() != '/') root += '/';
  for (auto& [name, i] : found) {
    names.push_back(name);
    if (!remember) continue;
    const Location obj = locate(root + name);
    std::unique_lock lock(mu);
    auto& slot = seen[obj.url.cache_key()];
    if (slot.etag != i.etag || slot.size != i.size) slot = ObjectInfo{i.size, i.etag, nullptr, {}, {}};
  }
  return names;
}

RemoteFileSystem::RemoteFileSystem(RemoteOptions options) : RemoteFileSystem(std::move(options), true) {}
RemoteFileSystem::RemoteFileSystem(RemoteOptions options, bool remember)
    : impl_(std::make_shared<Impl>(std::move(options), remember)) {}
RemoteFileSystem::~RemoteFileSystem() = default;

const RemoteOptions& RemoteFileSystem::options() const { return impl_->options; }

void RemoteFileSystem::forget() const {
  std::unique_lock lock(impl_->mu);
  impl_->seen.clear();
  impl_->pins.clear();  // a new plan resolves the revision again
}

void RemoteFileSystem::cancel() const { impl_->cancelled = true; }
void RemoteFileSystem::clear_cancel() const { impl_->cancelled = false; }
bool RemoteFileSystem::cancelled() const { return impl_->cancelled; }

std::filesystem::path RemoteFileSystem::location(const std::filesystem::path& path) const {
  if (!is_remote_path(path)) return path;
  auto [clean, secrets] = remote::split_secrets(path.native());
  if (!secrets.userinfo.empty() || !secrets.query.empty()) {
    if (clean.rfind("s3://", 0) == 0 || clean.rfind("hf://", 0) == 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  display_path(path) +
                      ": s3:// and hf:// paths take no user:password@ or query (credentials come "
                      "from the environment: docs/cli.md)");
    }
    impl_->adopt(clean, secrets);
  }
  return clean;
}

std::unique_ptr<RandomAccessFile> RemoteFileSystem::open(const std::filesystem::path& path, IoMode mode) const {
  if (!is_remote_path(path)) return FileSystem::posix().open(path, mode);
  Location loc = impl_->locate(path);
  if (mode == IoMode::kMmap) {
    throw Error(
        ErrorCode::kInvalidArgument,
        loc.path + ": --io mmap maps local files; a remote object is read with ranged GETs (--io pread or auto)");
  }
  ObjectInfo info = impl_->info(loc, false, /*need_prefix=*/true, false).value();
  return std::make_unique<RemoteFile>(impl_, impl_->locate(path), std::move(info));
}

PathStatus RemoteFileSystem::status(const std::filesystem::path& path) const {
  if (!is_remote_path(path)) return FileSystem::status(path);
  const std::string p = remote::split_secrets(path.native()).first;
  if (p.empty() || p.back() == '/' || !names_a_file(p)) return {PathStatus::Kind::kDirectory};
  return {impl_->info(impl_->locate(path), true, false, false) ? PathStatus::Kind::kFile : PathStatus::Kind::kNone};
}

std::optional<std::vector<std::string>> RemoteFileSystem::list(const std::filesystem::path& dir) const {
  if (!is_remote_path(dir)) return FileSystem::list(dir);
  const Location loc = impl_->locate(dir);
  if (loc.scheme != Location::Scheme::kS3) return std::nullopt;  // HTTP has no listing
  return impl_->list_s3(loc);
}

FileSignature RemoteFileSystem::signature(const std::filesystem::path& path) const {
  if (!is_remote_path(path)) return FileSystem::signature(path);
  const ObjectInfo i = impl_->info(impl_->locate(path), false, false, /*fresh=*/true).value();
  return {i.size, 0, 0, i.etag};
}

std::optional<PublishedDigest> RemoteFileSystem::published_sha256(const std::filesystem::path& path) const {
  if (!is_remote_path(path)) return std::nullopt;
  const Location loc = impl_->locate(path);
  if (loc.scheme == Location::Scheme::kHf) {
    const ObjectInfo i = impl_->info(loc, false, false, false).value();
    if (i.sha256.empty()) return std::nullopt;
    return PublishedDigest{i.sha256, i.sha256_source};
  }
  if (loc.scheme != Location::Scheme::kS3) return std::nullopt;
  // S3 returns checksums on whole-object GETs and HEADs only (a range gets none).
  HttpGet g;
  g.where = &loc;
  g.ranged = false;
  g.head = true;
  g.checksum_mode = true;
  HttpGet gets[] = {std::move(g)};
  impl_->run(gets);
  if (gets[0].sha256.empty()) return std::nullopt;
  return PublishedDigest{gets[0].sha256, gets[0].sha256_source};
}

unsigned RemoteFileSystem::concurrency(const std::filesystem::path& path) const {
  return is_remote_path(path) ? std::max(1u, impl_->options.concurrency) : 0;
}

// ---- RemoteOptions ----

namespace {

struct Setting {
  const char* name;
  const char* env;  // the variable from_environment() reads (the first one), for messages
  void (*set)(RemoteOptions&, std::string_view name, std::string_view value);
};

uint64_t parse_count(std::string_view name, std::string_view v, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty() || n < lo || n > hi) {
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + std::string(v) + "': expected an integer " +
                                                 std::to_string(lo) + ".." + std::to_string(hi));
  }
  return n;
}

uint64_t parse_byte_count(std::string_view name, std::string_view v) {
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  std::string_view rest(end, static_cast<size_t>(v.data() + v.size() - end));
  unsigned shift = 0;
  if (rest == "K" || rest == "k" || rest == "KiB")
    shift = 10;
  else if (rest == "M" || rest == "MiB")
    shift = 20;
  else if (rest == "G" || rest == "GiB")
    shift = 30;
  else if (!rest.empty())
    n = UINT64_MAX, shift = 64;
  if (ec != std::errc() || v.empty() || shift == 64 || (shift && n > (UINT64_MAX >> shift))) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(name) + "='" + std::string(v) + "': expected a byte count (digits, optional K, M or G)");
  }
  return n << shift;
}

bool parse_bool(std::string_view name, std::string_view v) {
  if (v == "1" || v == "true" || v == "True" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "False" || v == "no" || v.empty()) return false;
  throw Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + std::string(v) + "': expected true or false");
}

const std::vector<Setting>& settings() {
  static const std::vector<Setting> s = {
      {"s3_endpoint", "AWS_ENDPOINT_URL_S3", [](RemoteOptions& o, auto, auto v) { o.s3_endpoint = v; }},
      {"s3_region", "AWS_REGION", [](RemoteOptions& o, auto, auto v) { o.s3_region = v; }},
      {"s3_no_sign", "", [](RemoteOptions& o, auto n, auto v) { o.s3_no_sign = parse_bool(n, v); }},
      {"aws_profile", "AWS_PROFILE", [](RemoteOptions& o, auto, auto v) { o.aws_profile = v; }},
      {"hf_endpoint", "HF_ENDPOINT", [](RemoteOptions& o, auto, auto v) { o.hf_endpoint = v; }},
      {"hf_token", "HF_TOKEN",
       [](RemoteOptions& o, auto, auto v) {
         o.hf_token = v;
         o.hf_token_source = "the hf_token setting";
       }},
      {"ca_bundle", "WMAP_CA_BUNDLE", [](RemoteOptions& o, auto, auto v) { o.ca_bundle = v; }},
      {"concurrency", "WMAP_REMOTE_CONCURRENCY",
       [](RemoteOptions& o, auto n, auto v) { o.concurrency = static_cast<unsigned>(parse_count(n, v, 1, 1024)); }},
      {"retries", "WMAP_REMOTE_RETRIES",
       [](RemoteOptions& o, auto n, auto v) { o.retries = static_cast<unsigned>(parse_count(n, v, 0, 100)); }},
      {"stall_seconds", "WMAP_REMOTE_TIMEOUT",
       [](RemoteOptions& o, auto n, auto v) { o.stall_seconds = parse_seconds(n, v); }},
      {"min_bytes_per_second", "WMAP_REMOTE_MIN_SPEED",
       [](RemoteOptions& o, auto n, auto v) {
         o.min_bytes_per_second = std::max<uint64_t>(1, parse_byte_count(n, v));
       }},
      {"gap_bytes", "WMAP_REMOTE_GAP_BYTES",
       [](RemoteOptions& o, auto n, auto v) { o.gap_bytes = parse_byte_count(n, v); }},
      {"s3_list_page", "WMAP_S3_LIST_PAGE",
       [](RemoteOptions& o, auto n, auto v) { o.s3_list_page = static_cast<unsigned>(parse_count(n, v, 1, 1000)); }},
      {"s3_list_max_keys", "WMAP_S3_LIST_MAX_KEYS",
       [](RemoteOptions& o, auto n, auto v) { o.s3_list_max_keys = parse_count(n, v, 1, 100000000); }},
      {"aws_imds", "", [](RemoteOptions& o, auto n, auto v) { o.aws_imds = parse_bool(n, v); }},
  };
  return s;
}

}  // namespace

std::vector<std::string> RemoteOptions::names() {
  std::vector<std::string> out;
  for (const auto& s : settings()) out.push_back(s.name);
  return out;
}

void RemoteOptions::set(std::string_view name, std::string_view value) {
  for (const auto& s : settings()) {
    if (name == s.name) return s.set(*this, name, value);
  }
  std::string known;
  for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(ErrorCode::kInvalidArgument, "remote setting '" + std::string(name) + "' is not one of " + known);
}

RemoteOptions RemoteOptions::from_environment() {
  RemoteOptions o;
  auto from = [&](const char* setting, std::initializer_list<const char*> vars) {
    for (const char* var : vars) {
      if (auto v = env_value(var); v && !v->empty()) {
        for (const auto& s : settings()) {
          if (std::string_view(s.name) == setting) s.set(o, var, *v);
        }
        return true;
      }
    }
    return false;
  };
  from("s3_endpoint", {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"});
  from("s3_region", {"AWS_REGION", "AWS_DEFAULT_REGION"});
  from("aws_profile", {"AWS_PROFILE"});
  from("hf_endpoint", {"HF_ENDPOINT"});
  from("ca_bundle", {"WMAP_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"});
  from("concurrency", {"WMAP_REMOTE_CONCURRENCY"});
  from("retries", {"WMAP_REMOTE_RETRIES"});
  from("stall_seconds", {"WMAP_REMOTE_TIMEOUT"});
  from("min_bytes_per_second", {"WMAP_REMOTE_MIN_SPEED"});
  from("gap_bytes", {"WMAP_REMOTE_GAP_BYTES"});
  from("s3_list_page", {"WMAP_S3_LIST_PAGE"});
  from("s3_list_max_keys", {"WMAP_S3_LIST_MAX_KEYS"});
  if (auto v = env_value("AWS_EC2_METADATA_DISABLED"); v && (*v == "true" || *v == "TRUE" || *v == "1"))
    o.aws_imds = false;
  // The hub's token: HF_TOKEN, else the file `huggingface-cli login` writes (huggingface_hub
  // constants.py: HF_TOKEN_PATH, default $HF_HOME/token, HF_HOME default
  // $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface).
  if (auto v = env_value("HF_TOKEN"); v && !v->empty()) {
    o.hf_token = *v;
    o.hf_token_source = "HF_TOKEN";
  } else {
    std::string file = env_value("HF_TOKEN_PATH").value_or("");
    if (file.empty()) {
      std::string home = env_value("HF_HOME").value_or("");
      if (home.empty()) {
        if (auto x = env_value("XDG_CACHE_HOME"); x && !x->empty()) {
          home = *x + "/huggingface";
        } else if (const char* h = std::getenv("HOME")) {
          home = std::string(h) + "/.cache/huggingface";
        }
      }
      if (!home.empty()) file = home + "/token";
    }
    if (!file.empty()) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(file, ec) && std::filesystem::file_size(file, ec) < 4096) {
        std::string token;
        if (FILE* f = std::fopen(file.c_str(), "rb")) {
          char buf[4096];
          const size_t n = std::fread(buf, 1, sizeof buf, f);
          std::fclose(f);
          token.assign(buf, n);
        }
        while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
          token.pop_back();
        while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.erase(0, 1);
        if (!token.empty()) {
          o.hf_token = token;
          o.hf_token_source = "the token file " + file;
        }
      }
    }
  }
  return o;
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
  // For callers that name no file system: remembers nothing between calls (no state outlives a
  // call), so each open asks the server; sessions own a RemoteFileSystem of their own.
  static const RemoteFileSystem fs(RemoteOptions::from_environment(), /*remember=*/false);
  return fs;
}

}  // namespace wmap
