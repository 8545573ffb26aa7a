// The single read, verified: `wmap verify` hashes whole shards, `wmap load --verify` hashes the
// bytes as the load reads them; both compare with the expected SHA-256 from each source
// (Hugging Face cache blob names, `hf download --local-dir` metadata, a sha256sum manifest, a
// catalog saved with --digests) and name the file, both digests and the source of a mismatch.
// Checkpoints, caches and manifests are built here; digests come from OpenSSL via sha256_hex.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <cstring>
#include <map>

#include "reliability/reliability_util.h"
#include "wmap/exec/destinations.h"
#include "wmap/util/sha256.h"

namespace wmap::test {
namespace {

namespace fs = std::filesystem;
const std::string kShard1 = "model-00001-of-00003.safetensors";
const std::string kShard2 = "model-00002-of-00003.safetensors";
const std::string kShard3 = "model-00003-of-00003.safetensors";

std::string q(const fs::path& p) { return shell_quote(p.string()); }

// Flips one byte at `offset`, keeping the file's mtime (bit rot, not an edit).
void corrupt_byte(const fs::path& file, uint64_t offset, char value = 0) {
  struct stat st;
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  std::string bytes = read_file(file);
  ASSERT_LT(offset, bytes.size());
  bytes[offset] = value ? value : static_cast<char>(bytes[offset] ^ 0x5a);
  write_file(file, bytes);
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
}

class Verify : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_ = dir_ / "ckpt";
    synth("llama", ckpt_, "--preset small --shards 3");
    for (const auto& f : {kShard1, kShard2, kShard3}) digest_[f] = sha256_hex(read_file(ckpt_ / f));
    manifest_ = dir_ / "SHA256SUMS";
    write_file(manifest_, digest_[kShard1] + "  " + kShard1 + "\n" + digest_[kShard2] + " *" + kShard2 + "\n" +
                              digest_[kShard3] + "  ./" + kShard3 + "\n");
  }
  CommandResult verify(const fs::path& ckpt, const std::string& flags = "") {
    return run_wmap("-q verify " + q(ckpt) + " " + flags);
  }
  CommandResult load(const fs::path& ckpt, const std::string& flags) {
    return run_wmap("-q load " + q(ckpt) + " " + flags);
  }
  // A mismatch report names the file, the expected digest, the actual one and the source.
  void expect_mismatch(const CommandResult& r, const std::string& shard, const std::string& source) {
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find(shard), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("expected sha256 " + digest_[shard]), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(source), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("actual "), std::string::npos) << r.err;
  }
  TempDir dir_;
  fs::path ckpt_, manifest_;
  std::map<std::string, std::string> digest_;
};

TEST_F(Verify, ManifestMatchesEveryShardExitZero) {
  auto r = verify(ckpt_, "--manifest " + q(manifest_));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const auto& [f, d] : digest_)
    EXPECT_NE(r.out.find("ok  " + (ckpt_ / f).string() + "  sha256 " + d), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3 of 3 shards match"), std::string::npos) << r.out;
  auto j = verify(ckpt_, "--manifest " + q(manifest_) + " --json");
  EXPECT_EQ(j.exit_code, 0) << j.err;
  EXPECT_NE(j.out.find("\"matched\":3,\"mismatched\":0,\"no_digest\":0"), std::string::npos) << j.out;
}

// --verify with no expected digest for a shard the load reads is a verification that cannot be
// met: refused before any read, naming the shard; best-effort loads and says "no digest".
TEST_F(Verify, LoadVerifyWithoutADigestIsRefusedAndBestEffortReportsIt) {
  auto r = load(ckpt_, "--verify");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find((ckpt_ / kShard1).string() + ": no expected digest"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("verify=best-effort"), std::string::npos) << r.err;
  auto b = load(ckpt_, "--verify=best-effort --json");
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.out.find("\"status\":\"no digest\""), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("\"verified\":\"best-effort\""), std::string::npos) << b.out;
}

TEST_F(Verify, NoExpectedDigestIsAClearLineNotAFailure) {
  auto r = verify(ckpt_);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(
      r.out.find("no digest  " + (ckpt_ / kShard2).string() + ": sha256 " + digest_[kShard2] + "; no expected digest"),
      std::string::npos)
      << r.out;
  EXPECT_EQ(verify(ckpt_, "--require-digests").exit_code, 1);
}

