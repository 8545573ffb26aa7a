#include "remote/remote_servers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace wmap::test {
namespace {

using Clock = std::chrono::steady_clock;
// Generous: node starts in well under a second on an idle machine, but CI builds in parallel.
constexpr auto kStartTimeout = std::chrono::seconds(20);

// argv[0] on PATH, or in the sbin folders a non-root PATH lacks (Debian's nginx); empty if absent.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  std::string dirs = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  dirs += ":/usr/sbin:/sbin:/usr/local/sbin";
  std::stringstream ss(dirs);
  for (std::string dir; std::getline(ss, dir, ':');) {
    const auto p = std::filesystem::path(dir.empty() ? "." : dir) / name;
    if (::access(p.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(p)) return p.string();
  }
  return "";
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) out.push_back(line);
  return out;
}

// A port the kernel just handed out; free again when we return (nginx cannot be told port 0).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot bind a port on 127.0.0.1");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Waits for the first stdout line (the port the server bound) of a server that binds port 0.
int wait_for_port_line(ChildProcess& process, const std::filesystem::path& out_file) {
  const auto deadline = Clock::now() + kStartTimeout;
  while (Clock::now() < deadline) {
    const std::string out = read_text(out_file);
    if (const auto nl = out.find('\n'); nl != std::string::npos) {
      const int port = std::atoi(out.substr(0, nl).c_str());
      if (port > 0 && port_answers(port)) return port;
      if (port <= 0) throw std::runtime_error("server printed no port: '" + out + "'\n" + process.describe());
    }
    if (!process.running()) throw std::runtime_error("server exited while starting\n" + process.describe());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("server did not print its port within the start timeout\n" + process.describe());
}

std::string source_path(const std::string& rel) { return (source_dir() / rel).string(); }

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::filesystem::path& out_file,
                           const std::filesystem::path& err_file)
    : err_file_(err_file) {
  for (const auto& a : argv) command_ += (command_.empty() ? "" : " ") + shell_quote(a);
  const std::string program = argv.empty() ? "" : find_program(argv[0]);
  if (program.empty()) throw std::runtime_error("program not found: " + command_);
  // Everything the child needs is prepared before fork: a threaded parent's child may only make
  // async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t parent = ::getpid();
  pid_ = (in >= 0 && out >= 0 && err >= 0) ? ::fork() : -1;
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no orphan server if the test binary dies
    if (::getppid() != parent) ::_exit(127);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execv(program.c_str(), args.data());
    static const char msg[] = "ChildProcess: execv failed\n";
    [[maybe_unused]] auto n = ::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  for (int fd : {in, out, err})
    if (fd >= 0) ::close(fd);
  if (pid_ < 0) throw std::runtime_error("cannot start " + command_);
  ::setpgid(pid_, pid_);  // also here, so a kill(-pid) right after fork finds the group
}

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  siginfo_t info{};
  // WNOWAIT leaves an exited child a zombie: its pid (and group id) cannot be reused before stop().
  return ::waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

void ChildProcess::stop() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(-pid_, SIGKILL);  // the leader if it ignored SIGTERM, and anything it left in its group
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string ChildProcess::describe() const { return "command: " + command_ + "\nstderr:\n" + read_text(err_file_); }

