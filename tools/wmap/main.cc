// wmap: map Hugging Face checkpoints onto inference-engine parameters.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "commands.h"
#include "huge_pages.h"
#include "loader_options.h"
#include "mpi_handoff.h"
#include "wmap/abi/plugin_api.h"
#include "wmap/build_info.h"
#include "wmap/io/remote.h"
#include "wmap/util/error.h"
#include "wmap/util/log.h"
#include "wmap/util/progress.h"

namespace {

// The engine releases whose load_weights the --target rules reproduce (docs/cli.md "Engine
// releases followed"). Where a release changed a rule, wmap follows the newest one read.
constexpr const char* kTrtllmRelease = "TensorRT-LLM 1.3.0rc25 / main a6616d6f (2026-09)";
constexpr const char* kTrtllmNote =
    "DeepSeek-V3/R1/Kimi/V3.2 block-FP8 kv_b_proj dequantised to BF16 (load_hf_quant_config always excludes "
    "*kv_b_proj*, *k_b_proj*, *eh_proj*); per-tensor FP8 requantised inside load_weights; TRTLLM_LOAD_KV_SCALES on";
constexpr const char* kVllmRelease = "vLLM main (2026; the commits cited per rule in docs/engines.md and docs/cli.md)";
constexpr const char* kVllmNote =
    "no single release pinned: each rule cites the file, function and commit it was read at";

// `wmap --version [--json]`: the build, its plugin ABI and plan format, and the engine releases.
bool print_version(int argc, char** argv) {
  bool version = false, json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    version = version || a == "--version";
    json = json || a == "--json";
  }
  if (!version) return false;
  if (json) {
    std::printf(
        "{\"wmap\":\"%s\",\"build_id\":\"%s\",\"plugin_abi\":%u,\"plan_format\":9,\"engines\":{\"trtllm\":{"
        "\"release\":\"%s\",\"note\":\"%s\"},\"vllm\":{\"release\":\"%s\",\"note\":\"%s\"}}}\n",
        WMAP_VERSION, WMAP_BUILD_ID, WMAP_PLUGIN_ABI_VERSION, kTrtllmRelease, kTrtllmNote, kVllmRelease, kVllmNote);
  } else {
    std::printf(
        "wmap %s (%s), plugin ABI %u, plan format 9\n--target trtllm follows %s: %s\n--target vllm follows %s: %s\n",
        WMAP_VERSION, WMAP_BUILD_ID, WMAP_PLUGIN_ABI_VERSION, kTrtllmRelease, kTrtllmNote, kVllmRelease, kVllmNote);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  wmap::cli::hand_over_to_mpi_build(argv);  // under mpirun: the binary with MPI (mpi_handoff.h)
  if (print_version(argc, argv)) return 0;
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
