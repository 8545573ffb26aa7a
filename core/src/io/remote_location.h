#pragma once
// Where a remote path's bytes are and how a request for them is authorised: an s3://, http(s)://
// or hf:// path turned into the URL to GET and the credentials to send. Internal to the io stage.
//
// Secrets never travel as text that can be printed (review F4): a URL with user:password@ or a
// query is a SecretUrl, handed to libcurl only; a Location's one printable form is its `path`,
// which has neither.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "wmap/io/remote.h"

namespace wmap::remote {

// A URL that may carry credentials. No conversion to text but the one libcurl gets.
class SecretUrl {
 public:
  SecretUrl() = default;
  explicit SecretUrl(std::string url) : url_(std::move(url)) {}
  const char* for_curl() const { return url_.c_str(); }
  bool empty() const { return url_.empty(); }
  bool https() const { return url_.rfind("https://", 0) == 0; }
  bool operator==(const SecretUrl&) const = default;
  // For keying caches by the full location (two presigned URLs of one key are two versions).
  const std::string& cache_key() const { return url_; }

 private:
  std::string url_;
};

// How a request is authorised, and where that came from (named in 401/403 errors; never a secret:
// an access key id appears masked to its last four characters).
struct Auth {
  enum class Kind { kNone, kSigV4, kBearer };
  Kind kind = Kind::kNone;
  std::string key_id, secret, session_token, region;  // kSigV4
  std::string bearer;                                 // kBearer
  std::string source;  // "environment (AWS_ACCESS_KEY_ID=****WXYZ)", "profile 'p' in FILE", "--s3-no-sign", ...
  // Temporary credentials (web identity, container, instance metadata): when they end.
  std::optional<std::chrono::system_clock::time_point> expires;
};

// The credentials of one kind of location, looked up when first needed and again before
// temporary ones expire. Thread-safe.
class CredentialSource {
 public:
  virtual ~CredentialSource() = default;
  virtual std::shared_ptr<const Auth> current() const = 0;
};

// A fixed Auth (the hub's token, unsigned S3).
class FixedCredentials final : public CredentialSource {
 public:
  explicit FixedCredentials(Auth a) : auth_(std::make_shared<const Auth>(std::move(a))) {}
  std::shared_ptr<const Auth> current() const override { return auth_; }

 private:
  std::shared_ptr<const Auth> auth_;
};

// The user:password@ and query a URL was given with, taken out of its path (RemoteFileSystem::
// location) and put back only into what libcurl fetches.
struct UrlSecrets {
  std::string userinfo;  // "user:password" (percent-encoded as written)
  std::string query;     // without the '?'
};

struct Location {
  enum class Scheme { kHttp, kS3, kHf };
  Scheme scheme = Scheme::kHttp;
  std::string path;      // names the object in every message: no credentials, no query
  std::string bucket;    // s3
  std::string key;       // s3: the object key (no leading '/'); hf: the file inside the repository
  std::string repo;      // hf: ORG/MODEL, validated against the hub's grammar
  std::string revision;  // hf: as written (a branch, tag, refs/pr/N or a commit)
  SecretUrl url;         // what is fetched (hf: at `revision`; RemoteFileSystem pins it to a commit)
  const CredentialSource* auth = nullptr;
  bool https_only = false;  // https origin (or the hub over https): redirects may not leave https
};

// Parses a remote path with the secrets it was given with; nullopt when `path` is not one. Throws
// kInvalidArgument for a malformed one (no bucket, an hf:// repo id the hub would refuse), naming
// it.
std::optional<Location> parse_location(std::string_view path, const UrlSecrets& secrets, const RemoteOptions& options,
                                       const CredentialSource* s3, const CredentialSource* hf);
// The hub URL of `loc`'s file at `revision` (a branch, tag or commit).
std::string hf_resolve_url(const RemoteOptions& options, const Location& loc, std::string_view revision);

// The ListObjectsV2 request for one page of the objects directly under `prefix` in `bucket`.
std::string s3_list_url(const RemoteOptions& options, const Auth& s3, std::string_view bucket, std::string_view prefix,
                        std::string_view continuation_token, unsigned max_keys);
// AWS's host for a bucket, which depends on the region (the credentials').
std::string s3_object_url(const RemoteOptions& options, std::string_view region, std::string_view bucket,
                          std::string_view key);

// Splits `url` into what may be printed (no user:password@, no query) and its secrets.
std::pair<std::string, UrlSecrets> split_secrets(std::string_view url);
// A URL without user:password@ and without its query: what messages show.
std::string redacted(std::string_view url);

// An access key id as the AWS CLI shows it: all but the last four characters masked.
std::string masked_key_id(std::string_view id);

// RFC 3986 percent-encoding of everything but unreserved characters (and '/' when keep_slash):
// what SigV4's canonical request expects.
std::string uri_encode(std::string_view s, bool keep_slash);

// The hub's repository id grammar (huggingface_hub validate_repo_id): ORG/MODEL, each part of
// [A-Za-z0-9._-], not starting or ending with '-' or '.', no "--" or "..", at most 96 characters.
// Returns what is wrong, or empty.
std::string hf_repo_id_problem(std::string_view repo);

}  // namespace wmap::remote
