#include "remote_location.h"

#include "wmap/util/error.h"

namespace wmap::remote {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string strip_slashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// AWS: virtual-hosted (https://BUCKET.s3.REGION.amazonaws.com), except for a bucket name with a
// dot, which the *.s3 certificate does not cover: path-style then, as the AWS SDKs do. A custom
// endpoint: path-style. No trailing '/'.
std::string s3_bucket_url(const RemoteOptions& o, std::string_view region, std::string_view bucket) {
  if (!o.s3_endpoint.empty()) return strip_slashes(o.s3_endpoint) + "/" + std::string(bucket);
  if (bucket.find('.') != std::string_view::npos)
    return "https://s3." + std::string(region) + ".amazonaws.com/" + std::string(bucket);
  return "https://" + std::string(bucket) + ".s3." + std::string(region) + ".amazonaws.com";
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX sequences decoded (a revision written URL-encoded, "refs%2Fpr%2F1").
std::string percent_decoded(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool repo_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

}  // namespace

std::pair<std::string, UrlSecrets> split_secrets(std::string_view url) {
  UrlSecrets secrets;
  std::string clean(url);
  if (const auto q = clean.find('?'); q != std::string::npos) {
    secrets.query = clean.substr(q + 1);
    clean.resize(q);
  }
  if (const auto f = clean.find('#'); f != std::string::npos) clean.resize(f);  // never sent
  const auto scheme = clean.find("://");
  if (scheme != std::string::npos) {
    const auto at = clean.find('@', scheme + 3), slash = clean.find('/', scheme + 3);
    if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
      secrets.userinfo = clean.substr(scheme + 3, at - scheme - 3);
      clean.erase(scheme + 3, at - scheme - 2);
    }
  }
  return {clean, secrets};
}

std::string redacted(std::string_view url) {
  std::string out(url.substr(0, url.find('?')));
  const auto scheme = out.find("://");
  if (scheme == std::string::npos) return out;
  const auto at = out.find('@', scheme + 3), slash = out.find('/', scheme + 3);
  if (at != std::string::npos && (slash == std::string::npos || at < slash))
    out.replace(scheme + 3, at - scheme - 3, "***");
  return out;
}

std::string masked_key_id(std::string_view id) {
  if (id.size() <= 4) return std::string(id.size(), '*');
  return std::string(id.size() - 4, '*') + std::string(id.substr(id.size() - 4));
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

std::string hf_repo_id_problem(std::string_view repo) {
  // huggingface_hub utils/_validators.py validate_repo_id (REPO_ID_REGEX, "--"/".." refused, 96
  // characters at most); wmap's hf:// paths always name ORG/MODEL.
  if (repo.size() > 96) return "longer than 96 characters";
  const auto slash = repo.find('/');
  if (slash == std::string_view::npos || repo.find('/', slash + 1) != std::string_view::npos)
    return "not of the form ORG/MODEL";
  if (repo.find("--") != std::string_view::npos || repo.find("..") != std::string_view::npos)
    return "'--' and '..' are not allowed";
  for (std::string_view part : {repo.substr(0, slash), repo.substr(slash + 1)}) {
    if (part.empty()) return "an empty name";
    for (char c : part) {
      if (!repo_char(c)) return std::string("'") + c + "' is not allowed (letters, digits, '-', '_', '.')";
    }
    for (char c : {part.front(), part.back()}) {
      if (c == '-' || c == '.') return "a name may not start or end with '-' or '.'";
    }
  }
  if (repo.size() >= 4 && repo.substr(repo.size() - 4) == ".git") return "may not end with .git";
  return {};
}

std::string hf_resolve_url(const RemoteOptions& o, const Location& loc, std::string_view revision) {
  // The revision as one path segment (huggingface_hub: quote(revision, safe="")), so refs/pr/1
  // is refs%2Fpr%2F1 and never a path of its own.
  return strip_slashes(o.hf_endpoint) + "/" + loc.repo + "/resolve/" + uri_encode(revision, false) + "/" +
         uri_encode(loc.key, true);
}

std::string s3_object_url(const RemoteOptions& o, std::string_view region, std::string_view bucket,
                          std::string_view key) {
  return s3_bucket_url(o, region, bucket) + "/" + uri_encode(key, true);
}

std::optional<Location> parse_location(std::string_view path, const UrlSecrets& secrets, const RemoteOptions& o,
                                       const CredentialSource* s3, const CredentialSource* hf) {
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
    // The URL depends on the region, which the credentials decide: RemoteFileSystem sets it.
    loc.auth = s3;
    loc.https_only = o.s3_endpoint.empty() || starts_with(o.s3_endpoint, "https://");
    return loc;
  }
  if (starts_with(path, "http://") || starts_with(path, "https://")) {
    std::string url(path);
    if (!secrets.userinfo.empty()) url.insert(url.find("://") + 3, secrets.userinfo + "@");
    if (!secrets.query.empty()) url += "?" + secrets.query;
    loc.url = SecretUrl(std::move(url));
    loc.https_only = starts_with(path, "https://");
    return loc;
  }
  if (starts_with(path, "hf://")) {
    loc.scheme = Location::Scheme::kHf;
    // hf://ORG/MODEL[@REV][/FILE...]; REV may be refs/pr/N or refs/convert/NAME (two more
    // segments), or written URL-encoded.
    const std::string_view rest = path.substr(5);
    const auto s1 = rest.find('/');
    if (s1 == std::string_view::npos || s1 == 0 || s1 + 1 >= rest.size())
      throw Error(ErrorCode::kInvalidArgument, loc.path + ": expected hf://ORG/MODEL[@REVISION][/FILE]");
    auto s2 = rest.find('/', s1 + 1);
    std::string_view repo_rev = rest.substr(0, s2);
    loc.revision = "main";
    if (const auto at = repo_rev.find('@'); at != std::string_view::npos) {
      loc.repo = std::string(repo_rev.substr(0, at));
      std::string_view rev = repo_rev.substr(at + 1);
      std::string_view after = s2 == std::string_view::npos ? std::string_view() : rest.substr(s2 + 1);
      if (rev == "refs" && (starts_with(after, "pr/") || starts_with(after, "convert/"))) {
        const auto e1 = after.find('/');
        const auto e2 = after.find('/', e1 + 1);
        const std::string_view tail = after.substr(0, e2);
        loc.revision = "refs/" + std::string(tail);
        s2 = e2 == std::string_view::npos ? std::string_view::npos : s2 + 1 + e2;
      } else {
        loc.revision = percent_decoded(rev);
      }
      if (loc.revision.empty()) throw Error(ErrorCode::kInvalidArgument, loc.path + ": an empty revision after '@'");
    } else {
      loc.repo = std::string(repo_rev);
    }
    if (const std::string why = hf_repo_id_problem(loc.repo); !why.empty()) {
      throw Error(ErrorCode::kInvalidArgument,
                  loc.path + ": '" + loc.repo + "' is not a Hugging Face repository id (" + why + ")");
    }
    loc.key = s2 == std::string_view::npos ? std::string() : std::string(rest.substr(s2 + 1));
    for (std::string_view seg = loc.key; !seg.empty();) {
      const auto slash = seg.find('/');
      const std::string_view part = seg.substr(0, slash);
      if (part == ".." || part == ".")
        throw Error(ErrorCode::kInvalidArgument,
                    loc.path + ": a file path inside a repository may not hold '" + std::string(part) + "'");
      seg = slash == std::string_view::npos ? std::string_view() : seg.substr(slash + 1);
    }
    loc.url = SecretUrl(hf_resolve_url(o, loc, loc.revision));
    loc.auth = hf;
    loc.https_only = starts_with(o.hf_endpoint, "https://");
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
  return s3_bucket_url(o, s3.region, bucket) + (virtual_hosted ? "/" : "") + q;
}

}  // namespace wmap::remote
