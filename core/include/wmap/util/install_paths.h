#pragma once
// Where the running libwmap lives, and the default plugin and mapping folders relative to it
// (`<libdir>/wmap/plugins`, `<libdir>/../share/wmap/mappings`). The build tree mirrors the
// install layout, so both work with no environment variable set. Thread-safe.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace wmap {

std::filesystem::path core_library_dir();
std::filesystem::path default_plugin_dir();
std::filesystem::path default_mapping_dir();

// Splits a colon-separated path list (empty entries dropped).
std::vector<std::filesystem::path> split_path_list(const std::string& list);
// The value of an environment variable, read here (never deep inside constructors).
std::optional<std::string> env_value(const char* name);

}  // namespace wmap
