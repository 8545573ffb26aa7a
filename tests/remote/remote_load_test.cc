// Loads from remote checkpoints, served by real servers on 127.0.0.1 (remote_servers.h): every
// family bit for bit from https:// and s3://, each fault the remote client must survive or refuse,
// identity (If-Match, ETags in saved catalogs), credentials and the hub's token.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "remote/remote_servers.h"
#include "test_util.h"
#include "wmap/io/file_io.h"
#include "wmap/io/remote.h"
#include "wmap/util/error.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;

// One layout per family, at TP2 (EP2 where the family has experts): a subset is enough per
// family here; tests/plugins/ covers every layout from local files.
struct FamilyCase {
  const char* family;
  const char* synth_args;
  const char* layout;
  uint32_t rank;
};
constexpr FamilyCase kFamilies[] = {
    {"llama", "", "", 1},
    {"mistral", "", "", 0},
    {"qwen2", "", "", 1},
    {"qwen3", "", "", 0},
    {"qwen3_moe", "", "--ep-size 2", 1},
    {"mixtral", "", "--ep-size 2", 0},
    {"deepseek_v3", "--fp8", "--ep-size 2", 1},
    {"kimi_k2", "", "", 0},
    {"deepseek_v32", "", "", 1},
    {"glm4_moe", "", "--ep-size 2", 1},
    {"gpt_oss", "", "--target vllm --ep-size 2", 1},
    {"llama4", "", "--target vllm", 1},
    {"llama4_text", "", "", 0},
    {"phi3", "", "", 1},
    {"qwen3_next", "", "", 1},
};

#define SKIP_WITHOUT(what) \
  if (const std::string why = what(); !why.empty()) GTEST_SKIP() << why

// Every family's tiny checkpoint in one folder (ROOT/FAMILY), written once for the suite.
class RemoteFamilies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new TempDir();
    for (const auto& c : kFamilies) synth_checkpoint(root_->path(), c.family, c.family, c.synth_args);
  }
  static void TearDownTestSuite() {
    delete root_;
    root_ = nullptr;
  }
  static fs::path local(const FamilyCase& c) { return root_->path() / c.family; }
  static TempDir* root_;
};
TempDir* RemoteFamilies::root_ = nullptr;

TEST_F(RemoteFamilies, EveryFamilyLoadsBitExactOverHttps) {
  SKIP_WITHOUT(nginx_missing);
  NginxServer https(root_->path(), /*tls=*/true);
  ScopedEnv env({{"WMAP_CA_BUNDLE", https.cert_file().string()}});
  for (const auto& c : kFamilies) {
    SCOPED_TRACE(c.family);
    expect_rank_matches(local(c), 2, c.rank, c.layout, "", https.url() + "/" + c.family + "/");
  }
}

