#include "wmap/catalog/shard_digests.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "wmap/util/error.h"
#include "wmap/util/json_text.h"
#include "wmap/util/sha256.h"

namespace wmap {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// 1. The shard is a symlink into a Hugging Face cache's blobs/ folder named by its SHA-256.
std::optional<ExpectedDigest> from_hf_cache(const fs::path& shard) {
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(shard, ec))) return std::nullopt;
  const fs::path target = fs::read_symlink(shard, ec);
  if (ec) return std::nullopt;
  const std::string blob = target.filename().string();
  if (target.parent_path().filename() != "blobs" || !looks_like_sha256(blob)) return std::nullopt;
  return ExpectedDigest{lower(blob), "hf-cache blob name (" + target.string() + ")"};
}

// 2. `hf download --local-dir`: three lines, commit hash, etag, timestamp.
std::optional<ExpectedDigest> read_local_dir_metadata(const fs::path& meta, const fs::path& shard) {
  std::ifstream in(meta);
  std::string commit, etag, stamp;
  if (!std::getline(in, commit) || !std::getline(in, etag) || !std::getline(in, stamp)) {
    throw Error(ErrorCode::kMalformedInput, meta.string() + ": expected 3 lines (commit hash, etag, timestamp)");
  }
  etag = trim(etag);
  if (!looks_like_sha256(etag)) return std::nullopt;  // a git blob id: not an LFS file
  double when = 0;
  try {
    when = std::stod(trim(stamp));
  } catch (const std::exception&) {
    throw Error(ErrorCode::kMalformedInput, meta.string() + ":3: '" + trim(stamp) + "' is not a timestamp");
  }
  // huggingface_hub treats metadata older than the file as stale and re-hashes; here the file
  // changing after its download is worth saying, and the digest is still what was downloaded.
  std::string source = "hf local-dir metadata " + meta.string();
  struct stat st;
  if (::stat(shard.c_str(), &st) == 0) {
    const double mtime = static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
    if (mtime - 1 > when) source += ", the file was modified after that download";
  }
  return ExpectedDigest{lower(etag), std::move(source)};
}

// `hf download --local-dir`: <dir>/.cache/huggingface/download/<file>.metadata, in the
// shard's folder or any folder above it up to the checkpoint root's parent.
std::optional<ExpectedDigest> from_local_dir(const fs::path& root, const std::string& file) {
  const fs::path shard = root / file;
  fs::path dir = root.empty() ? fs::path(".") : root, rel = file;
  for (int up = 0; up < 8; ++up) {
    const fs::path meta = dir / ".cache" / "huggingface" / "download" / (rel.string() + ".metadata");
    std::error_code ec;
    if (fs::is_regular_file(meta, ec)) return read_local_dir_metadata(meta, shard);
    const fs::path parent = dir.parent_path();
    if (parent.empty() || parent == dir) break;
    rel = dir.filename() / rel;
    dir = parent;
  }
  return std::nullopt;
}

struct Manifest {
  std::unordered_map<std::string, std::pair<std::string, size_t>> by_name;  // name -> (digest, line)
  std::string file;
};

Manifest read_manifest(const fs::path& path) {
  Manifest m;
  m.file = path.string();
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::kNotFound, path.string() + ": cannot open the manifest");
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    const size_t sp = t.find_first_of(" \t");
    if (sp == std::string::npos || !looks_like_sha256(t.substr(0, sp))) {
      throw Error(ErrorCode::kMalformedInput,
                  path.string() + ":" + std::to_string(n) + ": expected '<64 hex digits>  <file>' (sha256sum format)");
    }
    std::string name = trim(std::string_view(t).substr(sp));
    if (!name.empty() && name[0] == '*') name.erase(0, 1);  // sha256sum's binary-mode marker
    if (name.rfind("./", 0) == 0) name.erase(0, 2);
    if (name.empty()) {
      throw Error(ErrorCode::kMalformedInput, path.string() + ":" + std::to_string(n) + ": no file name");
    }
    m.by_name[name] = {lower(t.substr(0, sp)), n};
  }
  return m;
}

