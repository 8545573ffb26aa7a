#include "remote_location.h"

#include <cstdlib>
#include <fstream>
#include <map>

#include "wmap/util/error.h"
#include "wmap/util/install_paths.h"

namespace wmap::remote {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

std::string home_file(const char* env, const char* rel) {
  if (auto v = env_value(env)) return *v;
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + rel : std::string();
}

// The key = value pairs of section `section` of an INI file (the AWS shared files); empty when
// the file or the section is absent.
std::map<std::string, std::string> ini_section(const std::string& file, const std::string& section) {
  std::map<std::string, std::string> out;
  std::ifstream in(file);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      inside = trim(std::string_view(t).substr(1, t.size() - 2)) == section;
      continue;
    }
    const auto eq = t.find('=');
    if (inside && eq != std::string::npos)
      out[trim(std::string_view(t).substr(0, eq))] = trim(std::string_view(t).substr(eq + 1));
  }
  return out;
}

std::string strip_slashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// AWS: virtual-hosted (https://BUCKET.s3.REGION.amazonaws.com), except for a bucket name with a
// dot, which the *.s3 certificate does not cover: path-style then, as the AWS SDKs do. A custom
// endpoint: path-style. No trailing '/'.
std::string s3_bucket_url(const RemoteOptions& o, const Auth& s3, std::string_view bucket) {
  if (!o.s3_endpoint.empty()) return strip_slashes(o.s3_endpoint) + "/" + std::string(bucket);
  if (bucket.find('.') != std::string_view::npos)
    return "https://s3." + s3.region + ".amazonaws.com/" + std::string(bucket);
  return "https://" + std::string(bucket) + ".s3." + s3.region + ".amazonaws.com";
}

std::string s3_object_url(const RemoteOptions& o, const Auth& s3, std::string_view bucket, std::string_view key) {
  return s3_bucket_url(o, s3, bucket) + "/" + uri_encode(key, true);
}

}  // namespace

std::string redacted(std::string_view url) {
  std::string out(url.substr(0, url.find('?')));
  const auto scheme = out.find("://");
  if (scheme == std::string::npos) return out;
  const auto at = out.find('@', scheme + 3), slash = out.find('/', scheme + 3);
  if (at != std::string::npos && (slash == std::string::npos || at < slash))
    out.replace(scheme + 3, at - scheme - 3, "***");
  return out;
}

std::string uri_encode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Auth resolve_s3_auth(const RemoteOptions& o) {
  Auth a;
  const std::string profile = o.aws_profile.empty() ? "default" : o.aws_profile;
  const std::string cred_file = home_file("AWS_SHARED_CREDENTIALS_FILE", "/.aws/credentials");
  const std::string config_file = home_file("AWS_CONFIG_FILE", "/.aws/config");
  auto config = ini_section(config_file, profile == "default" ? "default" : "profile " + profile);
  a.region = o.s3_region.empty() ? (config.count("region") ? config["region"] : "us-east-1") : o.s3_region;
  if (o.s3_no_sign) {
    a.source = "none: unsigned requests (--s3-no-sign)";
    return a;
  }
  auto id = env_value("AWS_ACCESS_KEY_ID"), secret = env_value("AWS_SECRET_ACCESS_KEY");
  if (id && secret && !id->empty()) {
    a.kind = Auth::Kind::kSigV4;
    a.key_id = *id;
    a.secret = *secret;
    a.session_token = env_value("AWS_SESSION_TOKEN").value_or("");
    a.source = "environment (AWS_ACCESS_KEY_ID=" + a.key_id + ")";
    return a;
  }
  for (const auto& [file, section] :
       {std::pair{cred_file, profile}, std::pair{config_file, profile == "default" ? profile : "profile " + profile}}) {
    auto s = ini_section(file, section);
    if (s.count("aws_access_key_id") && s.count("aws_secret_access_key")) {
      a.kind = Auth::Kind::kSigV4;
      a.key_id = s["aws_access_key_id"];
      a.secret = s["aws_secret_access_key"];
      a.session_token = s.count("aws_session_token") ? s["aws_session_token"] : "";
      a.source = "profile '" + profile + "' in " + file + " (aws_access_key_id=" + a.key_id + ")";
      return a;
    }
  }
  a.source = "none found (no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, no profile '" + profile + "' in " + cred_file +
             " or " + config_file + "): unsigned requests";
  return a;
}

