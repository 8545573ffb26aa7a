#include "loader_options.h"

#include <cstdio>
#include <fstream>

namespace wmap::cli {

void add_common_load_options(CLI::App& sub, CommonLoadOptions& o) {
  sub.add_option("--tp-size", o.tp_size, "Tensor-parallel size T")->capture_default_str();
  sub.add_option("--tp-rank", o.tp_rank, "This rank, 0 <= R < T")->capture_default_str();
  sub.add_option("--ep-size", o.ep_size, "Expert-parallel size P (divides T)")->capture_default_str();
  sub.add_option("--mtp-layers", o.mtp_layers, "MTP layers K to instantiate (default: the checkpoint's; target vllm: none)");
  sub.add_option("--target", o.target, "Whose parameters to produce: trtllm (TensorRT-LLM's PyTorch backend) or vllm")
      ->check(CLI::IsMember({"trtllm", "vllm"}))
      ->capture_default_str();
  sub.add_flag("--attention-dp", o.attention_dp,
               "TensorRT-LLM's attention data parallelism: attention, dense MLPs, shared experts and embeddings "
               "replicated; only routed experts split");
  sub.add_option("--gpus-per-node", o.gpus_per_node,
                 "GPUs per node G; caps TensorRT-LLM's gcd split of DeepSeek's dense MLP (default 8; under mpirun the "
                 "node's rank count)");
  sub.add_option("--catalog", o.catalog, "A catalog saved by `wmap inspect --save-catalog`");
  sub.add_option("--config", o.config, "config.json (default: the checkpoint's)");
  sub.add_option("--plugin-dir", o.plugin_dir, "Folder searched first for plugins");
  sub.add_option("--mappings", o.mappings, "Folder searched first for mapping files");
  sub.add_flag("--json", o.json, "Machine-readable output on stdout");
  sub.add_flag("--prefer-consolidated", o.prefer_consolidated, "Use consolidated*.safetensors over sharded files");
}

LoaderOptions to_loader_options(const CommonLoadOptions& o) {
  LoaderOptions l;
  if (!o.checkpoint.empty()) l.checkpoint = o.checkpoint;
  if (!o.catalog.empty()) l.catalog_file = o.catalog;
  if (!o.config.empty()) l.config_file = o.config;
  if (!o.plugin_dir.empty()) l.plugin_dir = o.plugin_dir;
  if (!o.mappings.empty()) l.mappings_dir = o.mappings;
  LayoutOptions lo;
  lo.tp_size = o.tp_size;
  lo.tp_rank = o.tp_rank;
  lo.ep_size = o.ep_size;
  lo.mtp_layers = o.mtp_layers >= 0 ? std::optional<uint32_t>(o.mtp_layers) : std::nullopt;
  lo.target = o.target;
  lo.attention_dp = o.attention_dp;
  lo.gpus_per_node = o.gpus_per_node;
  l.layout = layout_from_options(lo);
  l.prefer_consolidated = o.prefer_consolidated;
  return l;
}

void report_plan(const PreparedLoad& prepared, bool quiet_ok) {
  const LoadPlan& plan = *prepared.plan;
  for (const auto& p : plan.problems()) {
    std::fprintf(stderr, "wmap: %s: %s\n", std::string(problem_kind_name(p.kind)).c_str(), p.message.c_str());
  }
  for (const auto& w : plan.warnings()) std::fprintf(stderr, "wmap: warning: %s\n", w.c_str());
  if (!plan.ok() || !quiet_ok) std::fprintf(stderr, "wmap: plan %s\n", plan.coverage().c_str());
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