TEST_F(Verify, CorruptedByteCaughtByVerifyAndByLoadVerify) {
  corrupt_byte(ckpt_ / kShard2, read_file(ckpt_ / kShard2).size() / 2);
  expect_mismatch(verify(ckpt_, "--manifest " + q(manifest_)), kShard2, "manifest " + manifest_.string() + ":2");
  for (const char* io : {"pread", "mmap"}) {
    auto r = load(ckpt_, std::string("--verify --io ") + io + " --manifest " + q(manifest_));
    expect_mismatch(r, kShard2, "manifest " + manifest_.string() + ":2");
    EXPECT_NE(r.err.find("no parameter was handed over"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("loaded"), std::string::npos) << io << ": " << r.out;
  }
  // The shards that are intact still match; without --verify the corrupt load succeeds (the
  // silent wrong load this guards against).
  auto ok = verify(ckpt_, "--manifest " + q(manifest_));
  EXPECT_NE(ok.out.find("ok  " + (ckpt_ / kShard1).string()), std::string::npos) << ok.out;
  EXPECT_EQ(load(ckpt_, "").exit_code, 0);
}

TEST_F(Verify, TruncatedAndExtendedShardsAreCaught) {
  const auto shard = ckpt_ / kShard3;
  const std::string bytes = read_file(shard);
  write_file(shard, bytes.substr(0, bytes.size() - 100));
  expect_mismatch(verify(ckpt_, "--manifest " + q(manifest_)), kShard3, "manifest");
  auto l = load(ckpt_, "--verify --manifest " + q(manifest_));  // the header no longer fits the file
  EXPECT_NE(l.exit_code, 0);
  EXPECT_NE(l.err.find(kShard3), std::string::npos) << l.err;
  write_file(shard, bytes + std::string(64, '\0'));
  auto v = verify(ckpt_, "--manifest " + q(manifest_));
  expect_mismatch(v, kShard3, "manifest");
  EXPECT_NE(v.err.find("over " + std::to_string(bytes.size() + 64) + " bytes"), std::string::npos) << v.err;
  l = load(ckpt_, "--verify --manifest " + q(manifest_));
  EXPECT_NE(l.exit_code, 0);
  EXPECT_NE(l.err.find(kShard3), std::string::npos) << l.err;
}

// snapshots/<rev>/<file> -> ../../blobs/<sha256>, as huggingface_hub lays out its cache.
TEST_F(Verify, HuggingFaceCacheBlobNamesAreTheExpectedDigests) {
  const fs::path repo = dir_ / "hub" / "models--org--tiny";
  const fs::path snap = repo / "snapshots" / "0123abcd";
  fs::create_directories(repo / "blobs");
  fs::create_directories(snap);
  for (const auto& e : fs::directory_iterator(ckpt_)) {
    const std::string name = e.path().filename().string();
    const std::string blob = digest_.count(name) ? digest_[name] : sha256_hex(read_file(e.path()));
    fs::copy_file(e.path(), repo / "blobs" / blob);
    fs::create_symlink(fs::path("..") / ".." / "blobs" / blob, snap / name);
  }
  auto r = verify(snap);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("3 of 3 shards match"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hf-cache blob name"), std::string::npos) << r.out;
  auto l = load(snap, "--verify --json");
  EXPECT_EQ(l.exit_code, 0) << l.err;
  EXPECT_NE(l.out.find("\"status\":\"ok\""), std::string::npos) << l.out;
  corrupt_byte(repo / "blobs" / digest_[kShard1], 4000);
  expect_mismatch(verify(snap), kShard1, "hf-cache blob name");
  expect_mismatch(load(snap, "--verify"), kShard1, "hf-cache blob name");
}

// <dir>/.cache/huggingface/download/<file>.metadata: commit hash, etag (SHA-256 for LFS), time.
TEST_F(Verify, LocalDirMetadataEtagsAreTheExpectedDigests) {
  const fs::path meta = ckpt_ / ".cache" / "huggingface" / "download";
  fs::create_directories(meta);
  const double now = static_cast<double>(time(nullptr)) + 5;
  for (const auto& [f, d] : digest_) {
    write_file(meta / (f + ".metadata"),
               "11c5a3d5811f50298f278a704980280950aedb10\n" + d + "\n" + std::to_string(now) + "\n");
  }
  auto r = verify(ckpt_);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("hf local-dir metadata " + (meta / (kShard2 + ".metadata")).string()), std::string::npos)
      << r.out;
  EXPECT_EQ(load(ckpt_, "--verify").exit_code, 0);
  corrupt_byte(ckpt_ / kShard2, 10000);
  expect_mismatch(verify(ckpt_), kShard2, "hf local-dir metadata");
  expect_mismatch(load(ckpt_, "--verify"), kShard2, "hf local-dir metadata");
  // A checkpoint folder inside the local dir: the metadata is found above it.
  write_file(meta / "malformed.safetensors.metadata", "only one line\n");
  EXPECT_EQ(verify(ckpt_ / kShard1).exit_code, 0);
}

TEST_F(Verify, SavedCatalogDigestsVerifyLoadsAndAreNotBlessedWhenCorrupt) {
  const fs::path catalog = dir_ / "catalog.json";
  auto s = run_wmap("-q inspect " + q(ckpt_) + " --save-catalog " + q(catalog) + " --digests");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(read_file(catalog).find("\"sha256\":\"" + digest_[kShard2] + "\""), std::string::npos);
  auto r = verify(ckpt_, "--catalog " + q(catalog));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("saved catalog " + catalog.string()), std::string::npos) << r.out;
  auto l = load(ckpt_, "--catalog " + q(catalog) + " --verify");
  EXPECT_EQ(l.exit_code, 0) << l.err;
  EXPECT_NE(l.out.find("3 of 3 shards match"), std::string::npos) << l.out;
  corrupt_byte(ckpt_ / kShard1, 6000);  // same size and mtime: the signature check cannot see it
  expect_mismatch(verify(ckpt_, "--catalog " + q(catalog)), kShard1, "saved catalog");
  expect_mismatch(load(ckpt_, "--catalog " + q(catalog) + " --verify"), kShard1, "saved catalog");
  // Recording digests over a shard that contradicts the manifest is refused.
  auto bad = run_wmap("-q inspect " + q(ckpt_) + " --save-catalog " + q(dir_ / "c2.json") + " --digests --manifest " +
                      q(manifest_));
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_NE(bad.err.find("not recording digests"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir_ / "c2.json"));
}

