#pragma once
// A checkpoint's config.json, with typed accessors whose errors name the file and the field
// ("config.json: num_attention_heads: expected an integer, found \"x\""). Dotted paths reach
// nested objects ("quantization_config.weight_block_size"). Immutable after parse; thread-safe.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/io/file_io.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

class ModelConfig {
 public:
  static ModelConfig parse(std::string_view json, const std::string& label);
  // Reads `file` through `fs` (fault injection reaches it); the error names the file.
  static ModelConfig load(const std::filesystem::path& file, const FileSystem& fs = FileSystem::standard());
  ModelConfig();
  ~ModelConfig();
  ModelConfig(ModelConfig&&) noexcept;
  ModelConfig& operator=(ModelConfig&&) noexcept;
  ModelConfig(const ModelConfig&);
  ModelConfig& operator=(const ModelConfig&);

  const std::string& label() const;
  // architectures[0]; throws naming the file when absent.
  std::string architecture() const;

  bool has(std::string_view path) const;  // present and not null
  int64_t require_int(std::string_view path) const;
  int64_t get_int(std::string_view path, int64_t fallback) const;
  std::optional<int64_t> find_int(std::string_view path) const;
  double require_number(std::string_view path) const;
  bool get_bool(std::string_view path, bool fallback) const;
  std::string require_string(std::string_view path) const;
  std::string get_string(std::string_view path, std::string fallback) const;
  std::vector<int64_t> get_int_list(std::string_view path) const;         // empty when absent
  std::vector<std::string> get_string_list(std::string_view path) const;  // empty when absent
  // The keys of the object at `path`, in file order (empty when absent; throws for a non-object).
  std::vector<std::string> keys(std::string_view path) const;
  // The value at `path` as minified JSON text; nullopt when absent.
  std::optional<std::string> json_at(std::string_view path) const;
  // This config with top-level field `key` set to the JSON value `json` (added at the end, or
  // replacing the field's value); the label stays. Throws kMalformedInput when `json` is invalid.
  ModelConfig with_field(std::string_view key, std::string_view json) const;
  // A positive integer field (> 0), the common case for sizes.
  uint64_t require_positive(std::string_view path) const;
  // A non-negative integer field (>= 0), `fallback` when absent: counts that may be zero.
  uint64_t get_non_negative(std::string_view path, uint64_t fallback) const;
  // The raw JSON text (for offline plans that carry the config).
  const std::string& text() const;

  // An error naming this file and `path`.
  [[noreturn]] void fail(std::string_view path, const std::string& message) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace wmap
WMAP_PUBLIC_END
