#pragma once
// Remote checkpoints: s3://bucket/prefix/, http(s)://host/path/ and hf://org/model[@rev]/ paths,
// read by a RemoteFileSystem through libcurl (ranged GETs, If-Match on the identity recorded
// when an object was catalogued, retries with backoff). The catalog, plan and executor do not
// know where bytes come from: a remote path is one more FileSystem. docs/cli.md lists the URL
// forms, credentials and environment variables.
//
// Ownership (review F9.1): a RemoteFileSystem is a value its owner (a LoaderSession, the CLI's
// command) makes from RemoteOptions; it owns the credentials, the secrets taken out of URLs and
// what it remembers about objects, and nothing of it is process state. What it remembers lives
// from one plan to the end of the load that runs it (forget()): every new plan asks the servers
// again (one probe a shard), so a changed remote checkpoint is seen by the next plan.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/io/file_io.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// How remote paths are reached. from_environment() reads the variables named below; front ends
// let their flags (CLI) or the `remote=` keyword (Python) override single fields through set().
struct RemoteOptions {
  // S3. Endpoint: --s3-endpoint, else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS
  // (https://BUCKET.s3.REGION.amazonaws.com, virtual-hosted). A custom endpoint is addressed
  // path-style (ENDPOINT/BUCKET/KEY), as S3-compatible stores expect.
  std::string s3_endpoint;
  std::string s3_region;    // AWS_REGION, else AWS_DEFAULT_REGION, else the profile's region, else us-east-1
  bool s3_no_sign = false;  // --s3-no-sign: public buckets, no credentials looked up
  std::string aws_profile;  // AWS_PROFILE, else "default" (shared credentials and config files)
  // Hugging Face hub: hf://ORG/MODEL[@REV]/FILE is HF_ENDPOINT/ORG/MODEL/resolve/COMMIT/FILE,
  // REV resolved to its commit by the first request (X-Repo-Commit) and every later one pinned to it.
  std::string hf_endpoint = "https://huggingface.co";  // HF_ENDPOINT (a mirror)
  // A bearer token, sent to the hub's repository paths only (never on a redirect elsewhere):
  // HF_TOKEN, else the file huggingface-cli login writes (HF_TOKEN_PATH, else $HF_HOME/token,
  // else ~/.cache/huggingface/token). hf_token_source says which (named in 401/403 errors).
  std::string hf_token;
  std::string hf_token_source;
  // https: the CA certificates to trust (PEM file): WMAP_CA_BUNDLE, else CURL_CA_BUNDLE, else
  // SSL_CERT_FILE, else libcurl's default (the system's store).
  std::string ca_bundle;
  // Transfers. concurrency: ranged GETs in flight per read and headers fetched at once
  // (WMAP_REMOTE_CONCURRENCY). retries: attempts after the first for 5xx, 429, resets, stalls and
  // short bodies (WMAP_REMOTE_RETRIES). A transfer moving fewer than min_bytes_per_second on
  // average over stall_seconds (a server that stalls, or trickles) is abandoned and retried
  // (WMAP_REMOTE_MIN_SPEED, WMAP_REMOTE_TIMEOUT). gap_bytes: two wanted ranges of a file closer
  // than this are fetched as one request (WMAP_REMOTE_GAP_BYTES): a round trip costs more than
  // the bytes between them.
  unsigned concurrency = 16;
  unsigned retries = 5;
  double stall_seconds = 30;
  uint64_t min_bytes_per_second = uint64_t{16} << 10;
  uint64_t gap_bytes = uint64_t{256} << 10;
  unsigned s3_list_page = 1000;        // WMAP_S3_LIST_PAGE: keys per ListObjectsV2 page (S3's maximum; tests use 1)
  uint64_t s3_list_max_keys = 100000;  // WMAP_S3_LIST_MAX_KEYS: a folder listing more objects is refused
  bool aws_imds = true;                // AWS_EC2_METADATA_DISABLED=true: no instance-metadata credentials
  // The environment's values (the variables above); a malformed number is kInvalidArgument
  // naming the variable.
  static RemoteOptions from_environment();
  // The fields by the names set() takes ("s3_endpoint", "concurrency", ...), for front ends.
  static std::vector<std::string> names();
  // Sets one field from its text, as the environment variable would be parsed; an unknown name or
  // a malformed value is kInvalidArgument naming it.
  void set(std::string_view name, std::string_view value);
};

// Remote storage as a FileSystem; local paths go to FileSystem::posix(). Thread-safe: any number
// of files read at once, each request on its calling thread's connections.
class RemoteFileSystem final : public FileSystem {
 public:
  explicit RemoteFileSystem(RemoteOptions options = RemoteOptions::from_environment());
  ~RemoteFileSystem() override;
  RemoteFileSystem(const RemoteFileSystem&) = delete;
  RemoteFileSystem& operator=(const RemoteFileSystem&) = delete;

  std::unique_ptr<RandomAccessFile> open(const std::filesystem::path& path, IoMode mode) const override;
  PathStatus status(const std::filesystem::path& path) const override;
  std::optional<std::vector<std::string>> list(const std::filesystem::path& dir) const override;
  FileSignature signature(const std::filesystem::path& path) const override;
  unsigned concurrency(const std::filesystem::path& path) const override;
  // The hub's LFS SHA-256 (X-Linked-Etag, from the probe); S3's x-amz-checksum-sha256 (a HEAD
  // with x-amz-checksum-mode: present when the object was uploaded with a SHA-256 checksum, not
  // for a multipart upload's composite one); none over plain HTTP.
  std::optional<PublishedDigest> published_sha256(const std::filesystem::path& path) const override;
  // A URL's user:password@ and query (a presigned URL's signature, an access token) are taken
  // into this object here; the path returned names the object everywhere else (messages, JSON,
  // saved catalogs) and reaches the same bytes through this file system (review F4).
  std::filesystem::path location(const std::filesystem::path& path) const override;

  const RemoteOptions& options() const;
  // Drops what is remembered about remote objects (size, identity, first bytes): the next open
  // or probe asks the server again.
  void forget() const;
  // Ends every transfer in flight (within a tenth of a second) and refuses new ones with
  // kCancelled, until clear_cancel(). Callable from any thread (a signal's watcher).
  void cancel() const;
  void clear_cancel() const;
  bool cancelled() const;

  struct Impl;

 private:
  friend class FileSystem;  // standard(): one that remembers nothing between calls
  RemoteFileSystem(RemoteOptions options, bool remember);
  std::shared_ptr<Impl> impl_;
};

// True for s3://, http://, https:// and hf:// paths.
bool is_remote_path(std::string_view path);
inline bool is_remote_path(const std::filesystem::path& path) {
  return is_remote_path(std::string_view(path.native()));
}

// `path` as messages show it: a URL without user:password@ and without its query; a local path
// as it is. Paths made by RemoteFileSystem::location() have neither; this is the backstop for
// text that did not come through it.
std::string display_path(const std::filesystem::path& path);

// What the process fetched so far from remote storage (all threads, every RemoteFileSystem).
struct RemoteCounters {
  uint64_t requests = 0;  // HTTP requests sent, retries included
  uint64_t retries = 0;   // of which repeats after a retryable failure
  uint64_t bytes = 0;     // body bytes received (wanted bytes plus the gaps read through)
};
RemoteCounters remote_counters();

}  // namespace wmap
WMAP_PUBLIC_END
