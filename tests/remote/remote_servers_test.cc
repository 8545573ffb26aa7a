// Self-tests of the remote-test servers (remote_servers.h), through the curl CLI only: the
// servers must behave as the remote-source tests assume before those tests can mean anything.

#include "remote/remote_servers.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"

namespace wmap::test {
namespace {

// 4000 bytes, no two aligned 4-byte words alike, so a wrong range cannot match by chance.
std::string pattern_bytes(size_t n = 4000) {
  std::string out;
  for (uint32_t i = 0; out.size() < n; ++i) out.append(reinterpret_cast<const char*>(&i), 4);
  out.resize(n);
  return out;
}

struct Curl {
  int exit_code = -1;
  int status = 0;
  std::string body, headers, err;
  double start_transfer_s = 0;
};

// `curl ARGS URL`, body and response headers captured apart from the status line curl writes.
Curl curl(const std::string& args, const std::string& url) {
  TempDir tmp;
  const auto r = run_command("curl -sS -o " + shell_quote((tmp / "body").string()) + " -D " +
                             shell_quote((tmp / "headers").string()) + " -w '%{http_code} %{time_starttransfer}' " +
                             args + " " + shell_quote(url));
  Curl c;
  c.exit_code = r.exit_code;
  c.err = r.err;
  std::sscanf(r.out.c_str(), "%d %lf", &c.status, &c.start_transfer_s);
  if (std::filesystem::exists(tmp / "body")) c.body = read_file(tmp / "body");
  if (std::filesystem::exists(tmp / "headers")) c.headers = read_file(tmp / "headers");
  return c;
}

// The value of response header `name` (case-insensitive), "" when absent.
std::string header(const Curl& c, const std::string& name) {
  std::smatch m;
  if (std::regex_search(c.headers, m, std::regex("(^|\\n)" + name + ":\\s*([^\\r\\n]*)", std::regex::icase)))
    return m[2];
  return "";
}

std::vector<std::string> xml_all(const std::string& xml, const std::string& tag) {
  std::vector<std::string> out;
  const std::regex re("<" + tag + ">([^<]*)</" + tag + ">");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

#define SKIP_WITHOUT(what)                 \
  do {                                     \
    const std::string why = what;          \
    if (!why.empty()) GTEST_SKIP() << why; \
  } while (0)

TEST(RemoteServers, NginxServesRangesAndHonoursIfMatch) {
  SKIP_WITHOUT(nginx_missing());
  TempDir root;
  const std::string bytes = pattern_bytes();
  write_file(root / "w.bin", bytes);
  NginxServer nginx(root.path());
  const std::string url = nginx.url() + "/w.bin";

  const Curl ranged = curl("-r 1000-1999", url);
  ASSERT_EQ(ranged.exit_code, 0) << ranged.err;
  EXPECT_EQ(ranged.status, 206);
  EXPECT_EQ(ranged.body, bytes.substr(1000, 1000));
  EXPECT_EQ(header(ranged, "Content-Range"), "bytes 1000-1999/4000");
  const std::string etag = header(ranged, "ETag");
  ASSERT_FALSE(etag.empty());

  EXPECT_EQ(curl("-r 0-9 -H 'If-Match: \"not-the-etag\"'", url).status, 412);
  const Curl matched = curl("-r 0-9 -H " + shell_quote("If-Match: " + etag), url);
  EXPECT_EQ(matched.status, 206);
  EXPECT_EQ(matched.body, bytes.substr(0, 10));
  EXPECT_EQ(curl("", nginx.url() + "/").status, 403);  // autoindex off: no listing
  EXPECT_EQ(nginx.access_log_lines().size(), 4u);
}

class RemoteServersS3 : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT(s3_server_missing());
    s3_ = std::make_unique<S3Server>(data_.path());
    s3_->create_bucket("bkt");
  }
  std::string object_url(const std::string& key) const { return s3_->endpoint() + S3Server::object_path("bkt", key); }

