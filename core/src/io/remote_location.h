#pragma once
// Where a remote path's bytes are and how a request for them is authorised: an s3://, http(s)://
// or hf:// path turned into the URL to GET and the credentials to send (resolved once per
// RemoteOptions). Internal to the io stage.

#include <optional>
#include <string>
#include <string_view>

#include "wmap/io/remote.h"

namespace wmap::remote {

// How a request is authorised, and where that came from (named in 401/403 errors; never a secret).
struct Auth {
  enum class Kind { kNone, kSigV4, kBearer };
  Kind kind = Kind::kNone;
  std::string key_id, secret, session_token, region;  // kSigV4
  std::string bearer;                                 // kBearer
  std::string source;  // "environment (AWS_ACCESS_KEY_ID=AKIA...)", "profile 'p' in FILE", "--s3-no-sign", ...
};

struct Location {
  enum class Scheme { kHttp, kS3, kHf };
  Scheme scheme = Scheme::kHttp;
  std::string path;    // as the user wrote it: names the object in every message
  std::string bucket;  // s3
  std::string key;     // s3: the object key (no leading '/'); hf: the file inside the repository
  std::string url;     // what is fetched
  const Auth* auth = nullptr;
};

// The S3 credentials for `options`: --s3-no-sign, else AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY
// (+AWS_SESSION_TOKEN), else the profile (AWS_PROFILE or "default") in the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials) or config file (AWS_CONFIG_FILE or
// ~/.aws/config), else unsigned requests. The region: options.s3_region, else the profile's, else
// us-east-1.
Auth resolve_s3_auth(const RemoteOptions& options);
Auth resolve_hf_auth(const RemoteOptions& options);

// Parses a remote path; nullopt when `path` is not one. Throws kInvalidArgument for a malformed
// one (no bucket, an hf:// path without ORG/MODEL), naming it.
std::optional<Location> parse_location(std::string_view path, const RemoteOptions& options, const Auth& s3,
                                       const Auth& hf);

// The ListObjectsV2 request for one page of the objects directly under `prefix` in `bucket`.
std::string s3_list_url(const RemoteOptions& options, const Auth& s3, std::string_view bucket, std::string_view prefix,
                        std::string_view continuation_token, unsigned max_keys);

// A URL without user:password@ and without its query: what messages show.
std::string redacted(std::string_view url);

// RFC 3986 percent-encoding of everything but unreserved characters (and '/' when keep_slash):
// what SigV4's canonical request expects.
std::string uri_encode(std::string_view s, bool keep_slash);

}  // namespace wmap::remote
