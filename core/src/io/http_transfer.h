#pragma once
// GET requests over libcurl, run concurrently on the calling thread's connections, with the
// checks and retries remote reads need. A ranged GET writes its body straight into the caller's
// pieces (bytes between pieces are dropped), checks the status, Content-Range, ETag and length,
// and is retried with exponential backoff and full jitter on 5xx, 429 (Retry-After honoured),
// resets, stalls and short bodies, resuming after the bytes that already landed. 401/403/404/412
// and a server that ignores Range fail at once. Internal to the io stage.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "remote_location.h"
#include "wmap/io/file_io.h"

namespace wmap::remote {

struct HttpGet {
  const Location* where = nullptr;
  std::string url;  // default: where->url
  // Range [begin, end): bytes to fetch. ranged=false: the whole body into `body` (a listing).
  bool ranged = true;
  uint64_t begin = 0, end = 0;
  bool clamp_end = false;           // a probe: a shorter object ends the range early
  std::vector<ReadSegment> pieces;  // sorted by offset, inside [begin, end)
  std::string if_match;             // sent as If-Match (unless weak) and compared with the response's ETag
  uint64_t expected_size = 0;       // the object's size when known: each response's total must equal it
  // Filled in.
  std::string body;          // ranged=false
  std::string etag;          // the response's ETag
  uint64_t object_size = 0;  // from Content-Range (or Content-Length of a 200)
  bool not_found = false;    // 404 with allow_not_found
  bool allow_not_found = false;
  bool denied = false;  // 401/403 with allow_denied
  bool allow_denied = false;
};

// Runs every request, up to options.concurrency at once; throws the first that fails for good
// (kNotFound for 404, kIo otherwise) naming the object, the range, the status or libcurl's error,
// the attempts made and, for 401/403, the credentials' source.
void run_gets(std::span<HttpGet> gets, const RemoteOptions& options);

// Process-wide counters (wmap/io/remote.h).
RemoteCounters counters();

}  // namespace wmap::remote
