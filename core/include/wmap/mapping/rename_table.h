#pragma once
// The rename and ignore rules of one mapping file, compiled once (RE2) and applied to every key of a
// checkpoint.
//
// Semantics:
// - Every pattern must match the WHOLE source key (RE2 ANCHOR_BOTH), whether or not it is written
//   with `^...$`. The canonical key is then `replace` with `\0`..`\9` substituted, i.e. exactly
//   what RE2::Replace gives for a pattern anchored with `^...$`; a pattern without anchors does not
//   rename substrings (`w1` matches only the key "w1").
// - Rules are tried in file order; the first one that matches wins. A key no rule matches passes
//   through unchanged. Renames are not chained: each source key is rewritten at most once.
// - `ignore` patterns are matched, also whole-key, against the SOURCE key; an ignored key is neither
//   renamed nor part of the renamed catalog.
// - apply() refuses two source keys that end up under one canonical key (two renames, or a rename
//   onto a key that also exists un-renamed), naming both sources and the rules' file:line.
//
// A RenameTable is immutable after construction and safe to use from many threads; copies share the
// compiled regexes. A default-constructed table has no rules (identity, nothing ignored).
// RenamedCatalog points into the Catalog it was built from, which must outlive it.

#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/mapping/mapping_file.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct RenamedTensor {
  // Canonical name: a view of source->name when no rule renamed it, else of a string the
  // RenamedCatalog owns (no copy per key: a 410k-tensor catalog passes most keys through).
  std::string_view name;
  const TensorRecord* source = nullptr;  // the checkpoint tensor (source->name is the original key)
  int rule = -1;                         // index into the table's rules, -1 when passed through
};

class RenamedCatalog {
 public:
  // Sorted by canonical name, names unique.
  std::span<const RenamedTensor> tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }
  // Binary search on the canonical name; null when absent.
  const RenamedTensor* find(std::string_view canonical) const;
  // Every tensor whose canonical name starts with `canonical_prefix + "."`, in name order.
  std::span<const RenamedTensor> prefix(std::string_view canonical_prefix) const;
  // Source records matched by an `ignore` pattern, in source-name order.
  std::span<const TensorRecord* const> ignored() const { return ignored_; }

 private:
  friend class RenameTable;
  std::vector<RenamedTensor> tensors_;
  std::shared_ptr<std::deque<std::string>> rewritten_;  // shared by copies: the views stay valid
  std::vector<const TensorRecord*> ignored_;
};

class RenameTable {
 public:
  RenameTable();  // identity: no rules, nothing ignored
  // Compiles every pattern. Throws kMalformedInput naming file:line for a pattern RE2 rejects (with
  // RE2's message) and for a `replace` that names a group the pattern lacks or is otherwise invalid.
  explicit RenameTable(const MappingFile& mapping);

  // The canonical name of a source key (the key itself when no rule matches).
  std::string canonical(std::string_view key) const;
  // Whether an `ignore` pattern matches the source key.
  bool ignored(std::string_view key) const;
  // Renames every (not ignored) key of the catalog; throws kDuplicateTensor on collisions.
  RenamedCatalog apply(const Catalog& catalog) const;

  bool empty() const;
  size_t rule_count() const;
  const std::filesystem::path& file() const;

 private:
  struct Impl;  // the compiled RE2 objects; kept out of this header so users need no RE2 headers
  std::shared_ptr<const Impl> impl_;
};

}  // namespace wmap
WMAP_PUBLIC_END
