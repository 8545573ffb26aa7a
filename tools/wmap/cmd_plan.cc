// `wmap plan DIR | --catalog FILE --config FILE [layout] [--json]`
#include <cstdio>

#include "commands.h"
#include "loader_options.h"

namespace wmap::cli {
namespace {

int run_plan(const CommonLoadOptions& o) {
  LoaderSession session(to_loader_options(o));
  auto prepared = session.prepare();
  const LoadPlan& plan = *prepared->plan;
  if (o.json) {
    const std::string text = plan.to_json();
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    std::printf("architecture: %s (plugin %s%s)\n", prepared->architecture.c_str(), prepared->plugin->name.c_str(),
                prepared->mapping ? (", mapping " + prepared->mapping->file.filename().string()).c_str() : "");
    std::printf("layout: %s\n", o.tp_size ? session.options().layout.to_string().c_str() : "");
    std::printf("catalog: %zu tensors in %zu shards\n", prepared->catalog.size(), prepared->catalog.shards().size());
    std::printf("plan: %s\n", plan.coverage().c_str());
    std::printf("bytes: %llu to load, %llu to read; catalog %.3fs, plan %.3fs\n",
                static_cast<unsigned long long>(plan.bytes_to_load()), static_cast<unsigned long long>(plan.bytes_to_read()),
                prepared->catalog_seconds, prepared->plan_seconds);
  }
  report_plan(*prepared, true);
  const int rc = plan.ok() ? 0 : 1;
  keep_until_exit(std::move(prepared));
  return rc;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto o = std::make_shared<CommonLoadOptions>();
  auto* sub = app.add_subcommand("plan", "Build and validate the load plan of one rank (reads headers only)");
  sub->add_option("DIR", o->checkpoint, "Checkpoint directory (or use --catalog and --config)");
  add_common_load_options(*sub, *o);
  return [o] { return run_plan(*o); };
}

}  // namespace wmap::cli
