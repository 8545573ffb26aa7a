#include "wmap/mapping/mapping_registry.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <system_error>

#include "wmap/util/error.h"
#include "wmap/util/install_paths.h"
#include "logger.h"

namespace wmap {
namespace {

std::vector<std::filesystem::path> yaml_files_in(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(folder, ec), end;
  if (ec) throw Error(ErrorCode::kIo, folder.string() + ": cannot list mapping folder: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(ErrorCode::kIo, folder.string() + ": cannot list mapping folder: " + ec.message());
    std::error_code type_ec;
    if (it->path().extension() == ".yaml" && it->is_regular_file(type_ec)) out.push_back(it->path());
  }
  if (ec) throw Error(ErrorCode::kIo, folder.string() + ": cannot list mapping folder: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

MappingRegistry MappingRegistry::load(const std::vector<std::filesystem::path>& folders, const FileSystem& fs) {
  MappingRegistry reg;
  auto warn = [&](std::string message) {
    log().warn("{}", message);
    reg.warnings_.push_back(std::move(message));
  };

  struct Served {
    const MappingFile* file;
    size_t folder;
  };
  std::map<std::string, Served, std::less<>> served;
  std::set<std::filesystem::path> seen_folders;
  for (const auto& folder : folders) {
    std::error_code ec;
    if (!std::filesystem::exists(folder, ec)) {
      warn("mapping folder " + folder.string() + " does not exist; skipped");
      continue;
    }
    if (!std::filesystem::is_directory(folder, ec)) {
      throw Error(ErrorCode::kInvalidArgument, folder.string() + ": mapping folder is not a directory");
    }
    // The same folder reached twice (say through WMAP_MAPPINGS_PATH and the default) would otherwise
    // shadow itself.
    auto canonical = std::filesystem::weakly_canonical(folder, ec);
    if (!seen_folders.insert(ec ? folder : canonical).second) continue;
    const size_t folder_index = reg.folders_.size();
    reg.folders_.push_back(folder);

    for (const auto& path : yaml_files_in(folder)) {
      reg.files_.push_back(std::make_unique<MappingFile>(load_mapping_file(path, fs)));
      const MappingFile* file = reg.files_.back().get();
      for (const auto& arch : file->architectures) {
        auto [it, inserted] = served.try_emplace(arch, Served{file, folder_index});
        if (inserted) continue;
        const MappingFile* winner = it->second.file;
        if (it->second.folder == folder_index) {
          throw Error(ErrorCode::kMalformedInput,
                      "architecture '" + arch + "' is served by two mapping files in " + folder.string() + ": " +
                          winner->file.string() + ":" + std::to_string(winner->line_of_architectures) + " and " +
                          file->file.string() + ":" + std::to_string(file->line_of_architectures));
        }
        warn("architecture '" + arch + "': mapping file " + file->file.string() + " is shadowed by " +
             winner->file.string() + " (an earlier folder wins)");
      }
    }
  }
  reg.by_architecture_.reserve(served.size());
  for (const auto& [arch, s] : served) reg.by_architecture_.emplace_back(arch, s.file);  // already sorted
  return reg;
}

const MappingFile* MappingRegistry::find(std::string_view architecture) const {
  auto it = std::lower_bound(by_architecture_.begin(), by_architecture_.end(), architecture,
                             [](const auto& entry, std::string_view a) { return entry.first < a; });
  return (it != by_architecture_.end() && it->first == architecture) ? it->second : nullptr;
}

const MappingFile& MappingRegistry::require(std::string_view architecture) const {
  if (const MappingFile* f = find(architecture)) return *f;
  std::string folders, known;
  for (const auto& f : folders_) folders += (folders.empty() ? "" : ", ") + f.string();
  for (const auto& [arch, file] : by_architecture_) known += (known.empty() ? "" : ", ") + arch;
  throw Error(ErrorCode::kNotFound, "no mapping file serves architecture '" + std::string(architecture) +
                                        "' (searched: " + (folders.empty() ? "no folder" : folders) +
                                        "; known architectures: " + (known.empty() ? "none" : known) + ")");
}

std::vector<std::string> MappingRegistry::architectures() const {
  std::vector<std::string> out;
  out.reserve(by_architecture_.size());
  for (const auto& entry : by_architecture_) out.push_back(entry.first);
  return out;
}

std::vector<std::filesystem::path> mapping_search_path(const std::optional<std::filesystem::path>& cli_dir,
                                                       const std::vector<std::filesystem::path>& defaults) {
  return search_path(cli_dir ? std::vector<std::filesystem::path>{*cli_dir} : std::vector<std::filesystem::path>{},
                     "mappings", "WMAP_MAPPINGS_PATH", defaults);
}

std::vector<std::filesystem::path> mapping_search_path(const std::optional<std::filesystem::path>& cli_dir,
                                                       const std::filesystem::path& default_dir) {
  return mapping_search_path(cli_dir, std::vector<std::filesystem::path>{default_dir});
}

}  // namespace wmap