TEST_F(RemoteFamilies, HttpsRefusesAnUntrustedCertificate) {
  SKIP_WITHOUT(nginx_missing);
  NginxServer https(root_->path(), /*tls=*/true);
  ScopedEnv env({{"WMAP_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"}, {"WMAP_REMOTE_RETRIES", "0"}});
  const auto r = run_wmap("inspect " + shell_quote(https.url() + "/llama/"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(https.url() + "/llama/"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("certificate"), std::string::npos) << r.err;
}

TEST_F(RemoteFamilies, EveryFamilyLoadsBitExactOverS3) {
  SKIP_WITHOUT(s3_server_missing);
  TempDir data;
  S3Server s3(data.path());
  s3.create_bucket("models");
  s3.put_dir("models", "ckpt/", root_->path());
  ScopedEnv env({{"AWS_ACCESS_KEY_ID", S3Server::kAccessKey},
                 {"AWS_SECRET_ACCESS_KEY", S3Server::kSecretKey},
                 {"AWS_ENDPOINT_URL", s3.endpoint()}});
  for (const auto& c : kFamilies) {
    SCOPED_TRACE(c.family);
    expect_rank_matches(local(c), 2, c.rank, c.layout, "", std::string("s3://models/ckpt/") + c.family + "/");
  }
}

// ---- One family (llama, tiny, two shards) behind the fault proxy ----

class RemoteFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = nginx_missing(); !why.empty()) GTEST_SKIP() << why;
    ckpt_ = synth_checkpoint(dir_.path(), "llama", "ck");
    nginx_ = std::make_unique<NginxServer>(dir_.path());
    proxy_ = std::make_unique<FaultProxy>(nginx_->url());
  }
  std::string url() const { return proxy_->url() + "/ck/"; }
  // `wmap load URL --tp-size 2 --tp-rank 1 --json --dump`, checked bit for bit when it succeeds.
  CommandResult load(const std::string& extra = "", bool expect_ok = true) {
    const auto dump = out_.path() / "rank.safetensors";
    auto r = run_wmap("load " + shell_quote(url()) + " --tp-size 2 --tp-rank 1 --json " + extra + " --dump " +
                      shell_quote(dump.string()));
    if (expect_ok) {
      EXPECT_EQ(r.exit_code, 0) << r.err;
      if (r.exit_code == 0) {
        EXPECT_EQ(reference_mismatches(ckpt_, dump, "--tp-size 2 --tp-rank 1"), "");
      }
    }
    return r;
  }
  static nlohmann::json remote_of(const CommandResult& r) {
    const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    return j.at("remote");
  }
  // The proxy's log lines whose path contains `part`.
  std::vector<nlohmann::json> requests_for(const std::string& part) const {
    std::vector<nlohmann::json> out;
    for (const auto& e : proxy_->log()) {
      if (e.at("path").get<std::string>().find(part) != std::string::npos) out.push_back(e);
    }
    return out;
  }
  static std::string range_of(const nlohmann::json& e) { return e.at("headers").value("range", ""); }

  TempDir dir_, out_;
  fs::path ckpt_;
  std::unique_ptr<NginxServer> nginx_;
  std::unique_ptr<FaultProxy> proxy_;
};

TEST_F(RemoteFaults, ServerErrorsAndTooManyRequestsAreRetriedHonouringRetryAfter) {
  proxy_->set_rules(R"([{"path_contains": "model-00001", "nth": 2, "action": "status", "status": 503},
                        {"path_contains": "model-00002", "nth": 1, "action": "retry_after", "seconds": 1}])");
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = load();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(remote_of(r).at("retries").get<uint64_t>(), 3u) << r.out;
  EXPECT_GE(s, 1.0) << "Retry-After: 1 was not waited for";
  const auto shard2 = requests_for("model-00002");
  ASSERT_GE(shard2.size(), 2u);
  EXPECT_EQ(shard2[0].at("status"), 429);
  EXPECT_EQ(range_of(shard2[1]), range_of(shard2[0])) << "the retry asks for the same bytes";
}

TEST_F(RemoteFaults, AResetOrAShortBodyIsResumedAfterTheBytesThatLanded) {
  proxy_->set_rules(R"([{"path_contains": "model-00001", "nth": 1, "action": "reset_after", "bytes": 1000},
                        {"path_contains": "model-00002", "nth": 1, "action": "short_body", "bytes": 700}])");
  const auto r = load();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(remote_of(r).at("retries").get<uint64_t>(), 2u) << r.out;
  const auto shard1 = requests_for("model-00001"), shard2 = requests_for("model-00002");
  ASSERT_GE(shard1.size(), 2u);
  ASSERT_GE(shard2.size(), 2u);
  EXPECT_EQ(range_of(shard1[0]), "bytes=0-65535");
  // Retried after the reset (an RST may discard bytes the proxy sent before it, so where the retry
  // starts is up to the socket); the short body's 700 bytes all land, and the retry asks for the rest.
  EXPECT_TRUE(range_of(shard1[1]).ends_with("-65535")) << range_of(shard1[1]);
  EXPECT_EQ(range_of(shard2[1]), "bytes=700-65535");
  // The resumed request carries the ETag the first response had, so the two halves are one version.
  const std::string etag = shard2[1].at("headers").value("if-match", "");
  EXPECT_FALSE(etag.empty()) << shard2[1].dump();
}

TEST_F(RemoteFaults, AStalledResponseIsAbandonedAndRetried) {
  ScopedEnv env({{"WMAP_REMOTE_TIMEOUT", "1"}});
  proxy_->set_rules(R"([{"path_contains": "config.json", "nth": 1, "action": "delay_first_byte", "seconds": 4}])");
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = load();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(remote_of(r).at("retries").get<uint64_t>(), 1u);
  EXPECT_LT(s, 3.5) << "the stalled request was waited out instead of abandoned";
}

