#include "http_transfer.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <charconv>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <thread>

#include "curl_api.h"
#include "wmap/util/error.h"
#include "logger.h"

namespace wmap::remote {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<uint64_t> g_requests{0}, g_retries{0}, g_bytes{0};

constexpr size_t kErrorBodyCap = 4096;
constexpr uint64_t kListingCap = uint64_t{64} << 20;  // one ListObjectsV2 page is ~300 KB
constexpr double kBackoffBase = 0.1, kBackoffCap = 5.0, kRetryAfterCap = 60.0;

// One thread's connections: a multi handle (its connection cache keeps connections alive across
// calls) and the easy handles it reuses.
struct ThreadCurl {
  CURLM* multi = nullptr;
  std::vector<CURL*> idle;
  ThreadCurl() {
    multi = curl().multi_init();
    if (!multi) throw Error(ErrorCode::kOutOfMemory, "libcurl: cannot create a multi handle");
  }
  ~ThreadCurl() {
    for (CURL* h : idle) curl().easy_cleanup(h);
    curl().multi_cleanup(multi);
  }
  CURL* take() {
    if (!idle.empty()) {
      CURL* h = idle.back();
      idle.pop_back();
      return h;
    }
    CURL* h = curl().easy_init();
    if (!h) throw Error(ErrorCode::kOutOfMemory, "libcurl: cannot create a handle");
    return h;
  }
};

ThreadCurl& thread_curl() {
  thread_local ThreadCurl tc;
  return tc;
}

bool iequals_prefix(std::string_view line, std::string_view name) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  }
  return true;
}

std::string header_value(std::string_view line, size_t name_len) {
  std::string_view v = line.substr(name_len + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
  return std::string(v);
}

// The state of one request across its attempts.
struct Request {
  HttpGet* get = nullptr;
  uint64_t done = 0;  // bytes from `begin` that already landed (kept across a resumed retry)
  unsigned attempts = 0;
  std::string final_etag;  // the last response's ETag of the first attempt (a CDN's): resumes must match it
  Clock::time_point not_before{};
  std::string last_failure;
};

// One attempt in flight.
struct Attempt {
  Request* req = nullptr;
  CURL* h = nullptr;
  curl_slist* headers = nullptr;
  long status = 0;
  // The current response's headers (reset by each response of a redirect chain).
  std::string reason, etag, content_range, retry_after, content_length, last_modified;
  // The chain's: the first response that carried each (the hub's own, before its redirect).
  std::string first_etag, linked_etag, linked_size, repo_commit, checksum_sha256;
  bool seen_response = false;
  uint64_t start = 0, expect_end = 0, received = 0;
  size_t cursor = 0;
  bool checked = false;
  std::string error_body;
  std::string fatal;                 // set by a callback: this request fails for good
  std::shared_ptr<const Auth> auth;  // the credentials this attempt was sent with
  char errbuf[CURL_ERROR_SIZE] = {};
};

std::string range_text(const HttpGet& g, uint64_t start) {
  if (!g.ranged) return "GET";
  return "GET bytes=" + std::to_string(start) + "-" + std::to_string(g.end - 1);
}

void parse_header(Attempt* a, std::string_view line);
size_t parse_body(Attempt* a, const char* p, size_t len);

// libcurl's callbacks: nothing may unwind through its C frames, so a throw (bad_alloc) fails the
// request instead.
size_t on_header(char* buf, size_t size, size_t n, void* ud) {
  auto* a = static_cast<Attempt*>(ud);
  try {
    parse_header(a, std::string_view(buf, size * n));
    return size * n;
  } catch (...) {
    a->fatal = "out of memory while reading a response header";
    return 0;
  }
}

size_t on_body(char* p, size_t size, size_t n, void* ud) {
  auto* a = static_cast<Attempt*>(ud);
  try {
    return parse_body(a, p, size * n);
  } catch (...) {
    a->fatal = "out of memory while reading a response";
    return 0;
  }
}

void parse_header(Attempt* a, std::string_view line) {
  if (line.substr(0, 5) == "HTTP/") {
    // A new response (the first, or the one after a redirect): forget the previous one's headers.
    if (a->seen_response && a->first_etag.empty()) a->first_etag = a->etag;
    a->seen_response = true;
    a->etag.clear();
    a->content_range.clear();
    a->retry_after.clear();
    a->content_length.clear();
    a->last_modified.clear();
    const auto sp = line.find(' ');
    a->status =
        sp == std::string_view::npos ? 0 : std::strtol(std::string(line.substr(sp + 1, 3)).c_str(), nullptr, 10);
    a->reason = sp == std::string_view::npos || line.size() < sp + 5 ? "" : header_value(line, sp + 4);
  } else if (iequals_prefix(line, "etag")) {
    a->etag = header_value(line, 4);
  } else if (iequals_prefix(line, "content-range")) {
    a->content_range = header_value(line, 13);
  } else if (iequals_prefix(line, "retry-after")) {
    a->retry_after = header_value(line, 11);
  } else if (iequals_prefix(line, "content-length")) {
    a->content_length = header_value(line, 14);
  } else if (iequals_prefix(line, "last-modified")) {
    a->last_modified = header_value(line, 13);
  } else if (iequals_prefix(line, "x-linked-etag")) {
    if (a->linked_etag.empty()) a->linked_etag = header_value(line, 13);
  } else if (iequals_prefix(line, "x-linked-size")) {
    if (a->linked_size.empty()) a->linked_size = header_value(line, 13);
  } else if (iequals_prefix(line, "x-repo-commit")) {
    if (a->repo_commit.empty()) a->repo_commit = header_value(line, 13);
  } else if (iequals_prefix(line, "x-amz-checksum-sha256")) {
    a->checksum_sha256 = header_value(line, 21);
  }
}

// A decimal number, all of `s` (no sign, no space): Content-Range's and the hub's sizes.
std::optional<uint64_t> decimal(std::string_view s) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// "bytes LO-HI/TOTAL", strictly (review: sscanf took signs, spaces and overflowed silently).
bool parse_content_range(std::string_view cr, uint64_t& lo, uint64_t& hi, uint64_t& total) {
  if (cr.substr(0, 6) != "bytes ") return false;
  cr.remove_prefix(6);
  const auto dash = cr.find('-'), slash = cr.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) return false;
  const auto a = decimal(cr.substr(0, dash)), b = decimal(cr.substr(dash + 1, slash - dash - 1)),
             t = decimal(cr.substr(slash + 1));
  if (!a || !b || !t || *a > *b || *b >= *t) return false;
  lo = *a, hi = *b, total = *t;
  return true;
}