  TempDir data_, files_;
  std::unique_ptr<S3Server> s3_;
};

TEST_F(RemoteServersS3, SignedPutThenSignedRangedGet) {
  const std::string bytes = pattern_bytes();
  write_file(files_ / "f", bytes);
  const std::string key = "dir/model-00001 of+2.safetensors";  // a space and '+' in the canonical path
  s3_->put_file("bkt", key, files_ / "f");
  const Curl got = curl("-r 100-355 " + S3Server::curl_sign_args(), object_url(key));
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.status, 206) << got.body;
  EXPECT_EQ(got.body, bytes.substr(100, 256));
  EXPECT_FALSE(header(got, "ETag").empty());
}

TEST_F(RemoteServersS3, RefusesUnsignedAndWrongSecret) {
  write_file(files_ / "f", "secret bytes");
  s3_->put_file("bkt", "k", files_ / "f");
  const Curl unsigned_get = curl("", object_url("k"));
  EXPECT_EQ(unsigned_get.status, 403);
  EXPECT_NE(unsigned_get.body.find("AccessDenied"), std::string::npos) << unsigned_get.body;
  const Curl wrong = curl(S3Server::curl_sign_args("not-the-secret"), object_url("k"));
  EXPECT_EQ(wrong.status, 403);
  EXPECT_NE(wrong.body.find("SignatureDoesNotMatch"), std::string::npos) << wrong.body;
  EXPECT_EQ(curl(S3Server::curl_sign_args(), object_url("k")).body, "secret bytes");
}

TEST_F(RemoteServersS3, AnonymousAccessWhenAllowed) {
  TempDir data;
  S3Server open_s3(data.path(), /*allow_anonymous=*/true);
  open_s3.create_bucket("pub");
  write_file(files_ / "f", "public");
  open_s3.put_file("pub", "k", files_ / "f");
  EXPECT_EQ(curl("", open_s3.endpoint() + "/pub/k").body, "public");
  EXPECT_EQ(curl(S3Server::curl_sign_args("wrong"), open_s3.endpoint() + "/pub/k").status, 403);
}

TEST_F(RemoteServersS3, ListObjectsV2PaginatesWithContinuationTokens) {
  std::filesystem::create_directories(files_ / "ckpt/sub");
  for (const char* name : {"a.json", "b.safetensors", "c.safetensors", "sub/d.bin", "sub/e.bin"})
    write_file(files_ / "ckpt" / name, name);
  s3_->put_dir("bkt", "m/", files_ / "ckpt");
  write_file(files_ / "other", "x");
  s3_->put_file("bkt", "other", files_ / "other");  // outside the prefix

  std::vector<std::string> keys;
  std::string token;
  int pages = 0;
  do {
    // curl 7.88 signs the query as written: parameters sorted and encoded, as SigV4 canonicalizes.
    std::string query = "?";
    if (!token.empty()) query += "continuation-token=" + uri_encode(token) + "&";
    query += "list-type=2&max-keys=2&prefix=" + uri_encode("m/");
    const Curl page = curl(S3Server::curl_sign_args(), s3_->endpoint() + "/bkt" + query);
    ASSERT_EQ(page.status, 200) << page.body;
    for (const auto& k : xml_all(page.body, "Key")) keys.push_back(k);
    const auto next = xml_all(page.body, "NextContinuationToken");
    const bool truncated = xml_all(page.body, "IsTruncated") == std::vector<std::string>{"true"};
    ASSERT_EQ(truncated, !next.empty()) << page.body;
    token = truncated ? next[0] : "";
    ASSERT_LT(++pages, 10);
  } while (!token.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"m/a.json", "m/b.safetensors", "m/c.safetensors", "m/sub/d.bin", "m/sub/e.bin"}));
}

