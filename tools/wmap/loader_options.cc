#include "loader_options.h"

#include <climits>
#include <cstdint>
#include <cstdio>
#include <fstream>

#include "wmap/util/error.h"

namespace wmap::cli {

namespace {
// A count option: a non-negative integer that fits 32 bits, else the option's name and the value
// (CLI11's own checks print a double range or "Could not convert").
CLI::Validator count_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return "'" + s + "' is not a non-negative integer";
        if (s.size() > 10 || std::stoull(s) > UINT32_MAX) return "'" + s + "' is larger than 4294967295";
        return "";
      },
      "UINT");
}
}  // namespace

void add_common_load_options(CLI::App& sub, CommonLoadOptions& o) {
  LayoutOptions& l = o.layout;
  const Layout defaults;
  sub.add_option("--tp-size", l.tp_size, "Tensor-parallel size T")->check(count_value())->capture_default_str();
  sub.add_option("--tp-rank", l.tp_rank, "This rank, 0 <= R < T (default 0; under mpirun the MPI rank)")
      ->check(count_value());
  sub.add_option("--ep-size", l.ep_size, "Expert-parallel size P (divides T)")
      ->check(count_value())
      ->capture_default_str();
  sub.add_option("--pp-size", l.pp_size, "Pipeline-parallel size: stages the decoder layers are split over")
      ->check(count_value())
      ->capture_default_str();
  sub.add_option("--pp-rank", l.pp_rank,
                 "This rank's pipeline stage, 0 <= S < pp-size (default 0; under mpirun rank / tp-size)")
      ->check(count_value());
  sub.add_option_function<std::string>(
         "--pp-partition",
         [&l](const std::string& text) {
           try {
             l.pp_partition = parse_pp_partition(text, "--pp-partition");
           } catch (const Error& e) {
             throw CLI::ValidationError(e.what());  // a usage error (exit 2), not a crash
           }
         },
         "Layers per stage, first stage first, e.g. 3,2,2 (vLLM's VLLM_PP_LAYER_PARTITION, TensorRT-LLM's "
         "pp_partition; default: the target's own split)")
      ->type_name("N,N,...");
  sub.add_option("--mtp-layers", l.mtp_layers,
                 "MTP layers K to instantiate (default: the checkpoint's; target vllm: none)")
      ->check(count_value());
  sub.add_option("--target", l.target, "Whose parameters to produce: trtllm (TensorRT-LLM's PyTorch backend) or vllm")
      ->check(CLI::IsMember(target_names()))
      ->capture_default_str();
  sub.add_flag("--attention-dp", l.attention_dp,
               "TensorRT-LLM's attention data parallelism: attention, dense MLPs, shared experts and embeddings "
               "replicated; only routed experts split");
  sub.add_option("--gpus-per-node", l.gpus_per_node,
                 "GPUs per node G; caps TensorRT-LLM's gcd split of DeepSeek's dense MLP (default " +
                     std::to_string(defaults.gpus_per_node) + "; under mpirun the node's rank count)")
      ->check(count_value());
  sub.add_option("--moe-backend", l.moe_backend,
                 "The engine MoE backend whose expert layout to produce (gpt-oss: vllm triton, trtllm cutlass; "
                 "default: the family's for the target)");
  sub.add_option("--catalog", o.catalog, "A catalog saved by `wmap inspect --save-catalog`");
  sub.add_option("--config", o.config, "config.json (default: the checkpoint's)");
  sub.add_option("--plugin-dir", o.plugin_dir, "Folder searched first for plugins");
  sub.add_option("--mappings", o.mappings, "Folder searched first for mapping files");
  sub.add_flag("--json", o.json, "Machine-readable output on stdout");
  sub.add_flag("--prefer-consolidated", o.prefer_consolidated, "Use consolidated*.safetensors over sharded files");
  sub.add_option("--max-read-gap", o.plan.max_read_gap,
                 "Widest gap of unwanted bytes a read goes through rather than starting another read (bytes; "
                 "suffixes k, KiB, m, MiB; 0: a read unit reads no unwanted byte)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
}

namespace {
std::optional<RemoteOptions>& settings_slot() {
  static std::optional<RemoteOptions> s;
  return s;
}
}  // namespace

void set_remote_settings(RemoteOptions options) { settings_slot() = std::move(options); }

const RemoteOptions& remote_settings() {
  if (!settings_slot()) settings_slot() = RemoteOptions::from_environment();
  return *settings_slot();
}

const RemoteFileSystem& storage() {
  static const RemoteFileSystem fs(remote_settings());
  return fs;
}

LoaderOptions to_loader_options(const CommonLoadOptions& o, const Layout& layout) {
  LoaderOptions l;
  l.remote = remote_settings();
  if (!o.checkpoint.empty()) l.checkpoint = o.checkpoint;
  if (!o.catalog.empty()) l.catalog_file = o.catalog;
  if (!o.config.empty()) l.config_file = o.config;
  if (!o.plugin_dir.empty()) l.plugin_dir = o.plugin_dir;
  if (!o.mappings.empty()) l.mappings_dir = o.mappings;
  l.layout = layout;
  l.prefer_consolidated = o.prefer_consolidated;
  l.plan = o.plan;
  return l;
}

void report_plan(const PreparedLoad& prepared, bool quiet_ok) {
  const std::string text = prepared.plan->report(!quiet_ok);
  std::fwrite(text.data(), 1, text.size(), stderr);
}

void keep_until_exit(std::unique_ptr<PreparedLoad> prepared) {
  static std::unique_ptr<PreparedLoad> kept;
  kept = std::move(prepared);
}

void print_json_line(const nlohmann::ordered_json& j) {
  const std::string text = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
}

namespace {
// The number after `key` on its "key: value" line of a /proc/self file; 0 when absent.
uint64_t proc_self_value(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size()));
  }
  return 0;
}
}  // namespace

uint64_t peak_rss_bytes() { return proc_self_value("/proc/self/status", "VmHWM:") * 1024; }

uint64_t os_storage_read_bytes() { return proc_self_value("/proc/self/io", "read_bytes:"); }

}  // namespace wmap::cli