// The hub's identity for one of its files: the LFS SHA-256 (X-Linked-Etag) of its own response
// before the redirect to the CDN, else the hub's own ETag (a git blob); never the CDN's (review
// F8). Elsewhere the response's ETag, else its Last-Modified: a server with neither cannot tell
// versions apart (only the size is compared).
std::string identity_of(const Attempt& a, const Location& where) {
  if (where.scheme == Location::Scheme::kHf) {
    if (!a.linked_etag.empty()) return a.linked_etag;
    return a.first_etag.empty() ? a.etag : a.first_etag;
  }
  if (!a.etag.empty()) return a.etag;
  return a.last_modified.empty() ? std::string() : "last-modified " + a.last_modified;
}

bool looks_like_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// S3's x-amz-checksum-sha256 (base64 of the 32-byte digest; a multipart object's "…-N" is a
// digest of part digests, not of the object) as hex; empty when it is not a whole-object digest.
std::string base64_sha256_hex(std::string_view b64) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (b64.size() != 44 || b64.back() != '=') return {};
  std::string bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : b64.substr(0, 43)) {
    const auto v = kAlphabet.find(c);
    if (v == std::string_view::npos) return {};
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  if (bytes.size() != 32) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  return hex;
}

// Files the hub keeps only in its Xet storage (over 50 GB): its resolve endpoint does not serve
// them as plain byte ranges.
constexpr uint64_t kHubLfsLimit = uint64_t{50} * 1000 * 1000 * 1000;