std::optional<ExpectedDigest> from_manifest(const Manifest& m, const std::string& file) {
  for (const std::string& key : {file, fs::path(file).filename().string()}) {
    auto it = m.by_name.find(key);
    if (it != m.by_name.end()) {
      return ExpectedDigest{it->second.first, "manifest " + m.file + ":" + std::to_string(it->second.second)};
    }
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::optional<ExpectedDigest>> expected_digests(const fs::path& root, const std::vector<std::string>& files,
                                                            const DigestSources& sources) {
  std::optional<Manifest> manifest;
  if (!sources.manifest.empty()) manifest = read_manifest(sources.manifest);
  std::unordered_map<std::string, const ShardRecord*> saved;
  if (sources.saved_catalog) {
    for (const ShardRecord& s : sources.saved_catalog->shards()) {
      if (!s.sha256.empty()) saved[s.file] = &s;
    }
  }
  std::vector<std::optional<ExpectedDigest>> out(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    out[i] = from_hf_cache(root / files[i]);
    if (!out[i]) out[i] = from_local_dir(root, files[i]);
    if (!out[i] && manifest) out[i] = from_manifest(*manifest, files[i]);
    if (!out[i]) {
      auto it = saved.find(files[i]);
      if (it != saved.end()) {
        const std::string label = !it->second->sha256_source.empty() ? it->second->sha256_source
                                  : sources.saved_catalog_file.empty()
                                      ? "saved catalog"
                                      : "saved catalog " + sources.saved_catalog_file.string();
        out[i] = ExpectedDigest{it->second->sha256, label};
      }
    }
  }
  return out;
}

std::vector<std::optional<ExpectedDigest>> expected_digests(const Catalog& catalog, const fs::path& manifest,
                                                            const fs::path& catalog_file, const FileSystem* fsys) {
  std::vector<std::string> files;
  for (const ShardRecord& s : catalog.shards()) files.push_back(s.file);
  DigestSources sources;
  sources.manifest = manifest;
  sources.saved_catalog = &catalog;
  sources.saved_catalog_file = catalog_file;
  auto out = expected_digests(catalog.root(), files, sources);
  for (uint32_t i = 0; fsys && i < out.size(); ++i) {
    if (out[i]) continue;
    if (auto d = fsys->published_sha256(catalog.shard_path(i))) out[i] = ExpectedDigest{d->sha256, d->source};
  }
  return out;
}

std::string_view ShardCheck::status_name() const {
  switch (status) {
    case Status::kMatch: return "ok";
    case Status::kMismatch: return "MISMATCH";
    case Status::kNoDigest: return "no digest";
    case Status::kPartial: return "not verified";
  }
  return "?";
}

std::string ShardCheck::line() const {
  std::string s = std::string(status_name()) + "  " + file;
  switch (status) {
    case Status::kMatch: s += "  sha256 " + actual + " (" + source + ")"; break;
    case Status::kMismatch:
      s += ": expected sha256 " + expected + " (" + source + "), actual " + actual + " over " + std::to_string(bytes) +
           " bytes";
      break;
    case Status::kNoDigest:
      s += ": sha256 " + actual + "; no expected digest (no hf-cache blob, no local-dir metadata, not in a manifest " +
           "or a saved catalog's digests)";
      break;
    case Status::kPartial: s += " (partial read)"; break;
  }
  if (!note.empty()) s += "; " + note;
  return s;
}

std::string ShardCheck::json() const {
  std::string o = "{\"file\":" + json_string(file) + ",\"status\":" + json_string(status_name());
  if (!expected.empty()) o += ",\"expected\":\"" + expected + "\"";
  if (!actual.empty()) o += ",\"actual\":\"" + actual + "\"";
  if (!source.empty()) o += ",\"source\":" + json_string(source);
  o += ",\"bytes_hashed\":" + std::to_string(bytes) + ",\"extra_bytes_read\":" + std::to_string(extra_bytes);
  if (!note.empty()) o += ",\"note\":" + json_string(note);
  return o + "}";
}

ShardCheck compare_digest(std::string file, std::string actual, uint64_t bytes,
                          const std::optional<ExpectedDigest>& expected) {
  ShardCheck c;
  c.file = std::move(file);
  c.actual = std::move(actual);
  c.bytes = bytes;
  if (!expected) return c;
  c.expected = expected->sha256;
  c.source = expected->source;
  c.status = c.actual == c.expected ? ShardCheck::Status::kMatch : ShardCheck::Status::kMismatch;
  return c;
}

std::string sha256_file(const RandomAccessFile& file, uint64_t chunk_bytes,
                        const std::function<void(uint64_t)>& on_bytes) {
  Sha256 sha;
  const uint64_t size = file.size();
  const uint64_t step = std::max<uint64_t>(chunk_bytes, 4096);
  if (!file.view(0, size).empty()) {
    // A mapped file: hashed straight out of the page cache (no copy), each chunk's page-table
    // entries populated in one call first.
    for (uint64_t at = 0; at < size;) {
      const uint64_t n = std::min<uint64_t>(step, size - at);
      file.populate(at, n);
      sha.update(file.view(at, n));
      at += n;
      if (on_bytes) on_bytes(n);
    }
    return sha.hex();
  }
  if (const uint64_t big = file.preferred_read_bytes(); big > step) {
    // Remote storage (review F7): large reads (each several concurrent ranged GETs), the next
    // one fetched while the last is hashed. Reads stay on this thread, whose connections they
    // reuse; the hash runs beside them.
    std::vector<std::byte> cur(std::min(big, size)), next(cur.size());
    uint64_t at = 0, n = std::min(big, size);
    if (n) file.read(0, std::span(cur.data(), n));
    while (at < size) {
      auto hashed =
          std::async(std::launch::async, [&sha, &cur, n] { sha.update(std::span<const std::byte>(cur.data(), n)); });
      const uint64_t after = at + n, m = std::min(big, size - std::min(size, after));
      try {
        if (m) file.read(after, std::span(next.data(), m));
      } catch (...) {
        hashed.wait();
        throw;
      }
      hashed.get();
      if (on_bytes) on_bytes(n);
      std::swap(cur, next);
      at = after;
      n = m;
    }
    return sha.hex();
  }
  std::vector<std::byte> buf(step);
  for (uint64_t at = 0; at < size;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), size - at);
    file.read(at, std::span(buf.data(), n));
    sha.update(std::span<const std::byte>(buf.data(), n));
    at += n;
    if (on_bytes) on_bytes(n);
  }
  return sha.hex();
}

