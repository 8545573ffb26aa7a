#include "wmap/util/install_paths.h"

#include <dlfcn.h>

#include <cstdlib>
#include <set>
#include <sstream>

#include "wmap/build_info.h"
#include "wmap/util/error.h"

extern "C" const char* wmap_core_build_id(void) { return WMAP_BUILD_ID; }

namespace wmap {

std::filesystem::path core_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&wmap_core_build_id), &info) != 0 && info.dli_fname != nullptr) {
    std::error_code ec;
    auto p = std::filesystem::canonical(info.dli_fname, ec);
    if (!ec) return p.parent_path();
  }
  return std::filesystem::current_path();
}

std::filesystem::path default_plugin_dir() { return core_library_dir() / "wmap" / "plugins"; }

std::filesystem::path default_mapping_dir() {
  return (core_library_dir().parent_path() / "share" / "wmap" / "mappings").lexically_normal();
}

std::vector<std::filesystem::path> search_path(const std::vector<std::filesystem::path>& explicit_dirs,
                                               std::string_view option, const char* env_var,
                                               const std::vector<std::filesystem::path>& defaults) {
  std::vector<std::filesystem::path> out;
  std::set<std::filesystem::path> seen;
  auto add = [&](const std::filesystem::path& dir) {
    std::error_code ec;
    const auto canonical = std::filesystem::weakly_canonical(dir, ec);
    if (seen.insert(ec ? dir.lexically_normal() : canonical).second) out.push_back(dir);
  };
  std::error_code ec;
  for (const auto& dir : explicit_dirs) {
    if (dir.empty()) continue;
    if (!std::filesystem::is_directory(dir, ec)) {
      throw Error(ErrorCode::kNotFound,
                  dir.string() + ": " + std::string(option) + " folder does not exist or is not a directory");
    }
    add(dir);
  }
  std::vector<std::filesystem::path> rest;
  if (auto env = env_value(env_var)) rest = split_path_list(*env);
  rest.insert(rest.end(), defaults.begin(), defaults.end());
  for (const auto& dir : rest) {
    if (!dir.empty() && std::filesystem::is_directory(dir, ec)) add(dir);
  }
  return out;
}

std::vector<std::filesystem::path> split_path_list(const std::string& list) {
  std::vector<std::filesystem::path> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ':')) {
    if (!item.empty()) out.emplace_back(item);
  }
  return out;
}

std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

}  // namespace wmap