// First body byte of a success: the response must be the bytes asked for, of the version asked for.
bool check_response(Attempt& a) {
  HttpGet& g = *a.req->get;
  const std::string& name = g.where->path;
  const std::string identity = identity_of(a, *g.where);
  g.etag = identity;
  g.repo_commit = a.repo_commit;
  if (g.where->scheme == Location::Scheme::kHf) {
    std::string linked = a.linked_etag;
    if (linked.size() >= 2 && linked.front() == '"' && linked.back() == '"')
      linked = linked.substr(1, linked.size() - 2);
    if (looks_like_sha256_hex(linked)) {
      g.sha256 = linked;
      g.sha256_source = "the hub's X-Linked-Etag (LFS SHA-256)";
    }
    if (const auto size = decimal(a.linked_size); size && *size > kHubLfsLimit) {
      a.fatal = name + ": " + std::to_string(*size) +
                " bytes: the hub keeps files over 50 GB in its Xet storage only, which wmap does not read; "
                "download it (hf download) and load the folder";
      return false;
    }
  } else if (!a.checksum_sha256.empty()) {
    if (std::string hex = base64_sha256_hex(a.checksum_sha256); !hex.empty()) {
      g.sha256 = std::move(hex);
      g.sha256_source = "S3's x-amz-checksum-sha256";
    }
  }
  if (!g.if_match.empty() && !identity.empty() && identity != g.if_match) {
    const bool sent = g.if_match.front() == '"' && g.where->scheme != Location::Scheme::kHf;
    a.fatal = name + ": changed since it was planned (" +
              (g.where->scheme == Location::Scheme::kHf ? "the hub's ETag " : "ETag ") + g.if_match + " then, " +
              identity + " now" + (sent ? "; the server did not honour If-Match" : "") + "): plan again";
    return false;
  }
  if (!a.req->final_etag.empty() && !a.etag.empty() && a.etag != a.req->final_etag) {
    a.fatal =
        name + ": the server's copy changed during the transfer (ETag " + a.req->final_etag + ", then " + a.etag + ")";
    return false;
  }
  if (a.req->final_etag.empty()) a.req->final_etag = a.etag;
  if (!g.ranged) return true;
  if (a.status == 206 && g.clamp_end && a.content_range == "bytes */0") {
    g.object_size = 0;  // an empty object (answered 416 to a probe, handled in judge)
    a.expect_end = a.start;
    return true;
  }
  if (a.status == 206) {
    uint64_t lo = 0, hi = 0, total = 0;
    if (!parse_content_range(a.content_range, lo, hi, total)) {
      a.fatal = name + ": unreadable Content-Range '" + a.content_range + "' for " + range_text(g, a.start);
      return false;
    }
    g.object_size = total;
    if (g.expected_size && total != g.expected_size) {
      // Without an identity (or from a server that ignores If-Match), the size still tells versions apart.
      a.fatal = name + ": changed since it was planned (" + std::to_string(g.expected_size) + " bytes then, " +
                std::to_string(total) + " now; plan again)";
      return false;
    }
    if (lo != a.start) {
      a.fatal = name + ": the server sent bytes " + std::to_string(lo) + "-" + std::to_string(hi) + " for " +
                range_text(g, a.start);
      return false;
    }
    a.expect_end = g.clamp_end ? std::min<uint64_t>(g.end, total) : g.end;
    if (hi + 1 != a.expect_end) {
      a.fatal = name + ": the object is " + std::to_string(total) + " bytes; " + range_text(g, a.start) +
                " was answered with bytes " + std::to_string(lo) + "-" + std::to_string(hi) +
                " (the object changed or the catalog is not of it)";
      return false;
    }
    return true;
  }
  // 200 to a ranged request: the server ignored Range. Usable only when it is the whole object.
  const auto length = decimal(a.content_length);
  const uint64_t total = length.value_or(0);
  g.object_size = total;
  if (g.expected_size && length && total != g.expected_size) {
    a.fatal = name + ": changed since it was planned (" + std::to_string(g.expected_size) + " bytes then, " +
              std::to_string(total) + " now; plan again)";
    return false;
  }
  if (a.start == 0 && length && (total == g.end || (g.clamp_end && total <= g.end))) {
    a.expect_end = total;
    return true;
  }
  a.fatal = name + ": the server ignores byte ranges (HTTP 200 with the whole object for " + range_text(g, a.start) +
            "); wmap needs a server that serves Range requests";
  return false;
}