std::vector<ShardCheck> verify_files(const fs::path& root, const std::vector<std::string>& files,
                                     const std::vector<std::optional<ExpectedDigest>>& expected,
                                     const VerifyOptions& options) {
  const FileSystem& fsys = options.fs ? *options.fs : FileSystem::standard();
  std::vector<ShardCheck> out(files.size());
  std::vector<std::unique_ptr<RandomAccessFile>> opened(files.size());
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const unsigned jobs = std::max<unsigned>(1, std::min<size_t>(options.jobs ? options.jobs : hw, files.size()));
  std::mutex progress_mutex, error_mutex;
  std::exception_ptr error;
  // Runs body(i) for every file on `jobs` threads; the first error stops the rest.
  auto parallel = [&](const std::vector<size_t>& order, const std::function<void(size_t)>& body) {
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t k; (k = next.fetch_add(1)) < order.size();) {
        try {
          body(order[k]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) error = std::current_exception();
          next = order.size();
        }
      }
    };
    {
      std::vector<std::jthread> pool;
      for (unsigned t = 1; t < jobs; ++t) pool.emplace_back(worker);
      worker();
    }
    if (error) std::rethrow_exception(error);
  };
  std::vector<size_t> order(files.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Opened in parallel: a remote object's open is a round trip (review F7).
  parallel(order, [&](size_t i) { opened[i] = fsys.open(root / files[i], options.io); });
  uint64_t total = 0;
  for (const auto& f : opened) total += f->size();
  // Largest first: the last file to start is a small one, so the workers finish together.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return opened[a]->size() > opened[b]->size(); });
  std::atomic<uint64_t> done{0};
  parallel(order, [&](size_t i) {
    std::string actual = sha256_file(*opened[i], options.chunk_bytes, [&](uint64_t n) {
      const uint64_t now = done += n;
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        options.progress(now, total);
      }
    });
    // The storage's own digest (the hub's LFS SHA-256, S3's checksum) when no other source knows one.
    std::optional<ExpectedDigest> want = expected.at(i);
    if (!want) {
      if (auto d = opened[i]->published_sha256()) want = ExpectedDigest{d->sha256, d->source};
    }
    out[i] = compare_digest(opened[i]->path(), std::move(actual), opened[i]->size(), want);
    opened[i].reset();
  });
  return out;
}

}  // namespace wmap
