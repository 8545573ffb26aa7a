// `wmap load DIR [layout] [--device host|cuda:N] [--catalog FILE] [--dump FILE] [--allow-partial]`
#include <cstdio>

#include "commands.h"
#include "loader_options.h"
#include "wmap/error.h"
#include "wmap/json_text.h"
#include "wmap/progress.h"

namespace wmap::cli {
namespace {

struct LoadOptions {
  CommonLoadOptions common;
  std::string device = "host";
  std::string dump;
  std::string io = "mmap";
  unsigned workers = 0;
  bool allow_partial = false;
};

std::string replace_rank(std::string s, uint32_t rank) {
  for (size_t at; (at = s.find("{rank}")) != std::string::npos;) s.replace(at, 6, std::to_string(rank));
  return s;
}

int run_load(const LoadOptions& o) {
  if (o.common.checkpoint.empty()) throw Error(ErrorCode::kInvalidArgument, "wmap load needs the checkpoint DIR");
  LoaderOptions lo = to_loader_options(o.common);
  lo.allow_partial = o.allow_partial;
  LoaderSession session(lo);
  auto prepared = session.prepare();
  report_plan(*prepared, true);
  auto device = make_device(o.device);
  ExecOptions exec;
  if (o.io == "mmap") {
    exec.io = IoMode::kMmap;
  } else if (o.io == "pread") {
    exec.io = IoMode::kPread;
  } else {
    throw Error(ErrorCode::kInvalidArgument, "--io '" + o.io + "': expected mmap or pread");
  }
  exec.workers = o.workers;
  Progress bar("load", prepared->plan->bytes_to_load() >> 20, true, " MiB");
  exec.progress = [&bar](uint64_t done, uint64_t) { bar.update(done >> 20); };
  LoadedModel model = session.load(*prepared, *device, exec);
  bar.finish();
  if (!o.dump.empty()) dump_safetensors(model, *device, replace_rank(o.dump, lo.layout.tp_rank));
  const auto& s = model.stats;
  const double gbps = s.seconds > 0 ? static_cast<double>(s.bytes_loaded) / s.seconds / 1e9 : 0;
  const uint64_t rss = peak_rss_bytes();
  if (o.common.json) {
    std::printf("{\"params\":%zu,\"bytes_loaded\":%llu,\"bytes_read\":%llu,\"seconds\":%.6f,\"gbps\":%.3f,\"peak_rss\":%llu,"
                "\"io_path\":%s,\"workers\":%u,\"device\":%s,\"catalog_seconds\":%.6f,\"plan_seconds\":%.6f,\"plan_id\":\"%s\"}\n",
                model.params.size(), static_cast<unsigned long long>(s.bytes_loaded), static_cast<unsigned long long>(s.bytes_read),
                s.seconds, gbps, static_cast<unsigned long long>(rss), json_string(s.io_path).c_str(), s.workers,
                json_string(device->name()).c_str(), prepared->catalog_seconds, prepared->plan_seconds,
                prepared->plan->plan_id().c_str());
  } else {
    std::printf("loaded %zu parameters (%.1f MiB) for %s on %s in %.3fs: %.2f GB/s, peak RSS %.1f MiB, %s, %u worker(s)\n",
                model.params.size(), static_cast<double>(s.bytes_loaded) / (1 << 20), lo.layout.to_string().c_str(),
                device->name().c_str(), s.seconds, gbps, static_cast<double>(rss) / (1 << 20), s.io_path.c_str(), s.workers);
  }
  return prepared->plan->ok() ? 0 : 1;
}

}  // namespace

Runner add_load(CLI::App& app) {
  auto o = std::make_shared<LoadOptions>();
  auto* sub = app.add_subcommand("load", "Load one rank's parameters (validating the plan first)");
  sub->add_option("DIR", o->common.checkpoint, "Checkpoint directory");
  add_common_load_options(*sub, o->common);
  sub->add_option("--device", o->device, "host or cuda:N")->capture_default_str();
  sub->add_option("--dump", o->dump, "Write every loaded parameter to this .safetensors file ({rank} is replaced)");
  sub->add_option("--io", o->io, "mmap or pread")->capture_default_str();
  sub->add_option("--load-workers", o->workers, "Parallel parameter workers (default: from the core count)");
  sub->add_flag("--allow-partial", o->allow_partial, "Load what the plan can, even when it reports problems (exit 1)");
  return [o] { return run_load(*o); };
}

}  // namespace wmap::cli
