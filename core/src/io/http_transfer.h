#pragma once
// GET requests over libcurl, run concurrently on the calling thread's connections, with the
// checks and retries remote reads need. A ranged GET writes its body straight into the caller's
// pieces (bytes between pieces are dropped), checks the status, Content-Range, identity and
// length, and is retried with exponential backoff and full jitter on 5xx, 429 (Retry-After
// honoured), resets, stalls, transfers slower than the throughput floor and short bodies,
// resuming after the bytes that already landed. 401/403/404/412 and a server that ignores Range
// fail at once. Internal to the io stage.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "remote_location.h"
#include "wmap/io/file_io.h"

namespace wmap::remote {

// What every request of one RemoteFileSystem shares.
struct TransferContext {
  const RemoteOptions* options = nullptr;
  const std::atomic<bool>* cancelled = nullptr;  // set: transfers end with kCancelled within ~100 ms
};

struct HttpGet {
  const Location* where = nullptr;
  SecretUrl url;                     // default: where->url
  std::shared_ptr<const Auth> auth;  // default: where->auth's current credentials
  // Range [begin, end): bytes to fetch. ranged=false: the whole body into `body` (a listing).
  bool ranged = true;
  uint64_t begin = 0, end = 0;
  bool clamp_end = false;           // a probe: a shorter object ends the range early
  std::vector<ReadSegment> pieces;  // sorted by offset, inside [begin, end)
  // The object's identity when known (FileSignature::etag): compared with every response's, and
  // sent as If-Match when it is a strong ETag (never to the hub, whose identity is its own).
  std::string if_match;
  uint64_t expected_size = 0;  // the object's size when known: each response's total must equal it
  bool checksum_mode = false;  // S3: ask for the object's SHA-256 (x-amz-checksum-mode)
  bool head = false;           // a HEAD (ranged=false): the headers only
  bool allow_not_found = false;
  bool allow_denied = false;
  // Filled in.
  std::string body;          // ranged=false
  std::string etag;          // the object's identity: see identity_of in http_transfer.cc
  uint64_t object_size = 0;  // from Content-Range (or Content-Length of a 200)
  std::string sha256;        // the storage's own digest (hub X-Linked-Etag, S3 x-amz-checksum-sha256), hex
  std::string sha256_source;
  std::string repo_commit;  // the hub's X-Repo-Commit
  bool not_found = false;   // 404 with allow_not_found
  bool denied = false;      // 401/403 with allow_denied
};

// Runs every request, up to options.concurrency at once; throws the first that fails for good
// (kNotFound for 404, kCancelled when cancelled, kIo otherwise) naming the object, the range, the
// status or libcurl's error, the attempts made and, for 401/403, the credentials' source.
void run_gets(std::span<HttpGet> gets, const TransferContext& ctx);

// One small request outside the object protocol (credential services: STS, the container and
// instance metadata endpoints): no retries, a deadline, a bounded body.
struct HttpCall {
  std::string method = "GET";
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;                  // sent with POST/PUT
  double timeout_seconds = 5;
  uint64_t max_bytes = uint64_t{1} << 20;
};
struct HttpAnswer {
  long status = 0;  // 0: no response (error says why)
  std::string body;
  std::string error;
};
HttpAnswer http_call(const HttpCall& call, const TransferContext& ctx);

// Process-wide counters (wmap/io/remote.h).
RemoteCounters counters();

}  // namespace wmap::remote