TEST_F(RemoteServersS3, SigV4ThroughTheProxyStillVerifies) {
  const std::string bytes = pattern_bytes();
  write_file(files_ / "f", bytes);
  s3_->put_file("bkt", "x/w.bin", files_ / "f");
  FaultProxy proxy(s3_->endpoint());
  const std::string url = proxy.url() + S3Server::object_path("bkt", "x/w.bin");
  const Curl got = curl("-r 8-15 " + S3Server::curl_sign_args(), url);
  EXPECT_EQ(got.status, 206) << got.body;
  EXPECT_EQ(got.body, bytes.substr(8, 8));
  EXPECT_EQ(curl(S3Server::curl_sign_args("wrong"), url).status, 403);  // still checked behind the proxy
  const auto log = proxy.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0]["headers"]["range"], "bytes=8-15");
  EXPECT_EQ(log[0]["headers"]["host"], "127.0.0.1:" + std::to_string(proxy.port()));
  EXPECT_TRUE(log[0]["headers"].contains("authorization"));
}

class RemoteServersProxy : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT(nginx_missing());
    write_file(root_ / "w.bin", bytes_);
    nginx_ = std::make_unique<NginxServer>(root_.path());
    proxy_ = std::make_unique<FaultProxy>(nginx_->url());
    url_ = proxy_->url() + "/w.bin";
  }
  const std::string bytes_ = pattern_bytes();
  TempDir root_;
  std::unique_ptr<NginxServer> nginx_;
  std::unique_ptr<FaultProxy> proxy_;
  std::string url_;
};

TEST_F(RemoteServersProxy, ForwardsAndLogsRequestHeaders) {
  const Curl plain = curl("-r 0-99", url_);
  EXPECT_EQ(plain.status, 206);
  EXPECT_EQ(plain.body, bytes_.substr(0, 100));
  const Curl with_if_match = curl("-H 'If-Match: \"x\"' -H 'Authorization: Bearer t'", url_);
  EXPECT_EQ(with_if_match.status, 412);  // nginx's answer, passed through
  const auto log = proxy_->log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0]["method"], "GET");
  EXPECT_EQ(log[0]["path"], "/w.bin");
  EXPECT_EQ(log[0]["headers"]["range"], "bytes=0-99");
  EXPECT_FALSE(log[0]["headers"].contains("authorization"));
  EXPECT_TRUE(log[0]["fault"].is_null());
  EXPECT_EQ(log[0]["status"], 206);
  EXPECT_EQ(log[0]["body_bytes"], 100);
  EXPECT_EQ(log[1]["headers"]["if-match"], "\"x\"");
  EXPECT_EQ(log[1]["headers"]["authorization"], "Bearer t");
  proxy_->clear_log();
  EXPECT_TRUE(proxy_->log().empty());
}

TEST_F(RemoteServersProxy, KeepsClientConnectionsAlive) {
  // Two URLs in one curl: the second reuses the connection (num_connects 0).
  const auto r = run_command("curl -sS -o /dev/null -o /dev/null -w '%{num_connects} ' " + shell_quote(url_) + " " +
                             shell_quote(url_));
  EXPECT_EQ(r.out, "1 0 ") << r.err;
}

TEST_F(RemoteServersProxy, StatusAndRetryAfter) {
  proxy_->set_rules(R"([{"path_contains": "w.bin", "action": "status", "status": 503, "body": "busy"}])");
  const Curl busy = curl("", url_);
  EXPECT_EQ(busy.status, 503);
  EXPECT_EQ(busy.body, "busy");
  proxy_->set_rules(R"({"rules": [{"action": "retry_after", "seconds": 7}]})");
  const Curl slow = curl("", url_);
  EXPECT_EQ(slow.status, 429);
  EXPECT_EQ(header(slow, "Retry-After"), "7");
  EXPECT_EQ(nginx_->access_log_lines().size(), 0u);  // neither reached upstream
  const auto log = proxy_->log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0]["fault"], "status");
  EXPECT_EQ(log[1]["fault"], "retry_after");
  EXPECT_EQ(log[1]["status"], 429);
}

TEST_F(RemoteServersProxy, ResetMidBodyIsAReceiveError) {
  proxy_->set_rules(R"([{"action": "reset_after", "bytes": 1000}])");
  const Curl c = curl("", url_);
  EXPECT_EQ(c.exit_code, 56) << c.err;  // CURLE_RECV_ERROR: connection reset
  EXPECT_EQ(c.status, 200);
  EXPECT_EQ(c.body, bytes_.substr(0, 1000));
  EXPECT_EQ(proxy_->log().at(0)["body_bytes"], 1000);
}

