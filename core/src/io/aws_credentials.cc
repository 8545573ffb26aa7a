#include "aws_credentials.h"

#include <simdjson.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "wmap/util/error.h"
#include "wmap/util/install_paths.h"
#include "logger.h"

namespace wmap::remote {
namespace {

using SysClock = std::chrono::system_clock;

// Refreshed this long before they expire (botocore: 15 min advisory, 10 mandatory; STS and the
// metadata services hand out credentials for an hour or more).
constexpr auto kRefreshMargin = std::chrono::minutes(5);

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
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

std::string read_small_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, path + ": cannot read the " + std::string(what));
  std::ostringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  if (text.size() > (uint64_t{1} << 20))
    throw Error(ErrorCode::kMalformedInput, path + ": the " + std::string(what) + " is over 1 MiB");
  return trim(text);
}

// "2026-12-02T16:00:00Z" (or with fractional seconds / +00:00), as STS and the metadata services
// write it.
std::optional<SysClock::time_point> parse_iso8601(std::string_view s) {
  std::tm tm{};
  int y, mo, d, h, mi, se;
  if (std::sscanf(std::string(s).c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &se) != 6)
    return std::nullopt;
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = se;
  const time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return SysClock::from_time_t(t);
}

// <name>text</name> out of an XML answer (STS's, a small document).
std::string xml_tag(const std::string& body, const std::string& name) {
  const std::string open = "<" + name + ">", close = "</" + name + ">";
  const auto b = body.find(open);
  const auto e = b == std::string::npos ? b : body.find(close, b);
  return e == std::string::npos ? std::string() : body.substr(b + open.size(), e - b - open.size());
}

Auth sigv4(std::string key_id, std::string secret, std::string token, const std::string& region, std::string source) {
  Auth a;
  a.kind = Auth::Kind::kSigV4;
  a.key_id = std::move(key_id);
  a.secret = std::move(secret);
  a.session_token = std::move(token);
  a.region = region;
  a.source = std::move(source) + " (access key " + masked_key_id(a.key_id) + ")";  // never the whole id
  return a;
}

// The JSON both metadata services answer: AccessKeyId, SecretAccessKey, Token, Expiration.
Auth from_credentials_json(const std::string& body, const std::string& region, const std::string& source) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body).get(doc) != simdjson::SUCCESS)
    throw Error(ErrorCode::kMalformedInput, source + ": the credentials answer is not JSON");
  auto field = [&](const char* name) -> std::string {
    std::string_view v;
    if (doc[name].get_string().get(v) != simdjson::SUCCESS) return {};
    return std::string(v);
  };
  const std::string id = field("AccessKeyId"), secret = field("SecretAccessKey");
  if (id.empty() || secret.empty())
    throw Error(ErrorCode::kMalformedInput, source + ": the credentials answer has no AccessKeyId/SecretAccessKey" +
                                                (field("Code").empty() ? "" : " (Code " + field("Code") + ")"));
  Auth a = sigv4(id, secret, field("Token"), region, source);
  a.expires = parse_iso8601(field("Expiration"));
  return a;
}

std::string answer_problem(const HttpAnswer& r) {
  if (r.status == 0) return r.error;
  std::string body = r.body.substr(0, 200);
  for (char& c : body)
    if (c == '\n' || c == '\r') c = ' ';
  return "HTTP " + std::to_string(r.status) + (body.empty() ? "" : ": " + body);
}

}  // namespace

std::string S3Credentials::region() const {
  if (!options_.s3_region.empty()) return options_.s3_region;
  const std::string profile = options_.aws_profile.empty() ? "default" : options_.aws_profile;
  auto config = ini_section(home_file("AWS_CONFIG_FILE", "/.aws/config"),
                            profile == "default" ? "default" : "profile " + profile);
  return config.count("region") ? config["region"] : "us-east-1";
}

