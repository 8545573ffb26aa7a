#pragma once
// CLI options shared by `wmap plan` and `wmap load`: the layout, plugin and mapping folders.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "wmap/io/remote.h"
#include "wmap/loader/loader.h"

namespace wmap::cli {

struct CommonLoadOptions {
  std::string checkpoint, catalog, config, plugin_dir, mappings;
  LayoutOptions layout;  // the layout options are bound straight to the core's type
  PlanOptions plan;      // --max-read-gap, bound the same way
  bool json = false;
  bool prefer_consolidated = false;
};

void add_common_load_options(CLI::App& sub, CommonLoadOptions& o);
// How this command reaches remote paths: the environment's settings with --s3-endpoint and
// --s3-no-sign over them, set once by main before the command runs.
void set_remote_settings(RemoteOptions options);
const RemoteOptions& remote_settings();
// The command's RemoteFileSystem (made from remote_settings() on first use), for the commands that
// read without a LoaderSession (inspect, verify, plan --expect); a session owns one of its own.
const RemoteFileSystem& storage();
// The loader options of `o` with `layout` (validated by the caller: layout_from_options, or the
// RankContext under mpirun), so a bad layout is reported with the core's wording
// (`tp_rank 2 is not below tp_size 2`), as the Python module does.
LoaderOptions to_loader_options(const CommonLoadOptions& o, const Layout& layout);
// Prints the plan's problems (one line each, stderr) and its coverage verdict (LoadPlan::report).
void report_plan(const PreparedLoad& prepared, bool quiet_ok);
// Hands a prepared load to a static owner: the CLI exits right after the command (main.cc skips
// teardown), so a 92k-tensor catalog and plan are not freed piece by piece.
void keep_until_exit(std::unique_ptr<PreparedLoad> prepared);
// Prints `j` as one line of JSON on stdout (invalid UTF-8 in free text, such as file names, is
// replaced rather than thrown on).
void print_json_line(const nlohmann::ordered_json& j);
// Peak resident set size of this process, in bytes (VmHWM).
uint64_t peak_rss_bytes();
// Bytes this process caused to be fetched from storage, page-cache hits excluded (/proc/self/io
// read_bytes); 0 where the kernel does not account it.
uint64_t os_storage_read_bytes();

}  // namespace wmap::cli
