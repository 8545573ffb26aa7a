#pragma once
// Where the running libwmap lives, and the default plugin and mapping folders relative to it
// (`<libdir>/wmap/plugins`, `<libdir>/../share/wmap/mappings`). The build tree mirrors the
// install layout, so both work with no environment variable set. Thread-safe.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

std::filesystem::path core_library_dir();
std::filesystem::path default_plugin_dir();
std::filesystem::path default_mapping_dir();

// The one search-path rule of plugins and mapping files, in order:
//   1. `explicit_dirs` (command-line folders): each must be a directory, else kNotFound naming it
//      and `option` ("--plugin-dir DIR: ...");
//   2. the colon-separated entries of the environment variable `env_var` (read here, once);
//   3. `defaults`.
// Empty entries are skipped, folders of 2 and 3 that are not directories are dropped silently,
// and a folder reached twice (same canonical path) is kept at its first place only.
std::vector<std::filesystem::path> search_path(const std::vector<std::filesystem::path>& explicit_dirs,
                                               std::string_view option, const char* env_var,
                                               const std::vector<std::filesystem::path>& defaults);
// Splits a colon-separated path list (empty entries dropped).
std::vector<std::filesystem::path> split_path_list(const std::string& list);
// The value of an environment variable, read here (never deep inside constructors).
std::optional<std::string> env_value(const char* name);

}  // namespace wmap
WMAP_PUBLIC_END