TEST_F(RemoteFaults, RetriesAreBoundedAndTheErrorNamesObjectRangeAndAttempts) {
  ScopedEnv env({{"WMAP_REMOTE_RETRIES", "2"}});
  proxy_->set_rules(R"([{"path_contains": "model-00002", "action": "status", "status": 500}])");
  const auto r = load("", false);
  EXPECT_EQ(r.exit_code, 2) << r.err;  // the header cannot be read: unusable input
  EXPECT_NE(r.err.find(url() + "model-00002-of-00002.safetensors: HTTP 500"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bytes=0-65535"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("after 3 attempts"), std::string::npos) << r.err;
  EXPECT_EQ(requests_for("model-00002").size(), 3u);
}

TEST_F(RemoteFaults, AShortBodyIsNeverAccepted) {
  ScopedEnv env({{"WMAP_REMOTE_RETRIES", "1"}});
  proxy_->set_rules(R"([{"path_contains": "model-00001", "action": "short_body", "bytes": 10}])");
  const auto r = load("", false);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("model-00001-of-00002.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("short body"), std::string::npos) << r.err;
}

TEST_F(RemoteFaults, NotFoundFailsAtOnceNamingTheObject) {
  fs::remove(ckpt_ / "model-00002-of-00002.safetensors");
  const auto r = load("", false);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(url() + "model-00002-of-00002.safetensors: HTTP 404"), std::string::npos) << r.err;
  EXPECT_EQ(requests_for("model-00002").size(), 1u) << "a 404 is not retried";
}

TEST_F(RemoteFaults, AnETagChangeBetweenResponsesIsRefused) {
  // The first response (the probe that reads the header) names one version; the data's request
  // then carries If-Match for it, which the server refuses.
  proxy_->set_rules(R"([{"path_contains": "model-00002", "nth": 1, "action": "replace_etag",
                         "etag": "\"another-version\""}])");
  const RemoteFileSystem f;
  auto file = f.open(url() + "model-00002-of-00002.safetensors", IoMode::kPread);
  std::vector<std::byte> buf(1000);
  try {
    file->read(file->size() - 1000, buf);
    FAIL() << "a response of another version was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("changed since it was planned"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("another-version"), std::string::npos) << e.what();
  }
}