bool port_answers(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

std::string uri_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// ---- nginx ----

NginxServer::NginxServer(const std::filesystem::path& root, bool tls, const std::string& extra_config) : tls_(tls) {
  const std::string why = nginx_missing();
  if (!why.empty()) throw std::runtime_error(why);
  const auto& d = dir_.path();
  if (tls_) {
    // A self-signed certificate for 127.0.0.1, trusted by the client through its CA option.
    const auto r = run_command(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -addext "
        "subjectAltName=IP:127.0.0.1 -keyout " +
        shell_quote((d / "key.pem").string()) + " -out " + shell_quote(cert_file().string()));
    if (r.exit_code != 0) throw std::runtime_error("openssl req failed:\n" + r.err);
  }
  // Another process can take the port between free_port() and nginx's bind: try again then.
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = free_port();
    // master_process off: one process, no user switch, no master/worker group to chase.
    std::ostringstream conf;
    conf << "daemon off;\nmaster_process off;\nworker_processes 1;\n"
         << "pid \"" << (d / "nginx.pid").string() << "\";\n"
         << "error_log \"" << (d / "error.log").string() << "\" warn;\n"
         << "events { worker_connections 256; }\n"
         << "http {\n"
         << "  access_log \"" << (d / "access.log").string() << "\";\n";
    for (const char* t : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"})
      conf << "  " << t << "_temp_path \"" << (d / t).string() << "\";\n";
    conf << "  default_type application/octet-stream;\n  sendfile on;\n  keepalive_timeout 60;\n"
         << "  server {\n    listen 127.0.0.1:" << port_ << (tls_ ? " ssl" : "") << ";\n";
    if (tls_) {
      conf << "    ssl_certificate \"" << cert_file().string() << "\";\n"
           << "    ssl_certificate_key \"" << (d / "key.pem").string() << "\";\n";
    }
    conf << "    root \"" << std::filesystem::absolute(root).string() << "\";\n"
         << "    etag on;\n    autoindex off;\n"
         << extra_config << "  }\n}\n";
    write_file(d / "nginx.conf", conf.str());
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{"nginx", "-p", d.string() + "/", "-c", (d / "nginx.conf").string(), "-e",
                                 (d / "error.log").string()},
        d / "stdout", d / "stderr");
    const auto deadline = Clock::now() + kStartTimeout;
    while (Clock::now() < deadline && process_->running() && !port_answers(port_))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (process_->running() && port_answers(port_)) return;
    const std::string log = read_text(d / "error.log");
    process_->stop();
    if (log.find("Address already in use") == std::string::npos)
      throw std::runtime_error("nginx did not start\n" + process_->describe() + "\nerror.log:\n" + log);
  }
  throw std::runtime_error("nginx: no free port after 5 attempts");
}

std::vector<std::string> NginxServer::access_log_lines() const { return lines_of(read_text(dir_ / "access.log")); }

std::string nginx_missing() {
  return find_program("nginx").empty() ? "nginx is not installed (tools/setup.sh installs nginx-light)" : "";
}

// ---- s3rver ----

std::string s3_server_missing() {
  if (find_program("node").empty()) return "node is not installed (tools/setup.sh installs nodejs)";
  if (!std::filesystem::exists(source_dir() / "tests/servers/node_modules/s3rver/package.json"))
    return "tests/servers/node_modules/s3rver is missing (tools/setup.sh runs npm ci there)";
  if (find_program("curl").empty()) return "curl is not installed (tools/setup.sh installs it)";
  return "";
}

S3Server::S3Server(const std::filesystem::path& data_dir, bool allow_anonymous) {
  const std::string why = s3_server_missing();
  if (!why.empty()) throw std::runtime_error(why);
  std::filesystem::create_directories(data_dir);
  std::vector<std::string> argv = {
      "node",        source_path("tests/servers/s3_server.js"),   "--address", "127.0.0.1", "--port", "0",
      "--directory", std::filesystem::absolute(data_dir).string()};
  if (allow_anonymous) argv.push_back("--allow-anonymous");
  process_ = std::make_unique<ChildProcess>(argv, dir_ / "stdout", dir_ / "stderr");
  port_ = wait_for_port_line(*process_, dir_ / "stdout");
}

std::string S3Server::object_path(const std::string& bucket, const std::string& key) {
  return "/" + bucket + "/" + uri_encode(key, /*keep_slash=*/true);
}

std::string S3Server::curl_sign_args(const std::string& secret) {
  // curl 7.88 does not send x-amz-content-sha256, which S3 requires; UNSIGNED-PAYLOAD is what S3
  // accepts when the body is not hashed.
  return "--aws-sigv4 " + shell_quote(std::string("aws:amz:") + kRegion + ":s3") + " --user " +
         shell_quote(std::string(kAccessKey) + ":" + secret) + " -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD'";
}

namespace {
void expect_200(const CommandResult& r, const std::string& what) {
  if (r.exit_code != 0 || r.out.substr(r.out.size() < 3 ? 0 : r.out.size() - 3) != "200")
    throw std::runtime_error("S3Server: " + what + " failed (curl exit " + std::to_string(r.exit_code) + "):\n" +
                             r.out + "\n" + r.err);
}
}  // namespace