size_t parse_body(Attempt* a, const char* p, size_t len) {
  if (a->status != 200 && a->status != 206) {
    a->error_body.append(p, std::min(len, kErrorBodyCap - std::min(kErrorBodyCap, a->error_body.size())));
    return len;
  }
  if (!a->checked) {
    a->checked = true;
    if (!check_response(*a)) return 0;
  }
  HttpGet& g = *a->req->get;
  g_bytes.fetch_add(len, std::memory_order_relaxed);
  if (!g.ranged) {
    if (g.body.size() + len > kListingCap) {
      a->fatal = g.where->path + ": a response over " + std::to_string(kListingCap) + " bytes where a listing belongs";
      return 0;
    }
    g.body.append(p, len);
    a->received += len;
    return len;
  }
  const uint64_t pos = a->start + a->received, end = pos + len;
  if (end > a->expect_end) {
    a->fatal = g.where->path + ": the server sent more bytes than " + range_text(g, a->start) + " asks for";
    return 0;
  }
  for (size_t& i = a->cursor; i < g.pieces.size();) {
    const ReadSegment& s = g.pieces[i];
    const uint64_t pe = s.offset + s.len;
    if (pe <= pos) {
      ++i;
      continue;
    }
    if (s.offset >= end) break;
    const uint64_t lo = std::max(pos, s.offset), hi = std::min(end, pe);
    std::memcpy(s.dst + (lo - s.offset), p + (lo - pos), hi - lo);
    if (hi != pe) break;
    ++i;
  }
  a->received += len;
  return len;
}

// "AccessDenied: Access Denied" out of an S3 XML error body; else the body's first line.
std::string error_detail(const std::string& body) {
  auto tag = [&](const char* name) {
    const std::string open = std::string("<") + name + ">", close = std::string("</") + name + ">";
    const auto b = body.find(open);
    const auto e = b == std::string::npos ? b : body.find(close, b);
    return e == std::string::npos ? std::string() : body.substr(b + open.size(), e - b - open.size());
  };
  std::string code = tag("Code"), msg = tag("Message");
  if (!code.empty()) return code + (msg.empty() ? "" : ": " + msg);
  std::string first = body.substr(0, body.find('\n'));
  if (first.size() > 200) first.resize(200);
  return first;
}

void setup(Attempt& a, const RemoteOptions& o) {
  HttpGet& g = *a.req->get;
  CURL* h = a.h;
  curl().easy_reset(h);
  const SecretUrl& url = g.url.empty() ? g.where->url : g.url;
  curl().easy_setopt(h, CURLOPT_URL, url.for_curl());
  // An https origin (or the hub over https) is never downgraded by a redirect (review F6).
  const char* protocols = g.where->https_only ? "https" : "http,https";
  curl().easy_setopt(h, CURLOPT_PROTOCOLS_STR, protocols);
  curl().easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, protocols);
  curl().easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl().easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);  // the hub answers with a redirect to its CDN
  curl().easy_setopt(h, CURLOPT_MAXREDIRS, 8L);
  curl().easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  // The throughput floor: a transfer averaging less than this over stall_seconds (a stall, or a
  // server trickling a byte a second, review F5) is abandoned and retried.
  curl().easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT,
                     static_cast<long>(std::clamp<uint64_t>(o.min_bytes_per_second, 1, LONG_MAX)));
  curl().easy_setopt(h, CURLOPT_LOW_SPEED_TIME, std::max(1L, static_cast<long>(o.stall_seconds + 0.5)));
  curl().easy_setopt(h, CURLOPT_BUFFERSIZE,
                     512L * 1024);  // measured: 64 KiB, 2 MiB and 10 MiB are slower over loopback
  curl().easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl().easy_setopt(h, CURLOPT_ERRORBUFFER, a.errbuf);
  curl().easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl().easy_setopt(h, CURLOPT_HEADERDATA, &a);
  curl().easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl().easy_setopt(h, CURLOPT_WRITEDATA, &a);
  curl().easy_setopt(h, CURLOPT_PRIVATE, &a);
  curl().easy_setopt(h, CURLOPT_USERAGENT, "wmap");
  if (!o.ca_bundle.empty()) curl().easy_setopt(h, CURLOPT_CAINFO, o.ca_bundle.c_str());
  if (g.ranged) {
    a.headers = curl().slist_append(
        a.headers, ("Range: bytes=" + std::to_string(a.start) + "-" + std::to_string(g.end - 1)).c_str());
  }
  // If-Match compares strongly (RFC 9110): only a strong ETag is sent; a weak one, a
  // Last-Modified identity and the hub's (its own ETag, which the CDN answering after its
  // redirect does not share) are compared here instead.
  if (!g.if_match.empty() && g.if_match.front() == '"' && g.where->scheme != Location::Scheme::kHf)
    a.headers = curl().slist_append(a.headers, ("If-Match: " + g.if_match).c_str());
  if (g.head) curl().easy_setopt(h, CURLOPT_NOBODY, 1L);
  if (g.where->scheme == Location::Scheme::kS3) {
    // S3 redirects nowhere worth following (a custom header such as the session token would
    // follow to another host), and a key is a name, not a path to normalise ("a/../b").
    curl().easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl().easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    if (g.checksum_mode) a.headers = curl().slist_append(a.headers, "x-amz-checksum-mode: ENABLED");
  }
  a.auth = g.auth ? g.auth : (g.where->auth ? g.where->auth->current() : nullptr);
  if (const Auth* auth = a.auth.get()) {
    if (auth->kind == Auth::Kind::kSigV4) {
      // libcurl signs (CURLOPT_AWS_SIGV4); the payload of a GET is empty.
      curl().easy_setopt(h, CURLOPT_AWS_SIGV4, ("aws:amz:" + auth->region + ":s3").c_str());
      curl().easy_setopt(h, CURLOPT_USERNAME, auth->key_id.c_str());
      curl().easy_setopt(h, CURLOPT_PASSWORD, auth->secret.c_str());
      a.headers = curl().slist_append(
          a.headers, "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
      if (!auth->session_token.empty())
        a.headers = curl().slist_append(a.headers, ("x-amz-security-token: " + auth->session_token).c_str());
    } else if (auth->kind == Auth::Kind::kBearer) {
      // Sent to the URL's own host only: libcurl drops it on a redirect to another host
      // (CURLOPT_UNRESTRICTED_AUTH stays off).
      curl().easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
      curl().easy_setopt(h, CURLOPT_XOAUTH2_BEARER, auth->bearer.c_str());
    }
  }
  curl().easy_setopt(h, CURLOPT_HTTPHEADER, a.headers);
}

