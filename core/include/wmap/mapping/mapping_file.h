#pragma once
// One mapping file (`mappings/<family>.yaml`): which architectures it serves, which plugin builds
// their module tree, the checkpoint-key renames and the keys that are expected but not loaded.
//
//   architectures: [MixtralForCausalLM]   # required, non-empty list of strings, no duplicates
//   plugin: llama                         # required string
//   rename:                               # optional list of {match, replace}; first match wins
//     - match: '^model\.layers\.(\d+)\.block_sparse_moe\.gate\.(.+)$'
//       replace: 'model.layers.\1.mlp.gate.\2'
//   ignore:                               # optional list of regexes (source keys)
//     - '^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$'
//   include: [rules/nvfp4.yaml]           # optional list of rule sets shared between mapping files
//
// A rule set (an included file) holds only `rename` and `ignore`. Paths are relative to the
// including file, inside its folder (no absolute path, no ".."); a rule set includes nothing
// further. Its rules come after the file's own, in include order, so a file's own, more specific
// renames win (first match wins). Each rule remembers the file it is written in, so errors name
// the rule set's file:line. Only load_mapping_file can resolve `include` (it needs the folder):
// parse_mapping_text refuses it.
//
// Parsing checks the YAML shape only; the regexes are compiled (and rejected) by RenameTable.
// Every error is a kMalformedInput naming `file:line`. A parsed MappingFile is plain data: copyable,
// immutable after parsing and safe to share across threads.

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/io/file_io.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// Limits that keep a mapping file's cost bounded (first-match renames try every rule on every key,
// so a checkpoint's keys x rules regex matches): a larger file or more rules is a kMalformedInput
// naming the file, raised before any regex is compiled. Real mapping files hold tens of rules.
inline constexpr size_t kMaxMappingFileBytes = 1 << 20;  // 1 MiB of YAML
inline constexpr size_t kMaxMappingRules = 4096;         // rename + ignore rules together

struct MappingRule {
  std::string pattern;  // RE2 syntax, matched against the whole source key
  std::string replace;  // `\1`..`\9` name the pattern's groups (`\0` the whole key)
  int line = 0;         // 1-based line of the rule in its file
  std::string file;     // the file the rule is written in (the mapping file or a rule set it includes)
};

struct IgnoreRule {
  std::string pattern;  // RE2 syntax, matched against the whole source key
  int line = 0;
  std::string file;
};

struct MappingFile {
  std::filesystem::path file;  // the file it was read from (or the label given to parse_mapping_text)
  std::vector<std::string> architectures;
  std::string plugin;
  std::vector<MappingRule> rename;
  std::vector<IgnoreRule> ignore;
  int line_of_architectures = 0;
  std::vector<std::string> includes;  // as written; their rules are already in rename/ignore
};

// Parses YAML text; `label` names the source in error messages (usually the file path).
MappingFile parse_mapping_text(std::string_view yaml, const std::string& label);
// Reads (through `fs`) and parses a file: kNotFound when it does not exist, kIo when it cannot be
// read, kMalformedInput when it is invalid; each naming the file.
MappingFile load_mapping_file(const std::filesystem::path& file, const FileSystem& fs = FileSystem::standard());

}  // namespace wmap
WMAP_PUBLIC_END