std::shared_ptr<const Auth> S3Credentials::current() const {
  std::lock_guard lock(mu_);
  const auto now = SysClock::now();
  if (auth_ && (!auth_->expires || now + kRefreshMargin < *auth_->expires)) return auth_;
  try {
    auth_ = resolve();
  } catch (const Error& e) {
    // Temporary credentials that cannot be refreshed are used while they last.
    if (!auth_ || (auth_->expires && now >= *auth_->expires)) throw;
    log().warn("S3 credentials: refreshing {} failed ({}); using them until they expire", auth_->source, e.what());
  }
  return auth_;
}

std::shared_ptr<const Auth> S3Credentials::resolve() const {
  const RemoteOptions& o = options_;
  const std::string reg = region();
  if (o.s3_no_sign) {
    Auth a;
    a.region = reg;
    a.source = "none: unsigned requests (--s3-no-sign)";
    return std::make_shared<const Auth>(std::move(a));
  }
  // 2. The environment's keys.
  auto id = env_value("AWS_ACCESS_KEY_ID"), secret = env_value("AWS_SECRET_ACCESS_KEY");
  if (id && secret && !id->empty()) {
    return std::make_shared<const Auth>(
        sigv4(*id, *secret, env_value("AWS_SESSION_TOKEN").value_or(""), reg, "environment AWS_ACCESS_KEY_ID"));
  }
  const std::string profile = o.aws_profile.empty() ? "default" : o.aws_profile;
  const std::string cred_file = home_file("AWS_SHARED_CREDENTIALS_FILE", "/.aws/credentials");
  const std::string config_file = home_file("AWS_CONFIG_FILE", "/.aws/config");
  auto config = ini_section(config_file, profile == "default" ? "default" : "profile " + profile);
  // 3. Web identity: the environment's, else the profile's.
  std::string token_file = env_value("AWS_WEB_IDENTITY_TOKEN_FILE").value_or("");
  std::string role = env_value("AWS_ROLE_ARN").value_or("");
  std::string where = "AWS_WEB_IDENTITY_TOKEN_FILE";
  if (token_file.empty() && config.count("web_identity_token_file") && config.count("role_arn")) {
    token_file = config["web_identity_token_file"];
    role = config["role_arn"];
    where = "profile '" + profile + "' in " + config_file;
  }
  if (!token_file.empty() && !role.empty()) {
    const std::string token = read_small_file(token_file, "web identity token");
    std::string session = env_value("AWS_ROLE_SESSION_NAME").value_or("");
    if (session.empty()) session = config.count("role_session_name") ? config["role_session_name"] : "wmap";
    std::string sts = env_value("AWS_ENDPOINT_URL_STS").value_or("");
    if (sts.empty()) sts = "https://sts." + reg + ".amazonaws.com";
    while (!sts.empty() && sts.back() == '/') sts.pop_back();
    // An unsigned POST of the form, as botocore sends it (the token is a credential: in the body,
    // never in a URL).
    HttpCall call;
    call.method = "POST";
    call.url = sts + "/";
    call.headers = {"Content-Type: application/x-www-form-urlencoded; charset=utf-8"};
    call.body = "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + uri_encode(role, false) +
                "&RoleSessionName=" + uri_encode(session, false) + "&WebIdentityToken=" + uri_encode(token, false);
    call.timeout_seconds = 10;
    const std::string source = "web identity (" + where + ", role " + role + ", STS " + redacted(sts) + ")";
    HttpAnswer r;
    for (int attempt = 0; attempt < 3; ++attempt) {  // STS throttles; a 5xx is worth another try
      r = http_call(call, ctx_);
      if (r.status == 200 || (r.status >= 400 && r.status < 500)) break;
    }
    if (r.status != 200) {
      std::string detail = xml_tag(r.body, "Code");
      if (!xml_tag(r.body, "Message").empty()) detail += ": " + xml_tag(r.body, "Message");
      throw Error(ErrorCode::kIo,
                  "S3 credentials: " + source + ": AssumeRoleWithWebIdentity failed: " +
                      (detail.empty() ? answer_problem(r) : "HTTP " + std::to_string(r.status) + " " + detail));
    }
    const std::string creds = xml_tag(r.body, "Credentials");
    Auth a = sigv4(xml_tag(creds, "AccessKeyId"), xml_tag(creds, "SecretAccessKey"), xml_tag(creds, "SessionToken"),
                   reg, source);
    if (a.key_id.empty() || a.secret.empty())
      throw Error(ErrorCode::kMalformedInput, "S3 credentials: " + source + ": the STS answer has no Credentials");
    a.expires = parse_iso8601(xml_tag(creds, "Expiration"));
    return std::make_shared<const Auth>(std::move(a));
  }
  // 4. The profile's static keys.
  for (const auto& [file, section] :
       {std::pair{cred_file, profile}, std::pair{config_file, profile == "default" ? profile : "profile " + profile}}) {
    auto s = ini_section(file, section);
    if (s.count("aws_access_key_id") && s.count("aws_secret_access_key")) {
      return std::make_shared<const Auth>(sigv4(s["aws_access_key_id"], s["aws_secret_access_key"],
                                                s.count("aws_session_token") ? s["aws_session_token"] : "", reg,
                                                "profile '" + profile + "' in " + file));
    }
  }
  // 5. The container endpoint.
  const std::string relative = env_value("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").value_or("");
  const std::string full = env_value("AWS_CONTAINER_CREDENTIALS_FULL_URI").value_or("");
  if (!relative.empty() || !full.empty()) {
    HttpCall call;
    call.url = relative.empty() ? full : "http://169.254.170.2" + relative;
    std::string header;
    if (auto f = env_value("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"); f && !f->empty()) {
      header = read_small_file(*f, "container authorization token");
    } else {
      header = env_value("AWS_CONTAINER_AUTHORIZATION_TOKEN").value_or("");
    }
    if (!header.empty()) call.headers.push_back("Authorization: " + header);
    call.timeout_seconds = 5;
    const std::string source = "container credentials (" + redacted(call.url) + ")";
    const HttpAnswer r = http_call(call, ctx_);
    if (r.status != 200) throw Error(ErrorCode::kIo, "S3 credentials: " + source + ": " + answer_problem(r));
    return std::make_shared<const Auth>(from_credentials_json(r.body, reg, source));
  }
  // 6. IMDSv2.
  if (o.aws_imds) {
    std::string endpoint = env_value("AWS_EC2_METADATA_SERVICE_ENDPOINT").value_or("http://169.254.169.254");
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    HttpCall token_call;
    token_call.method = "PUT";
    token_call.url = endpoint + "/latest/api/token";
    token_call.headers = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"};
    token_call.timeout_seconds = 1;
    const HttpAnswer t = http_call(token_call, ctx_);
    if (t.status == 200 && !t.body.empty()) {
      const std::string source = "instance metadata (" + endpoint + ")";
      HttpCall list;
      list.url = endpoint + "/latest/meta-data/iam/security-credentials/";
      list.headers = {"X-aws-ec2-metadata-token: " + trim(t.body)};
      list.timeout_seconds = 1;
      const HttpAnswer roles = http_call(list, ctx_);
      const std::string role_name = trim(roles.body.substr(0, roles.body.find('\n')));
      if (roles.status != 200 || role_name.empty())
        throw Error(ErrorCode::kIo, "S3 credentials: " + source + ": no instance role (" + answer_problem(roles) + ")");
      HttpCall get = list;
      get.url += uri_encode(role_name, false);
      const HttpAnswer r = http_call(get, ctx_);
      if (r.status != 200) throw Error(ErrorCode::kIo, "S3 credentials: " + source + ": " + answer_problem(r));
      return std::make_shared<const Auth>(from_credentials_json(r.body, reg, source + ", role " + role_name));
    }
    log().debug("S3 credentials: no instance metadata service at {} ({})", endpoint, answer_problem(t));
  }
  Auth a;
  a.region = reg;
  a.source = "none found (no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, no web identity, no profile '" + profile +
             "' in " + cred_file + " or " + config_file + ", no container or instance credentials): unsigned requests";
  return std::make_shared<const Auth>(std::move(a));
}

}  // namespace wmap::remote