double backoff_seconds(const Attempt& a, unsigned attempts) {
  if (!a.retry_after.empty()) {
    char* end = nullptr;
    const double s = std::strtod(a.retry_after.c_str(), &end);
    if (end != a.retry_after.c_str() && s >= 0) return std::min(s, kRetryAfterCap);
  }
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const double cap = std::min(kBackoffCap, kBackoffBase * static_cast<double>(uint64_t{1} << std::min(attempts, 20u)));
  return std::uniform_real_distribution<double>(0, cap)(rng);  // full jitter
}

bool retryable_curl(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR: return true;
    default: return false;
  }
}

enum class Outcome { kDone, kRetry, kFail };

struct Verdict {
  Outcome outcome;
  std::string what;
  ErrorCode code = ErrorCode::kIo;
};

Verdict judge(Attempt& a, CURLcode rc) {
  HttpGet& g = *a.req->get;
  const std::string req = range_text(g, a.start);
  const std::string http = "HTTP " + std::to_string(a.status) + (a.reason.empty() ? "" : " " + a.reason);
  if (!a.fatal.empty()) return {Outcome::kFail, a.fatal};
  if (rc != CURLE_OK && a.checked && a.fatal.empty() && g.ranged && a.received == a.expect_end - a.start) {
    return {Outcome::kDone, {}};  // every byte arrived; the connection failed after them
  }
  if (rc != CURLE_OK) {
    std::string what = req + ": " + (a.errbuf[0] ? std::string(a.errbuf) : curl().easy_strerror(rc));
    if (rc == CURLE_PARTIAL_FILE || (a.checked && a.received < a.expect_end - a.start))
      what +=
          " (short body: " + std::to_string(a.received) + " of " + std::to_string(a.expect_end - a.start) + " bytes)";
    return {retryable_curl(rc) ? Outcome::kRetry : Outcome::kFail, what};
  }
  const long s = a.status;
  if (s == 200 || s == 206) {
    if (!a.checked && !check_response(a)) return {Outcome::kFail, a.fatal};  // an empty body
    if (g.ranged && a.received != a.expect_end - a.start) {
      return {Outcome::kRetry, req + ": short body (" + std::to_string(a.received) + " of " +
                                   std::to_string(a.expect_end - a.start) + " bytes)"};
    }
    return {Outcome::kDone, {}};
  }
  const std::string detail = error_detail(a.error_body);
  const std::string full = http + " for " + req + (detail.empty() ? "" : " (" + detail + ")");
  if (s == 404) {
    if (g.allow_not_found) {
      g.not_found = true;
      return {Outcome::kDone, {}};
    }
    return {Outcome::kFail, full, ErrorCode::kNotFound};
  }
  if ((s == 401 || s == 403) && g.allow_denied) {
    g.denied = true;
    return {Outcome::kDone, {}};
  }
  if (s == 401 || s == 403) {
    return {Outcome::kFail, full + "; credentials: " + (a.auth ? a.auth->source : std::string("none"))};
  }
  if (s == 412)
    return {Outcome::kFail, "changed since it was planned (plan again): " + full + " with If-Match: " + g.if_match};
  if (s == 416 && g.clamp_end && a.content_range == "bytes */0") {
    g.object_size = 0;  // a probe of an empty object
    g.etag = identity_of(a, *g.where);
    return {Outcome::kDone, {}};
  }
  if (s == 416) return {Outcome::kFail, full + ": the object is shorter than the catalog says (changed?)"};
  if (s == 429 || s == 408 || s >= 500) return {Outcome::kRetry, full};
  return {Outcome::kFail, full};
}

