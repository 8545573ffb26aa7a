// `wmap plan DIR | --catalog FILE --config FILE [layout] [--json]`
#include <cstdio>

#include "commands.h"
#include "loader_options.h"
#include "wmap/exec/expected_params.h"

namespace wmap::cli {
namespace {

// `--expect PARAMS.json`: the plan against the engine's own parameter list; prints each
// difference as a problem line, returns how many.
size_t check_expected(const LoadPlan& plan, const std::string& file) {
  const std::string text = storage().read_whole_file(file, kMaxParamTableBytes);
  const auto problems = check_expected_params(plan, parse_expected_params(text, file));
  for (const auto& p : problems) {
    std::fprintf(stderr, "wmap: expect: %s: %s\n", std::string(problem_kind_name(p.kind)).c_str(), p.message.c_str());
  }
  if (!problems.empty()) std::fprintf(stderr, "wmap: %zu difference(s) from %s\n", problems.size(), file.c_str());
  return problems.size();
}

int run_plan(const CommonLoadOptions& o, const std::string& expect) {
  LoaderSession session(to_loader_options(o, layout_from_options(o.layout)));
  auto prepared = session.prepare();
  const LoadPlan& plan = *prepared->plan;
  if (o.json) {
    const std::string text = plan.to_json();
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    std::printf("architecture: %s (plugin %s%s)\n", prepared->architecture.c_str(), prepared->plugin->name.c_str(),
                prepared->mapping ? (", mapping " + prepared->mapping->file.filename().string()).c_str() : "");
    std::printf("layout: %s\n", plan.layout().to_string().c_str());
    std::printf("catalog: %zu tensors in %zu shards\n", prepared->catalog->size(), prepared->catalog->shards().size());
    std::printf("plan: %s\n", plan.coverage().c_str());
    std::printf("certificate: %s\n", plan.certificate().c_str());
    std::printf("bytes: %llu to load, %llu to read; catalog %.3fs, plan %.3fs\n",
                static_cast<unsigned long long>(plan.bytes_to_load()),
                static_cast<unsigned long long>(plan.bytes_to_read()), prepared->catalog_seconds,
                prepared->plan_seconds);
  }
  report_plan(*prepared, true);
  const size_t differences = expect.empty() ? 0 : check_expected(plan, expect);
  const int rc = plan.ok() && differences == 0 ? 0 : 1;
  keep_until_exit(std::move(prepared));
  return rc;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto o = std::make_shared<CommonLoadOptions>();
  auto expect = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("plan", "Build and validate the load plan of one rank (reads headers only)");
  sub->add_option("DIR", o->checkpoint, "Checkpoint directory (or use --catalog and --config)");
  add_common_load_options(*sub, *o);
  sub->add_option("--expect", *expect,
                  "An engine's parameter list, {name: {shape, dtype}} (tools/dump_engine_params.py): every difference "
                  "from the plan is named, exit 1");
  return [o, expect] { return run_plan(*o, *expect); };
}

}  // namespace wmap::cli
