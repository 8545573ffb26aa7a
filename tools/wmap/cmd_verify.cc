// `wmap verify PATH [--manifest FILE] [--catalog FILE] [--jobs N] [--json] [--require-digests]`:
// hashes every shard whole (SHA-256, files in parallel, bounded memory) and compares each with
// its expected digest (wmap/catalog/shard_digests.h names the sources and their order).
// Exit 0: every digest known matched; 1: a mismatch (or, with --require-digests, a shard with no
// expected digest); 2: unusable input.
#include <cstdio>
#include <optional>
#include <unordered_map>

#include "commands.h"
#include "loader_options.h"
#include "wmap/catalog/shard_digests.h"
#include "wmap/catalog/shard_set.h"
#include "wmap/io/remote.h"
#include "wmap/util/json_text.h"
#include "wmap/util/log.h"
#include "wmap/util/progress.h"

namespace wmap::cli {
namespace {

struct VerifyCliOptions {
  std::string path, manifest, catalog;
  unsigned jobs = 0;
  bool json = false, require = false, prefer_consolidated = false;
};

}  // namespace

std::vector<ShardCheck> hash_shards(const ShardSet& set, const std::vector<std::optional<ExpectedDigest>>& expected,
                                    unsigned jobs, const char* label) {
  std::optional<Progress> progress;  // made on the first report: verify_files knows the total then
  VerifyOptions vo;
  vo.jobs = jobs;
  vo.fs = &storage();
  vo.progress = [&](uint64_t done, uint64_t total) {
    if (!progress) progress.emplace(label, total, true, Progress::kBytes);
    progress->update(done);
  };
  std::vector<ShardCheck> checks = verify_files(set.root, set.files, expected, vo);
  if (progress) progress->finish();
  return checks;
}

namespace {

int run_verify(const VerifyCliOptions& o) {
  ShardSet set = discover_shards(o.path, {.prefer_consolidated = o.prefer_consolidated, .fs = &storage()});
  for (const auto& w : set.warnings) log_warn(w);
  DigestSources sources;
  sources.manifest = o.manifest;
  Catalog saved;
  if (!o.catalog.empty()) {
    saved = Catalog::load_json_file(o.catalog, storage());
    sources.saved_catalog = &saved;
    sources.saved_catalog_file = o.catalog;
  }
  const auto expected = expected_digests(set.root, set.files, sources);
  std::vector<ShardCheck> checks = hash_shards(set, expected, o.jobs, "verify");
  // A saved catalog also knows each shard's size: say so when a mismatch is a truncation.
  std::unordered_map<std::string, uint64_t> catalogued;
  for (const ShardRecord& s : saved.shards()) catalogued[s.file] = s.signature.size;
  for (size_t i = 0; i < checks.size(); ++i) {
    auto it = catalogued.find(set.files[i]);
    ShardCheck& c = checks[i];
    if (it == catalogued.end() || it->second == c.bytes) continue;
    c.note = "size " + std::to_string(c.bytes) + ", catalogued " + std::to_string(it->second);
    if (c.status == ShardCheck::Status::kNoDigest) c.status = ShardCheck::Status::kMismatch;
  }
  size_t bad = 0, missing = 0, ok = 0;
  for (const auto& c : checks) {
    bad += c.failed();
    missing += c.status == ShardCheck::Status::kNoDigest;
    ok += c.status == ShardCheck::Status::kMatch;
  }
  if (o.json) {
    std::string out = "{\"checkpoint\":" + json_string(display_path(set.root)) + ",\"files\":[";
    for (size_t i = 0; i < checks.size(); ++i) out += (i ? ",\n" : "\n") + checks[i].json();
    out += "],\"matched\":" + std::to_string(ok) + ",\"mismatched\":" + std::to_string(bad) +
           ",\"no_digest\":" + std::to_string(missing) + "}\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  } else {
    for (const auto& c : checks) std::printf("%s\n", c.line().c_str());
    std::printf("verify: %zu of %zu shards match their expected SHA-256, %zu mismatch, %zu have no expected digest\n",
                ok, checks.size(), bad, missing);
  }
  for (const auto& c : checks) {
    if (c.failed()) std::fprintf(stderr, "wmap: error: %s\n", c.line().c_str());
  }
  return bad || (o.require && missing) ? 1 : 0;
}

}  // namespace

Runner add_verify(CLI::App& app) {
  auto opts = std::make_shared<VerifyCliOptions>();
  auto* sub = app.add_subcommand("verify", "Hash every shard (SHA-256) and compare with its expected digest");
  sub->add_option("PATH", opts->path, "Checkpoint directory or one .safetensors file")->required();
  sub->add_option("--manifest", opts->manifest, "Expected digests in sha256sum format (`<hex>  <file>`)");
  sub->add_option("--catalog", opts->catalog, "A catalog saved with `inspect --save-catalog F --digests`");
  sub->add_option("--jobs", opts->jobs, "Files hashed at once (default: hardware threads)");
  sub->add_flag("--json", opts->json, "One JSON object: each file's status, digests and source");
  sub->add_flag("--require-digests", opts->require, "Exit 1 when a shard has no expected digest");
  sub->add_flag("--prefer-consolidated", opts->prefer_consolidated, "Use consolidated*.safetensors over sharded files");
  return [opts] { return run_verify(*opts); };
}

}  // namespace wmap::cli