void release(ThreadCurl& tc, Attempt& a) {
  curl().multi_remove_handle(tc.multi, a.h);
  curl().easy_reset(a.h);  // drops the pointers into this attempt (error buffer, callbacks' data, headers)
  curl().slist_free_all(a.headers);
  a.headers = nullptr;
  tc.idle.push_back(a.h);
}

}  // namespace

RemoteCounters counters() {
  return {g_requests.load(std::memory_order_relaxed), g_retries.load(std::memory_order_relaxed),
          g_bytes.load(std::memory_order_relaxed)};
}

namespace {
[[noreturn]] void throw_cancelled(const HttpGet& g) {
  throw Error(ErrorCode::kCancelled, g.where->path + ": cancelled");
}
}  // namespace

void run_gets(std::span<HttpGet> gets, const TransferContext& ctx) {
  if (gets.empty()) return;
  const RemoteOptions& o = *ctx.options;
  auto cancelled = [&] { return ctx.cancelled && ctx.cancelled->load(std::memory_order_relaxed); };
  if (cancelled()) throw_cancelled(gets[0]);
  ThreadCurl& tc = thread_curl();
  std::vector<Request> reqs(gets.size());
  std::deque<Request*> pending;
  for (size_t i = 0; i < gets.size(); ++i) {
    reqs[i].get = &gets[i];
    pending.push_back(&reqs[i]);
  }
  std::vector<std::unique_ptr<Attempt>> active;
  const size_t limit = std::max(1u, o.concurrency);
  auto abandon_all = [&] {
    for (auto& a : active) release(tc, *a);
    active.clear();
  };
  try {
    while (!pending.empty() || !active.empty()) {
      // Checked every turn: a turn waits at most 100 ms (the poll below, the backoff sleep).
      if (cancelled()) {
        abandon_all();
        throw_cancelled(gets[0]);
      }
      const auto now = Clock::now();
      auto next_ready = Clock::time_point::max();
      for (auto it = pending.begin(); it != pending.end() && active.size() < limit;) {
        Request* r = *it;
        if (r->not_before > now) {
          next_ready = std::min(next_ready, r->not_before);
          ++it;
          continue;
        }
        it = pending.erase(it);
        auto a = std::make_unique<Attempt>();
        a->req = r;
        a->h = tc.take();
        a->start = r->get->begin + r->done;
        a->expect_end = r->get->end;
        if (!r->get->ranged) r->get->body.clear();  // a retried listing starts over
        ++r->attempts;
        g_requests.fetch_add(1, std::memory_order_relaxed);
        if (r->attempts > 1) g_retries.fetch_add(1, std::memory_order_relaxed);
        try {
          setup(*a, o);
        } catch (...) {
          curl().slist_free_all(a->headers);
          tc.idle.push_back(a->h);
          throw;
        }
        if (curl().multi_add_handle(tc.multi, a->h) != CURLM_OK) {
          curl().slist_free_all(a->headers);
          tc.idle.push_back(a->h);
          throw Error(ErrorCode::kIo, "libcurl: cannot start a request");
        }
        active.push_back(std::move(a));
      }
      if (active.empty()) {
        // Backing off: in steps of at most 100 ms, so a cancel is seen (a Retry-After may be 60 s).
        std::this_thread::sleep_until(std::min(next_ready, Clock::now() + std::chrono::milliseconds(100)));
        continue;
      }
      int running = 0;
      if (const CURLMcode mc = curl().multi_perform(tc.multi, &running); mc != CURLM_OK)
        throw Error(ErrorCode::kIo, std::string("libcurl: ") + curl().multi_strerror(mc));
      int left = 0;
      while (CURLMsg* m = curl().multi_info_read(tc.multi, &left)) {
        if (m->msg != CURLMSG_DONE) continue;
        const auto it =
            std::find_if(active.begin(), active.end(), [&](const auto& a) { return a->h == m->easy_handle; });
        if (it == active.end()) continue;
        Attempt& a = **it;
        const CURLcode rc = m->data.result;
        Verdict v = judge(a, rc);
        Request& r = *a.req;
        if (v.outcome == Outcome::kRetry && r.attempts > o.retries) v.outcome = Outcome::kFail;
        if (v.outcome == Outcome::kFail) {
          const std::string msg =
              r.get->where->path + ": " + v.what +
              (r.attempts > 1 ? " (after " + std::to_string(r.attempts) + " attempts; earlier: " + r.last_failure + ")"
                              : "");
          abandon_all();
          throw Error(v.code, msg);
        }
        if (v.outcome == Outcome::kRetry) {
          // Resume after the bytes that landed, when they were the right bytes of the right version.
          if (r.get->ranged && a.checked && a.fatal.empty() && (a.status == 206 || a.status == 200)) {
            r.done += a.received;
            // A probe learns the identity from its first response: the rest must be that version.
            if (r.get->if_match.empty() && a.received) r.get->if_match = r.get->etag;
          }
          r.last_failure = v.what;
          const double wait = backoff_seconds(a, r.attempts);
          log().debug("{}: {}; retry {} of {} in {:.2f} s", r.get->where->path, v.what, r.attempts, o.retries, wait);
          r.not_before =
              Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
          pending.push_back(&r);
        }
        release(tc, a);
        active.erase(it);
      }
      if (!active.empty() && running > 0) {
        int timeout_ms = 100;
        if (next_ready != Clock::time_point::max()) {
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next_ready - Clock::now()).count();
          timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 100));
        }
        curl().multi_poll(tc.multi, nullptr, 0, timeout_ms, nullptr);
      }
    }
  } catch (...) {
    abandon_all();
    throw;
  }
}

