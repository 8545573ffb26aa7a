#pragma once
// Remote checkpoints: s3://bucket/prefix/, http(s)://host/path/ and hf://org/model[@rev]/ paths,
// read by FileSystem::standard() through libcurl (ranged GETs, If-Match on the ETag recorded when
// a file was first opened or catalogued, retries with backoff). The catalog, plan and executor do
// not know where bytes come from: a remote path is one more FileSystem. docs/cli.md lists the URL
// forms, credentials and environment variables.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// How remote paths are reached. One value per process (set_remote_options); the CLI and the
// Python module fill it from the environment and let their flags override it.
struct RemoteOptions {
  // S3. Endpoint: --s3-endpoint, else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS
  // (https://BUCKET.s3.REGION.amazonaws.com, virtual-hosted). A custom endpoint is addressed
  // path-style (ENDPOINT/BUCKET/KEY), as S3-compatible stores expect.
  std::string s3_endpoint;
  std::string s3_region;    // AWS_REGION, else AWS_DEFAULT_REGION, else the profile's region, else us-east-1
  bool s3_no_sign = false;  // --s3-no-sign: public buckets, no credentials looked up
  std::string aws_profile;  // AWS_PROFILE, else "default" (shared credentials and config files)
  // Hugging Face hub: hf://ORG/MODEL[@REV]/FILE is HF_ENDPOINT/ORG/MODEL/resolve/REV/FILE.
  std::string hf_endpoint = "https://huggingface.co";  // HF_ENDPOINT (a mirror)
  std::string hf_token;  // HF_TOKEN: a bearer token, sent to the hub's host only (never on a redirect elsewhere)
  // https: the CA certificates to trust (PEM file): WMAP_CA_BUNDLE, else CURL_CA_BUNDLE, else
  // SSL_CERT_FILE, else libcurl's default (the system's store).
  std::string ca_bundle;
  // Transfers. concurrency: ranged GETs in flight per read and headers fetched at once
  // (WMAP_REMOTE_CONCURRENCY). retries: attempts after the first for 5xx, 429, resets, stalls and
  // short bodies (WMAP_REMOTE_RETRIES). stall_seconds: a transfer that moves no byte for this long
  // is abandoned and retried (WMAP_REMOTE_TIMEOUT). gap_bytes: two wanted ranges of a file closer
  // than this are fetched as one request (WMAP_REMOTE_GAP_BYTES): a round trip costs more than
  // the bytes between them.
  unsigned concurrency = 16;
  unsigned retries = 5;
  double stall_seconds = 30;
  uint64_t gap_bytes = uint64_t{256} << 10;
  unsigned s3_list_page = 1000;  // WMAP_S3_LIST_PAGE: keys per ListObjectsV2 page (S3's maximum; tests use 1)
  // The environment's values (the variables above); a malformed number is kInvalidArgument
  // naming the variable.
  static RemoteOptions from_environment();
};

// The options remote paths use from now on (connections already open keep theirs).
void set_remote_options(const RemoteOptions& options);
RemoteOptions remote_options();

// True for s3://, http://, https:// and hf:// paths.
bool is_remote_path(std::string_view path);
inline bool is_remote_path(const std::filesystem::path& path) {
  return is_remote_path(std::string_view(path.native()));
}

// `path` as messages show it: a URL without user:password@ and without its query (a presigned
// URL's signature); a local path as it is.
std::string display_path(const std::filesystem::path& path);

// What the process fetched so far from remote storage (all threads).
struct RemoteCounters {
  uint64_t requests = 0;  // HTTP requests sent, retries included
  uint64_t retries = 0;   // of which repeats after a retryable failure
  uint64_t bytes = 0;     // body bytes received (wanted bytes plus the gaps read through)
};
RemoteCounters remote_counters();

}  // namespace wmap
WMAP_PUBLIC_END
