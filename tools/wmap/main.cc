// wmap: map Hugging Face checkpoints onto inference-engine parameters.
#include <cstdio>
#include <cstdlib>
#include <map>

#include "commands.h"
#include "huge_pages.h"
#include "loader_options.h"
#include "wmap/io/remote.h"
#include "wmap/util/error.h"
#include "wmap/util/log.h"
#include "wmap/util/progress.h"

int main(int argc, char** argv) {
  wmap::cli::use_huge_pages_for_metadata(argc, argv);
  CLI::App app{"wmap: map Hugging Face safetensors checkpoints onto inference-engine parameters"};
  app.require_subcommand(1);
  bool quiet = false;
  bool verbose = false;
  app.add_flag("-q,--quiet", quiet, "No progress output on stderr");
  app.add_flag("-v,--verbose", verbose, "Debug logging on stderr");
  // Usage errors (unknown flag, a value outside an option's allowed set) print one line, as every
  // other error does, and exit 2.
  app.failure_message(
      [](const CLI::App*, const CLI::Error& e) { return std::string("wmap: error: ") + e.what() + "\n"; });
  std::map<CLI::App*, wmap::cli::Runner> runners;
  auto add = [&](auto fn) {
    const size_t before = app.get_subcommands({}).size();
    auto runner = fn(app);
    runners[app.get_subcommands({})[before]] = std::move(runner);
  };
  add(wmap::cli::add_inspect);
  add(wmap::cli::add_synth);
  add(wmap::cli::add_plan);
  add(wmap::cli::add_load);
  add(wmap::cli::add_verify);
  // Remote checkpoints (s3://, http(s)://, hf://): the environment's settings, these flags over them.
  std::string s3_endpoint;
  bool s3_no_sign = false;
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == "synth") continue;
    sub->add_option("--s3-endpoint", s3_endpoint,
                    "S3-compatible endpoint URL for s3:// paths (over AWS_ENDPOINT_URL_S3 and AWS_ENDPOINT_URL); "
                    "addressed path-style");
    sub->add_flag("--s3-no-sign", s3_no_sign, "Unsigned S3 requests (public buckets): no credentials looked up");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  wmap::Progress::set_quiet(quiet);
  wmap::set_log_level(verbose ? wmap::LogLevel::kDebug : wmap::LogLevel::kInfo);
  wmap::log_debug("malloc huge pages: " + std::string(wmap::cli::huge_pages_decision()));
  try {
    wmap::RemoteOptions remote = wmap::RemoteOptions::from_environment();
    if (!s3_endpoint.empty()) remote.s3_endpoint = s3_endpoint;
    remote.s3_no_sign = remote.s3_no_sign || s3_no_sign;
    wmap::cli::set_remote_settings(std::move(remote));
    for (auto& [sub, run] : runners) {
      if (!sub->parsed()) continue;
      const int rc = run();
      // Skip tearing down what the command built (a catalog of 100k tensors is 200k frees):
      // the OS reclaims it at once. Sanitizer builds exit normally so leak checks still run.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(rc);
#endif
      return rc;
    }
    return 2;
  } catch (const wmap::cli::ReportedFailure& f) {
    return f.exit_code;
  } catch (const wmap::Error& e) {
    std::fprintf(stderr, "wmap: error: %s\n", e.what());
    return wmap::cli::after_error(wmap::exit_code_for(e.code()));
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "wmap: error: out of memory\n");
    return wmap::cli::after_error(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wmap: error: %s\n", e.what());
    return wmap::cli::after_error(1);
  }
}