Auth resolve_hf_auth(const RemoteOptions& o) {
  Auth a;
  if (!o.hf_token.empty()) {
    a.kind = Auth::Kind::kBearer;
    a.bearer = o.hf_token;
    a.source = "HF_TOKEN (a bearer token)";
  } else {
    a.source = "none (HF_TOKEN is not set)";
  }
  return a;
}

std::optional<Location> parse_location(std::string_view path, const RemoteOptions& o, const Auth& s3, const Auth& hf) {
  Location loc;
  loc.path = std::string(path);
  if (starts_with(path, "s3://")) {
    loc.scheme = Location::Scheme::kS3;
    const std::string_view rest = path.substr(5);
    const auto slash = rest.find('/');
    loc.bucket = std::string(rest.substr(0, slash));
    loc.key = slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash + 1));
    if (loc.bucket.empty())
      throw Error(ErrorCode::kInvalidArgument, loc.path + ": no bucket (expected s3://BUCKET/KEY)");
    loc.url = s3_object_url(o, s3, loc.bucket, loc.key);
    loc.auth = &s3;
    return loc;
  }
  if (starts_with(path, "http://") || starts_with(path, "https://")) {
    loc.url = loc.path;
    loc.path = redacted(loc.url);
    return loc;
  }
  if (starts_with(path, "hf://")) {
    loc.scheme = Location::Scheme::kHf;
    // hf://ORG/MODEL[@REV][/FILE...]
    const std::string_view rest = path.substr(5);
    const auto s1 = rest.find('/');
    const auto s2 = s1 == std::string_view::npos ? s1 : rest.find('/', s1 + 1);
    std::string repo(rest.substr(0, s2));
    if (s1 == std::string_view::npos || s1 == 0 || s1 + 1 >= repo.size()) {
      throw Error(ErrorCode::kInvalidArgument, loc.path + ": expected hf://ORG/MODEL[@REVISION][/FILE]");
    }
    std::string rev = "main";
    if (const auto at = repo.find('@'); at != std::string::npos) {
      rev = repo.substr(at + 1);
      repo.resize(at);
    }
    loc.key = s2 == std::string_view::npos ? std::string() : std::string(rest.substr(s2 + 1));
    loc.url = strip_slashes(o.hf_endpoint) + "/" + repo + "/resolve/" + uri_encode(rev, false) + "/" +
              uri_encode(loc.key, true);
    loc.auth = &hf;
    return loc;
  }
  return std::nullopt;
}

std::string s3_list_url(const RemoteOptions& o, const Auth& s3, std::string_view bucket, std::string_view prefix,
                        std::string_view token, unsigned max_keys) {
  // Parameters in SigV4's canonical (sorted) order, values encoded as SigV4 encodes them, so
  // the query libcurl signs is the query sent.
  std::string q = "?";
  if (!token.empty()) q += "continuation-token=" + uri_encode(token, false) + "&";
  q += "delimiter=%2F&list-type=2&max-keys=" + std::to_string(max_keys) + "&prefix=" + uri_encode(prefix, false);
  // Virtual-hosted: the bucket is the host and the path "/".
  const bool virtual_hosted = o.s3_endpoint.empty() && bucket.find('.') == std::string_view::npos;
  return s3_bucket_url(o, s3, bucket) + (virtual_hosted ? "/" : "") + q;
}

}  // namespace wmap::remote
