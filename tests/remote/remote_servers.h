#pragma once
// Real HTTP and S3 servers on 127.0.0.1 for the remote-source tests (tests/remote/README.md):
// nginx for plain HTTP (ranges, ETag, If-Match), s3rver behind a SigV4 check for S3, and a fault
// injecting reverse proxy. Each runs as a child process in its own process group on an ephemeral
// port; the destructor kills the group, and the child dies with the test binary even if the
// binary crashes (PR_SET_PDEATHSIG).

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace wmap::test {

// Sets environment variables for one test and puts the old values back (the CLI runs as a child
// and inherits them; an in-process RemoteFileSystem made after it reads them).
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, std::string>> vars);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// A child process (argv[0] looked up on PATH) in a new process group, stdout and stderr to files.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::filesystem::path& out_file,
               const std::filesystem::path& err_file);
  ~ChildProcess() { stop(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();  // false once it has exited (reaped)
  // SIGTERM to the group, SIGKILL after a grace period, reaped. Idempotent.
  void stop();
  std::string describe() const;  // the command line and its stderr so far, for error messages

 private:
  pid_t pid_ = -1;
  std::string command_;
  std::filesystem::path err_file_;
};

// true when something accepts a TCP connection on 127.0.0.1:port.
bool port_answers(int port);
// Encodes every byte but A-Z a-z 0-9 - _ . ~ (and '/' when keep_slash), as SigV4 canonicalizes.
std::string uri_encode(const std::string& s, bool keep_slash = false);

// nginx serving `root` read-only: byte ranges, ETag, If-Match (412), keep-alive, no autoindex.
class NginxServer {
 public:
  // tls: https with a self-signed certificate for 127.0.0.1 (cert_file(): what a client trusts).
  // extra_config: more directives inside the server block (a `location` that redirects).
  explicit NginxServer(const std::filesystem::path& root, bool tls = false, const std::string& extra_config = "");
  std::string url() const { return (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(port_); }
  std::filesystem::path cert_file() const { return dir_.path() / "cert.pem"; }
  int port() const { return port_; }
  pid_t pid() const { return process_->pid(); }
  const std::filesystem::path& work_dir() const { return dir_.path(); }  // config, logs, temp
  std::vector<std::string> access_log_lines() const;

 private:
  TempDir dir_;  // declared first: outlives the process
  bool tls_ = false;
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

// s3rver 3.7.1 (tests/servers/package.json) with the SigV4 check of tests/servers/s3_server.js:
// path-style requests to endpoint()/BUCKET/KEY, signed with the constants below.
class S3Server {
 public:
  static constexpr const char* kAccessKey = "S3RVER";  // s3rver's built-in account
  static constexpr const char* kSecretKey = "S3RVER";
  static constexpr const char* kRegion = "us-east-1";

  // Objects live under data_dir (s3rver's own layout). Unsigned requests get 403 unless
  // allow_anonymous.
  explicit S3Server(const std::filesystem::path& data_dir, bool allow_anonymous = false);
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  pid_t pid() const { return process_->pid(); }

  // Through the curl CLI, signed; throw std::runtime_error with curl's output on failure.
  void create_bucket(const std::string& bucket) const;
  // sha256_base64: uploaded with that x-amz-checksum-sha256 (returned to checksum-mode GETs and HEADs).
  void put_file(const std::string& bucket, const std::string& key, const std::filesystem::path& file,
                const std::string& sha256_base64 = "") const;
  // Every regular file under dir (recursively) as key prefix + its relative path ('/'-separated).
  void put_dir(const std::string& bucket, const std::string& prefix, const std::filesystem::path& dir) const;

  // "/BUCKET/KEY" with the key's segments percent-encoded: curl 7.88 signs the path as written,
  // so only an already-canonical path verifies.
  static std::string object_path(const std::string& bucket, const std::string& key);
  // Shell-quoted curl flags that sign a request with the constants above.
  static std::string curl_sign_args(const std::string& secret = kSecretKey);

 private:
  TempDir dir_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

// Empty when node and tests/servers/node_modules/s3rver are there, else what is missing and that
// tools/setup.sh installs it (tests GTEST_SKIP with it).
std::string s3_server_missing();
std::string nginx_missing();

// tests/servers/fault_proxy.py in front of `upstream_url` (http://127.0.0.1:PORT).
class FaultProxy {
 public:
  explicit FaultProxy(const std::string& upstream_url);
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  pid_t pid() const { return process_->pid(); }

  // Replaces the rules (fault_proxy.py's docstring has the format); the next request sees them.
  void set_rules(const std::string& json);
  // One object per request so far: method, path, headers, fault, status, body_bytes.
  std::vector<nlohmann::json> log() const;
  void clear_log();

 private:
  TempDir dir_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

// tests/servers/credentials_server.py: STS (AssumeRoleWithWebIdentity), the ECS container
// endpoint (/ecs/credentials) and IMDSv2 on one port; `config` as its docstring says.
class CredentialsServer {
 public:
  explicit CredentialsServer(const nlohmann::json& config);
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<nlohmann::json> log() const;  // method, path, headers, body, status per request

 private:
  TempDir dir_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace wmap::test