TEST_F(RemoteServersProxy, ShortBodyIsAPartialTransfer) {
  proxy_->set_rules(R"([{"action": "short_body", "bytes": 10, "range_present": true}])");
  const Curl c = curl("-r 0-99", url_);
  EXPECT_EQ(c.exit_code, 18) << c.err;  // CURLE_PARTIAL_FILE
  EXPECT_EQ(c.body, bytes_.substr(0, 10));
  const Curl whole = curl("", url_);  // no Range: the rule does not match
  EXPECT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(whole.body, bytes_);
}

TEST_F(RemoteServersProxy, DelayFirstByte) {
  proxy_->set_rules(R"([{"action": "delay_first_byte", "seconds": 0.6, "method": "GET"}])");
  const Curl c = curl("", url_);
  EXPECT_EQ(c.body, bytes_);
  EXPECT_GE(c.start_transfer_s, 0.55);
  EXPECT_LT(curl("-I", url_).start_transfer_s, 0.5);  // HEAD does not match
}

TEST_F(RemoteServersProxy, ReplaceAndDropEtag) {
  const std::string real = header(curl("", url_), "ETag");
  ASSERT_FALSE(real.empty());
  proxy_->set_rules(R"([{"action": "replace_etag", "etag": "\"changed\""}])");
  EXPECT_EQ(header(curl("", url_), "ETag"), "\"changed\"");
  proxy_->set_rules(R"([{"action": "drop_header", "header": "etag"}])");
  const Curl dropped = curl("", url_);
  EXPECT_EQ(header(dropped, "ETag"), "");
  EXPECT_EQ(dropped.body, bytes_);
}

TEST_F(RemoteServersProxy, NthLimitsTheFaultToTheFirstRequests) {
  proxy_->set_rules(R"([{"action": "status", "status": 500, "nth": 2}, {"action": "replace_etag", "etag": "\"e\""}])");
  EXPECT_EQ(curl("", url_).status, 500);
  EXPECT_EQ(curl("", url_).status, 500);
  const Curl third = curl("", url_);  // the first rule is spent: the next one applies
  EXPECT_EQ(third.status, 200);
  EXPECT_EQ(header(third, "ETag"), "\"e\"");
  // New rules restart the count.
  proxy_->set_rules(R"([{"action": "status", "status": 500, "nth": 1}])");
  EXPECT_EQ(curl("", url_).status, 500);
  EXPECT_EQ(curl("", url_).status, 200);
}

// pgrep -f's exit code for processes whose command line contains `path`. "[/]..." keeps the
// pattern from matching the shell that runs pgrep, whose command line holds the pattern itself.
int pgrep(const std::string& path) { return run_command("pgrep -f " + shell_quote("[/]" + path.substr(1))).exit_code; }

TEST(RemoteServers, BadStartIsAClearErrorAndNoProcessOutlivesItsObject) {
  SKIP_WITHOUT(nginx_missing());
  try {
    FaultProxy bad("http://example.com:80");  // the proxy refuses anything but 127.0.0.1
    FAIL() << "started";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("upstream must be http://127.0.0.1"), std::string::npos) << e.what();
  }

  std::vector<pid_t> pids;
  std::string marker;
  {
    TempDir root;
    NginxServer nginx(root.path());
    FaultProxy proxy(nginx.url());
    pids = {nginx.pid(), proxy.pid()};
    marker = nginx.work_dir().string();
    TempDir data;
    std::unique_ptr<S3Server> s3;
    if (s3_server_missing().empty()) {
      s3 = std::make_unique<S3Server>(data.path());
      pids.push_back(s3->pid());
    }
    for (pid_t p : pids) EXPECT_EQ(::kill(p, 0), 0);
    EXPECT_EQ(pgrep(marker), 0);
  }
  for (pid_t p : pids) {
    EXPECT_EQ(::kill(p, 0), -1);
    EXPECT_EQ(errno, ESRCH);
  }
  EXPECT_EQ(pgrep(marker), 1);  // 1: nothing matched
}

}  // namespace
}  // namespace wmap::test