TEST_F(RemoteFaults, PlanningFetchesHeadersOnly) {
  const auto r = run_wmap("plan " + shell_quote(url()) + " --tp-size 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  uint64_t body = 0;
  for (const auto& e : proxy_->log()) {
    const std::string path = e.at("path");
    body += e.at("body_bytes").get<uint64_t>();
    if (path.find(".safetensors") != std::string::npos) {
      EXPECT_EQ(range_of(e), "bytes=0-65535") << path;
    }
  }
  // The probes (64 KiB of each 118 KiB shard), config.json and the index: no tensor data beyond them.
  EXPECT_LE(body, 2u * 65536 + 4096);
}

TEST_F(RemoteFaults, IfMatchRefusesAnObjectReplacedAfterItWasOpened) {
  // nginx honours If-Match: the replaced file answers 412.
  const std::string shard = nginx_->url() + "/ck/model-00001-of-00002.safetensors";
  const RemoteFileSystem remote;
  auto file = remote.open(shard, IoMode::kPread);
  const uint64_t size = file->size();
  std::string bytes = read_file(ckpt_ / "model-00001-of-00002.safetensors");
  bytes[bytes.size() - 1] ^= 1;
  write_file(ckpt_ / "model-00001-of-00002.safetensors.new", bytes);
  fs::last_write_time(ckpt_ / "model-00001-of-00002.safetensors.new",
                      fs::last_write_time(ckpt_ / "model-00001-of-00002.safetensors") + std::chrono::seconds(5));
  fs::rename(ckpt_ / "model-00001-of-00002.safetensors.new", ckpt_ / "model-00001-of-00002.safetensors");
  std::vector<std::byte> buf(1000);
  try {
    file->read(size - 1000, buf);
    FAIL() << "read a replaced object";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("changed since it was planned (plan again): HTTP 412"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(shard), std::string::npos) << e.what();
  }
}

TEST_F(RemoteFaults, ASavedCatalogRecordsETagsAndRefusesAChangedObject) {
  const auto cat = out_.path() / "catalog.json";
  auto r = run_wmap("inspect " + shell_quote(url()) + " --save-catalog " + shell_quote(cat.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(read_file(cat));
  for (const auto& s : j.at("shards")) EXPECT_FALSE(s.value("etag", "").empty()) << s.dump();
  r = load("--catalog " + shell_quote(cat.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Replaced (same size, newer mtime: nginx's ETag changes).
  std::string bytes = read_file(ckpt_ / "model-00002-of-00002.safetensors");
  bytes[bytes.size() - 1] ^= 1;
  write_file(ckpt_ / "model-00002-of-00002.safetensors", bytes);
  fs::last_write_time(ckpt_ / "model-00002-of-00002.safetensors",
                      fs::last_write_time(ckpt_ / "model-00002-of-00002.safetensors") + std::chrono::seconds(5));
  r = load("--catalog " + shell_quote(cat.string()), false);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("changed since"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model-00002-of-00002.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ETag"), std::string::npos) << r.err;
}

// libcurl is opened at the first remote request (core/src/io/curl_api.h), WMAP_LIBCURL naming
// another library: one that cannot be loaded is an error naming it and what to install.
TEST_F(RemoteFaults, LibcurlIsOpenedOnFirstUseAndAMissingOneIsNamed) {
  const std::string cli = shell_quote(WMAP_CLI_PATH) + " -q inspect " + shell_quote(url());
  const auto missing = run_command("WMAP_LIBCURL=/nonexistent/libcurl.so.4 " + cli);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("remote paths need libcurl 7.75 or newer, and /nonexistent/libcurl.so.4 (WMAP_LIBCURL) "
                             "could not be loaded"),
            std::string::npos)
      << missing.err;
  EXPECT_NE(missing.err.find("apt-get install libcurl4"), std::string::npos) << missing.err;
  EXPECT_TRUE(proxy_->log().empty()) << "no request without libcurl";
  // The default, named explicitly, and the loader's account of the run: libcurl opened by dlopen.
  const auto named = run_command("WMAP_LIBCURL=libcurl.so.4 LD_DEBUG=files " + cli);
  EXPECT_EQ(named.exit_code, 0) << named.err.substr(0, 2000);
  EXPECT_NE(named.err.find("file=libcurl.so.4 [0];  dynamically loaded by"), std::string::npos)
      << named.err.substr(0, 4000);
}

TEST_F(RemoteFaults, HttpWithoutAnIndexSaysWhatToServe) {
  fs::remove(ckpt_ / "model.safetensors.index.json");
  const auto r = run_wmap("inspect " + shell_quote(url()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot list a folder"), std::string::npos) << r.err;
  // Naming the file works.
  EXPECT_EQ(run_wmap("inspect " + shell_quote(url() + "model-00001-of-00002.safetensors")).exit_code, 0);
}

TEST_F(RemoteFaults, AMalformedSettingIsNamed) {
  for (const std::string setting :
       {"WMAP_REMOTE_CONCURRENCY=0", "WMAP_REMOTE_RETRIES=many", "WMAP_REMOTE_TIMEOUT=-1", "WMAP_S3_LIST_PAGE=5000"}) {
    const auto r = run_command(setting + " " + shell_quote(WMAP_CLI_PATH) + " -q inspect " + shell_quote(url()));
    EXPECT_EQ(r.exit_code, 2) << setting;
    EXPECT_NE(r.err.find(setting.substr(0, setting.find('=')) + "='"), std::string::npos) << r.err;
  }
}

TEST_F(RemoteFaults, MmapIsRefusedForARemoteCheckpoint) {
  const auto r = load("--io mmap", false);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--io mmap maps local files"), std::string::npos) << r.err;
}

TEST_F(RemoteFaults, CredentialsInAUrlAreNeverPrinted) {
  const std::string url = "http://reader:pw-not-to-print@127.0.0.1:" + std::to_string(nginx_->port()) + "/gone/";
  const auto r = run_wmap("inspect " + shell_quote(url + "model.safetensors?X-Amz-Signature=sig-not-to-print"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  // user:password@ is taken into the file system's credentials, the query off the path.
  EXPECT_NE(r.err.find("http://127.0.0.1:" + std::to_string(nginx_->port()) + "/gone/model.safetensors:"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("pw-not-to-print"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("sig-not-to-print"), std::string::npos) << r.err;
}

TEST_F(RemoteFaults, TheHubTokenGoesToTheHubOnlyNeverAcrossARedirect) {
  // HF_ENDPOINT/ORG/MODEL/resolve/REV/FILE: the checkpoint under that path, the hub is the proxy,
  // and one shard is redirected (as the hub redirects to its CDN) to another host (localhost).
  fs::create_directories(dir_.path() / "org/model/resolve");
  fs::create_directory_symlink(ckpt_, dir_.path() / "org/model/resolve/main");
  FaultProxy cdn(nginx_->url());
  proxy_->set_rules(R"([{"path_contains": "model-00002", "action": "redirect", "location": "http://localhost:)" +
                    std::to_string(cdn.port()) + R"("}])");
  ScopedEnv env({{"HF_ENDPOINT", proxy_->url()}, {"HF_TOKEN", "hf_test_token_123"}});
  const auto dump = out_.path() / "hf.safetensors";
  const auto r = run_wmap("load hf://org/model --tp-size 2 --tp-rank 1 --dump " + shell_quote(dump.string()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(reference_mismatches(ckpt_, dump, "--tp-size 2 --tp-rank 1"), "");
  size_t to_hub = 0;
  for (const auto& e : proxy_->log()) {
    EXPECT_EQ(e.at("headers").value("authorization", ""), "Bearer hf_test_token_123") << e.dump();
    ++to_hub;
  }
  EXPECT_GE(to_hub, 4u);
  const auto at_cdn = cdn.log();
  ASSERT_FALSE(at_cdn.empty()) << "the redirect was not followed";
  for (const auto& e : at_cdn) EXPECT_FALSE(e.at("headers").contains("authorization")) << e.dump();
  // A revision: hf://ORG/MODEL@REV is resolve/REV.
  fs::create_directory_symlink(ckpt_, dir_.path() / "org/model/resolve/v1.0");
  proxy_->clear_log();
  const auto rev = run_wmap("inspect hf://org/model@v1.0");
  ASSERT_EQ(rev.exit_code, 0) << rev.err;
  for (const auto& e : proxy_->log()) {
    EXPECT_EQ(e.at("path").get<std::string>().rfind("/org/model/resolve/v1.0/", 0), 0u) << e.dump();
  }
}

// ---- S3: credentials, listing, identity ----

class RemoteS3 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = s3_server_missing(); !why.empty()) GTEST_SKIP() << why;
    ckpt_ = synth_checkpoint(dir_.path(), "llama", "ck");
  }
  void serve(bool anonymous = false) {
    s3_ = std::make_unique<S3Server>(data_.path(), anonymous);
    s3_->create_bucket("models");
    s3_->put_dir("models", "llama/", ckpt_);
  }
  std::string endpoint_flag() const { return " --s3-endpoint " + shell_quote(s3_->endpoint()); }

  TempDir dir_, data_, out_;
  fs::path ckpt_;
  std::unique_ptr<S3Server> s3_;
};

TEST_F(RemoteS3, AWrongSecretFailsAtOnceNamingTheCredentialsSourceNotTheSecret) {
  serve();
  ScopedEnv env({{"AWS_ACCESS_KEY_ID", S3Server::kAccessKey}, {"AWS_SECRET_ACCESS_KEY", "not-the-secret-42"}});
  const auto r = run_wmap("inspect s3://models/llama/" + endpoint_flag());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  // The listing is denied (a bucket may grant GetObject without ListBucket: wmap then looks for
  // the index by name), and so is the index.
  EXPECT_NE(r.err.find("s3://models/llama/: listing denied"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("s3://models/llama/model.safetensors.index.json: HTTP 403"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SignatureDoesNotMatch"), std::string::npos) << r.err;
  // The access key id masked to its last four characters, as the AWS CLI shows it.
  EXPECT_NE(r.err.find("credentials: environment AWS_ACCESS_KEY_ID (access key **RVER)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("S3RVER"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("not-the-secret-42"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("after"), std::string::npos) << "a 403 is not retried: " << r.err;
}

TEST_F(RemoteS3, TheSharedCredentialsFileAndProfileAreUsed) {
  serve();
  const auto creds = out_.path() / "credentials";
  write_file(creds,
             "[default]\naws_access_key_id = nobody\naws_secret_access_key = wrong\n\n[bench]\n"
             "aws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n");
  ScopedEnv env({{"AWS_SHARED_CREDENTIALS_FILE", creds.string()},
                 {"AWS_CONFIG_FILE", (out_.path() / "none").string()},
                 {"AWS_PROFILE", "bench"},
                 {"AWS_ACCESS_KEY_ID", ""},
                 {"AWS_SECRET_ACCESS_KEY", ""}});
  expect_rank_matches(ckpt_, 2, 0, "", endpoint_flag(), "s3://models/llama/");
  ScopedEnv other({{"AWS_PROFILE", "default"}});
  const auto r = run_wmap("inspect s3://models/llama/" + endpoint_flag());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("profile 'default' in " + creds.string() + " (access key **body)"), std::string::npos) << r.err;
}

TEST_F(RemoteS3, NoSignSendsUnsignedRequests) {
  serve(/*anonymous=*/true);
  ScopedEnv env({{"AWS_ACCESS_KEY_ID", "ignored"}, {"AWS_SECRET_ACCESS_KEY", "ignored"}});
  expect_rank_matches(ckpt_, 2, 1, "", endpoint_flag() + " --s3-no-sign", "s3://models/llama/");
}

TEST_F(RemoteS3, UnsignedRequestsToAPrivateBucketAreRefusedSayingSo) {
  serve();
  const auto r = run_wmap("inspect s3://models/llama/ --s3-no-sign" + endpoint_flag());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("HTTP 403"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("credentials: none: unsigned requests (--s3-no-sign)"), std::string::npos) << r.err;
}

TEST_F(RemoteS3, WithoutAnIndexTheShardsAreListedAcrossPages) {
  fs::remove(ckpt_ / "model.safetensors.index.json");
  serve();
  // One key per ListObjectsV2 page: three pages (config.json and two shards) to find the shards.
  ScopedEnv env({{"AWS_ACCESS_KEY_ID", S3Server::kAccessKey},
                 {"AWS_SECRET_ACCESS_KEY", S3Server::kSecretKey},
                 {"WMAP_S3_LIST_PAGE", "1"}});
  expect_rank_matches(ckpt_, 2, 1, "", endpoint_flag(), "s3://models/llama/");
  const auto r = run_wmap("inspect s3://models/llama/ --json" + endpoint_flag());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model-00002-of-00002.safetensors"), std::string::npos);
}

TEST_F(RemoteS3, KeysWithSpacesPlusSignsAndDotsAreEncodedAndSigned) {
  s3_ = std::make_unique<S3Server>(data_.path());
  s3_->create_bucket("models");
  s3_->put_dir("models", "team a/llama+v1.5/", ckpt_);
  ScopedEnv env({{"AWS_ACCESS_KEY_ID", S3Server::kAccessKey}, {"AWS_SECRET_ACCESS_KEY", S3Server::kSecretKey}});
  expect_rank_matches(ckpt_, 2, 1, "", endpoint_flag(), "s3://models/team a/llama+v1.5");
  fs::remove(ckpt_ / "model.safetensors.index.json");  // the listing's prefix is encoded too
  s3_->put_dir("models", "team b/llama+v2/", ckpt_);
  expect_rank_matches(ckpt_, 2, 0, "", endpoint_flag(), "s3://models/team b/llama+v2/");
}

TEST_F(RemoteS3, AnObjectReplacedUnderAServerThatIgnoresIfMatchIsRefusedByItsETag) {
  // s3rver does not evaluate If-Match on GET: the response's ETag gives the replacement away.
  serve();
  ScopedEnv env({{"AWS_ACCESS_KEY_ID", S3Server::kAccessKey},
                 {"AWS_SECRET_ACCESS_KEY", S3Server::kSecretKey},
                 {"AWS_ENDPOINT_URL", s3_->endpoint()}});
  const RemoteFileSystem remote;
  auto file = remote.open(std::string("s3://models/llama/model-00001-of-00002.safetensors"), IoMode::kPread);
  std::string bytes = read_file(ckpt_ / "model-00001-of-00002.safetensors");
  bytes[bytes.size() - 1] ^= 1;
  write_file(out_.path() / "replaced", bytes);
  s3_->put_file("models", "llama/model-00001-of-00002.safetensors", out_.path() / "replaced");
  std::vector<std::byte> buf(1000);
  try {
    file->read(file->size() - 1000, buf);
    FAIL() << "read a replaced object";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("changed since it was planned"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("did not honour If-Match"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wmap::test