TEST_F(Verify, MalformedManifestNamesTheLine) {
  write_file(dir_ / "bad.txt", digest_[kShard1] + "  " + kShard1 + "\nnot-a-digest  x.safetensors\n");
  auto r = verify(ckpt_, "--manifest " + q(dir_ / "bad.txt"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find((dir_ / "bad.txt").string() + ":2: expected '<64 hex digits>  <file>'"), std::string::npos)
      << r.err;
}

// A rank that reads part of each shard cannot verify it from its own reads (review F3: it used to
// say "not verified" and exit 0): --verify refuses before any read, naming each shard and how to
// meet it; --verify=best-effort loads and reports them; --verify=full reads the rest and hashes it.
TEST_F(Verify, PartialReadRankSaysSoAndFullReadsTheRest) {
  auto r = load(ckpt_, "--tp-size 2 --tp-rank 1 --verify --manifest " + q(manifest_));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("verify=read cannot be met for 3 shard(s), so nothing was read"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find((ckpt_ / kShard2).string() + ": not verified: this rank reads"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("verify=full reads the rest to hash it whole"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("loaded"), std::string::npos) << "nothing is loaded: " << r.out;
  auto b = load(ckpt_, "--tp-size 2 --tp-rank 1 --verify=best-effort --manifest " + q(manifest_));
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.out.find("not verified  " + (ckpt_ / kShard2).string() + " (partial read); this rank reads"),
            std::string::npos)
      << b.out;
  EXPECT_NE(b.out.find("3 not verified (partial read)"), std::string::npos) << b.out;
  auto f = load(ckpt_, "--tp-size 2 --tp-rank 1 --verify=full --manifest " + q(manifest_) + " --json");
  EXPECT_EQ(f.exit_code, 0) << f.err;
  for (const auto& [file, d] : digest_) EXPECT_NE(f.out.find("\"actual\":\"" + d + "\""), std::string::npos) << f.out;
  EXPECT_EQ(f.out.find("not verified"), std::string::npos) << f.out;
  // In the header's __metadata__ (still valid JSON): a byte no rank's plan reads.
  const size_t pt = read_file(ckpt_ / kShard2).find("\"pt\"");
  ASSERT_NE(pt, std::string::npos);
  corrupt_byte(ckpt_ / kShard2, pt + 1, 'q');
  expect_mismatch(load(ckpt_, "--tp-size 2 --tp-rank 1 --verify=full --manifest " + q(manifest_)), kShard2, "manifest");
}

// The TP1 load hashes every shard from its own reads: the bytes read only for the hash are the
// headers (a few KiB), not a second pass over the data.
TEST_F(Verify, Tp1LoadHashesFromItsOwnReads) {
  auto r = load(ckpt_, "--verify --manifest " + q(manifest_) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.out.find("\"verify_extra_bytes\":");
  ASSERT_NE(at, std::string::npos) << r.out;
  const uint64_t extra = std::stoull(r.out.substr(at + 21));
  uint64_t headers = 0;
  for (const auto& f : {kShard1, kShard2, kShard3}) {
    const std::string b = read_file(ckpt_ / f);
    uint64_t n = 0;
    std::memcpy(&n, b.data(), 8);
    headers += 8 + n;
  }
  EXPECT_EQ(extra, headers) << r.out;
}

// load_into: a mismatch is found after the bytes are in the caller's buffers; the error names
// every destination already written.
TEST_F(Verify, LoadIntoMismatchNamesTheDestinationsWritten) {
  corrupt_byte(ckpt_ / kShard3, read_file(ckpt_ / kShard3).size() - 10);
  LoaderOptions o = loader_options(ckpt_);
  LoaderSession session(o);
  auto prepared = session.prepare();
  auto host = make_device(DeviceSpec::parse("host"));
  HostDestinations dests = host_destinations(*prepared->plan);
  ExecOptions exec;
  exec.verify = ExecOptions::Verify::kRead;
  exec.expected_sha256 = expected_digests(*prepared->catalog, manifest_);
  expect_wmap_error(
      [&] { session.load_into(*prepared, *host, dests.table, exec); },
      {"SHA-256 mismatch", kShard3, digest_[kShard3], "destinations already written (", "model.embed_tokens.weight"});
}

}  // namespace
}  // namespace wmap::test