void S3Server::create_bucket(const std::string& bucket) const {
  expect_200(run_command("curl -sS -X PUT -w '%{http_code}' " + curl_sign_args() + " " +
                         shell_quote(endpoint() + "/" + bucket)),
             "create bucket " + bucket);
}

void S3Server::put_file(const std::string& bucket, const std::string& key, const std::filesystem::path& file,
                        const std::string& sha256_base64) const {
  const std::string checksum =
      sha256_base64.empty() ? "" : " -H " + shell_quote("x-amz-checksum-sha256: " + sha256_base64);
  expect_200(run_command("curl -sS -w '%{http_code}' -T " + shell_quote(file.string()) + " " + curl_sign_args() +
                         checksum + " " + shell_quote(endpoint() + object_path(bucket, key))),
             "put " + bucket + "/" + key);
}

void S3Server::put_dir(const std::string& bucket, const std::string& prefix, const std::filesystem::path& dir) const {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    put_file(bucket, prefix + std::filesystem::relative(e.path(), dir).generic_string(), e.path());
  }
}

// ---- fault proxy ----

FaultProxy::FaultProxy(const std::string& upstream_url) {
  write_file(dir_ / "rules.json", "[]");
  write_file(dir_ / "log.jsonl", "");
  process_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{python(), source_path("tests/servers/fault_proxy.py"), upstream_url,
                               (dir_ / "rules.json").string(), (dir_ / "log.jsonl").string()},
      dir_ / "stdout", dir_ / "stderr");
  port_ = wait_for_port_line(*process_, dir_ / "stdout");
}

void FaultProxy::set_rules(const std::string& json) {
  // A typo fails here, not as a rule that silently never applies.
  const auto parsed = nlohmann::json::parse(json);
  const auto& rules = parsed.is_object() ? parsed.at("rules") : parsed;
  static const std::vector<std::string> kActions = {"status",           "retry_after", "reset_after",  "short_body",
                                                    "delay_first_byte", "drop_header", "replace_etag", "redirect",
                                                    "trickle",          "pass"};
  static const std::vector<std::string> kKeys = {
      "path_contains", "method", "range_present", "nth",  "action",   "status",  "body",
      "seconds",       "bytes",  "header",        "etag", "location", "headers", "bytes_per_second"};
  if (!rules.is_array()) throw std::invalid_argument("fault rules: not a list: " + json);
  for (const auto& rule : rules) {
    const std::string action = rule.value("action", "");
    if (std::find(kActions.begin(), kActions.end(), action) == kActions.end())
      throw std::invalid_argument("fault rules: unknown action in " + rule.dump());
    for (const auto& [key, value] : rule.items())
      if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end())
        throw std::invalid_argument("fault rules: unknown key " + key + " in " + rule.dump());
  }
  write_file(dir_ / "rules.json.tmp", json);
  std::filesystem::rename(dir_ / "rules.json.tmp", dir_ / "rules.json");  // the proxy never reads half a file
}

std::vector<nlohmann::json> FaultProxy::log() const {
  std::vector<nlohmann::json> out;
  for (const auto& line : lines_of(read_text(dir_ / "log.jsonl")))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

void FaultProxy::clear_log() { write_file(dir_ / "log.jsonl", ""); }

// ---- environment ----

ScopedEnv::ScopedEnv(std::initializer_list<std::pair<const char*, std::string>> vars) {
  for (const auto& [name, value] : vars) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    ::setenv(name, value.c_str(), 1);
  }
}

ScopedEnv::~ScopedEnv() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->second) {
      ::setenv(it->first.c_str(), it->second->c_str(), 1);
    } else {
      ::unsetenv(it->first.c_str());
    }
  }
}

// ---- the AWS credential services ----

CredentialsServer::CredentialsServer(const nlohmann::json& config) {
  write_file(dir_ / "config.json", config.dump());
  write_file(dir_ / "log.jsonl", "");
  process_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{python(), source_path("tests/servers/credentials_server.py"),
                               (dir_ / "config.json").string(), (dir_ / "log.jsonl").string()},
      dir_ / "stdout", dir_ / "stderr");
  port_ = wait_for_port_line(*process_, dir_ / "stdout");
}

std::vector<nlohmann::json> CredentialsServer::log() const {
  std::vector<nlohmann::json> out;
  for (const auto& line : lines_of(read_text(dir_ / "log.jsonl")))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace wmap::test