namespace {
size_t on_call_body(char* p, size_t size, size_t n, void* ud) {
  auto* out = static_cast<std::pair<std::string*, uint64_t>*>(ud);
  if (out->first->size() + size * n > out->second) return 0;  // over the bound: the call fails
  out->first->append(p, size * n);
  return size * n;
}
}  // namespace

HttpAnswer http_call(const HttpCall& call, const TransferContext& ctx) {
  HttpAnswer out;
  if (ctx.cancelled && ctx.cancelled->load()) {
    out.error = "cancelled";
    return out;
  }
  CURL* h = curl().easy_init();
  if (!h) throw Error(ErrorCode::kOutOfMemory, "libcurl: cannot create a handle");
  curl_slist* headers = nullptr;
  for (const auto& line : call.headers) headers = curl().slist_append(headers, line.c_str());
  char errbuf[CURL_ERROR_SIZE] = {};
  std::pair<std::string*, uint64_t> sink{&out.body, call.max_bytes};
  curl().easy_setopt(h, CURLOPT_URL, call.url.c_str());
  curl().easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl().easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl().easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl().easy_setopt(h, CURLOPT_CUSTOMREQUEST, call.method.c_str());
  if (call.method == "PUT" || call.method == "POST") {
    curl().easy_setopt(h, CURLOPT_POSTFIELDS, call.body.c_str());  // `call` outlives the transfer
    curl().easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(call.body.size()));
  }
  curl().easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(call.timeout_seconds * 1000));
  curl().easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min(call.timeout_seconds, 10.0) * 1000));
  curl().easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl().easy_setopt(h, CURLOPT_WRITEFUNCTION, on_call_body);
  curl().easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  curl().easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl().easy_setopt(h, CURLOPT_USERAGENT, "wmap");
  if (!ctx.options->ca_bundle.empty()) curl().easy_setopt(h, CURLOPT_CAINFO, ctx.options->ca_bundle.c_str());
  g_requests.fetch_add(1, std::memory_order_relaxed);
  const CURLcode rc = curl().easy_perform(h);
  if (rc == CURLE_OK) {
    curl().easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out.status);
  } else {
    out.error = errbuf[0] ? std::string(errbuf) : curl().easy_strerror(rc);
  }
  curl().slist_free_all(headers);
  curl().easy_cleanup(h);
  return out;
}

}  // namespace wmap::remote
