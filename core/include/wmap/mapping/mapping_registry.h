#pragma once
// Every mapping file on the search path, indexed by the architectures they serve.
//
// load() reads each folder's `*.yaml` files (in name order), folder by folder. Two files of ONE
// folder serving the same architecture is an error naming both; across folders the earlier folder
// wins and each shadowed file is named in a warning (kept in warnings() and logged). A folder that
// does not exist is skipped with a warning; a folder listed twice is read once.
//
// Immutable after load() and safe to share across threads; the MappingFile pointers it hands out
// live as long as the registry.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/mapping/mapping_file.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

class MappingRegistry {
 public:
  MappingRegistry() = default;  // no mapping files

  // Mapping files are read through `fs` (fault injection reaches them).
  static MappingRegistry load(const std::vector<std::filesystem::path>& folders,
                              const FileSystem& fs = FileSystem::standard());

  // The file serving `architecture` (config.json architectures[0]); null when none does.
  const MappingFile* find(std::string_view architecture) const;
  // Like find(), but throws kNotFound naming the architecture, the folders searched and every known
  // architecture.
  const MappingFile& require(std::string_view architecture) const;

  // Known architectures, sorted.
  std::vector<std::string> architectures() const;
  // Every file read, in search order (shadowed ones included).
  const std::vector<std::unique_ptr<MappingFile>>& files() const { return files_; }
  const std::vector<std::filesystem::path>& folders() const { return folders_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::vector<std::filesystem::path> folders_;
  std::vector<std::unique_ptr<MappingFile>> files_;
  std::vector<std::pair<std::string, const MappingFile*>> by_architecture_;  // sorted by name
  std::vector<std::string> warnings_;
};

// The mapping search path, by search_path()'s rules (install_paths.h): `cli_dir` (--mappings DIR)
// when given, then each entry of the colon-separated WMAP_MAPPINGS_PATH, then `defaults` (the
// loader passes the plugin folders, then <prefix>/share/wmap/mappings). Folders that do not exist
// are dropped, except `cli_dir`: one that is not a directory throws kNotFound.
std::vector<std::filesystem::path> mapping_search_path(const std::optional<std::filesystem::path>& cli_dir,
                                                       const std::vector<std::filesystem::path>& defaults);
std::vector<std::filesystem::path> mapping_search_path(const std::optional<std::filesystem::path>& cli_dir,
                                                       const std::filesystem::path& default_dir);

}  // namespace wmap
WMAP_PUBLIC_END
