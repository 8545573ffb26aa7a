#include "shard_hasher.h"

#include <algorithm>

#include "wmap/util/error.h"

namespace wmap::exec_detail {
namespace {

struct HashViewCtx {
  Sha256* sha;
  const std::byte* data;
  uint64_t len;
};

void hash_view(void* p) {
  auto* c = static_cast<HashViewCtx*>(p);
  c->sha->update(std::span<const std::byte>(c->data, c->len));
}

}  // namespace

ShardHasher::ShardHasher(const LoadPlan& plan, const ExecOptions& options, FileFor file_for)
    : plan_(plan),
      mode_(options.verify),
      expected_(options.expected_sha256),
      file_for_(std::move(file_for)),
      unit_seq_(plan.schedule().units().size(), kNone) {
  if (!enabled()) return;
  const auto& shards = plan.catalog().shards();
  shards_.resize(shards.size());
  for (auto& s : shards_) s = std::make_unique<Shard>();
  // What each shard's units read (their union, less the gaps inside them), and whether their
  // spans come in file order (the schedule sorts them so; checked, not assumed).
  std::vector<uint64_t> last_end(shards.size(), 0), last_begin(shards.size(), 0), count(shards.size(), 0);
  for (const ReadUnit& u : plan.schedule().units()) {
    if (u.kind == ReadUnit::Kind::kZero) continue;
    Shard& s = *shards_[u.shard];
    if (u.begin < last_begin[u.shard]) s.ordered = false;
    last_begin[u.shard] = u.begin;
    const uint64_t from = std::max(u.begin, last_end[u.shard]);
    if (u.end > from) s.read += (u.end - from) - std::min(u.end - from, (u.end - u.begin) - u.wanted);
    last_end[u.shard] = std::max(last_end[u.shard], u.end);
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    Shard& s = *shards_[i];
    const uint64_t size = shards[i].signature.size;
    const uint64_t data = size - std::min(size, 8 + shards[i].header_bytes);
    // Hashed as read when in order and this rank reads at least 7/8 of its tensor data (the
    // rest, the header and skipped tensors, is read by the hasher); --verify=full hashes every
    // shard it reads at all.
    const bool most = s.read > 0 && s.read >= data - data / 8;
    if (s.ordered && s.read > 0 && (most || mode_ == ExecOptions::Verify::kFull)) s.sha.emplace();
  }
  const auto& units = plan.schedule().units();
  for (size_t ui = 0; ui < units.size(); ++ui) {
    const ReadUnit& u = units[ui];
    if (u.kind == ReadUnit::Kind::kZero || !shards_[u.shard]->sha) continue;
    unit_seq_[ui] = static_cast<uint32_t>(count[u.shard]++);
  }
}

std::vector<uint32_t> ShardHasher::claim_order() const {
  if (!enabled()) return {};
  size_t hashed = 0;
  for (const auto& s : shards_) hashed += s->sha.has_value();
  if (hashed < 2) return {};
  const auto& units = plan_.schedule().units();
  const auto& shards = plan_.catalog().shards();
  std::vector<uint32_t> order(units.size());
  std::vector<double> key(units.size());
  for (size_t i = 0; i < units.size(); ++i) {
    order[i] = static_cast<uint32_t>(i);
    const ReadUnit& u = units[i];
    const double size = static_cast<double>(std::max<uint64_t>(1, shards[u.shard].signature.size));
    key[i] = u.kind == ReadUnit::Kind::kZero ? -1.0 : static_cast<double>(u.begin) / size;
  }
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return key[a] < key[b]; });
  return order;
}

void ShardHasher::hash_range(uint32_t shard, Shard& s, uint64_t offset, const std::byte* data, uint64_t len,
                             bool mapped) {
  if (offset + len <= s.next) return;  // a shared source already hashed for an earlier reader
  fill_to(shard, s, offset);
  const uint64_t skip = s.next - offset;
  HashViewCtx ctx{&*s.sha, data + skip, len - skip};
  if (mapped) {
    if (guard_sigbus(hash_view, &ctx) != nullptr) {
      throw Error(ErrorCode::kIo, plan_.catalog().shard_path(shard).string() +
                                      ": the mapped file shrank while it was hashed (SIGBUS in bytes [" +
                                      std::to_string(offset) + ", " + std::to_string(offset + len) + "))");
    }
  } else {
    hash_view(&ctx);
  }
  s.next = offset + len;
}

void ShardHasher::fill_to(uint32_t shard, Shard& s, uint64_t offset) {
  if (offset <= s.next) return;
  const RandomAccessFile& f = file_for_(shard);
  std::vector<std::byte> buf(std::min<uint64_t>(offset - s.next, uint64_t{4} << 20));
  while (s.next < offset) {
    const uint64_t n = std::min<uint64_t>(buf.size(), offset - s.next);
    f.read(s.next, std::span(buf.data(), n));
    s.sha->update(std::span<const std::byte>(buf.data(), n));
    s.next += n;
    s.extra += n;
    extra_bytes_ += n;
  }
}

void ShardHasher::hash_unit(size_t unit, std::span<const Part> parts, bool mapped, const std::atomic<bool>& failed) {
  const uint32_t seq = unit_seq_[unit];
  if (seq == kNone) return;
  const uint32_t shard = plan_.schedule().units()[unit].shard;
  Shard& s = *shards_[shard];
  std::unique_lock<std::mutex> lock(s.mutex);
  s.turn.wait(lock, [&] { return failed.load() || s.hashed_units == seq; });
  if (s.hashed_units != seq) return;  // the load failed
  try {
    for (const Part& p : parts) hash_range(shard, s, p.offset, p.data, p.len, mapped);
  } catch (...) {
    ++s.hashed_units;  // the load fails; later units must not wait for this one
    s.turn.notify_all();
    throw;
  }
  ++s.hashed_units;
  s.turn.notify_all();
}

void ShardHasher::wake_all() {
  for (auto& s : shards_) {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->turn.notify_all();
  }
}

std::vector<std::string> ShardHasher::unmet() const {
  std::vector<std::string> out;
  if (mode_ != ExecOptions::Verify::kRead && mode_ != ExecOptions::Verify::kFull) return out;
  const Catalog& cat = plan_.catalog();
  for (uint32_t i = 0; i < shards_.size(); ++i) {
    const Shard& s = *shards_[i];
    const bool hashed = s.sha.has_value() || mode_ == ExecOptions::Verify::kFull;
    const uint64_t size = cat.shards()[i].signature.size;
    if (s.read == 0 && mode_ != ExecOptions::Verify::kFull) continue;  // nothing of it is loaded here
    if (!hashed) {
      out.push_back(cat.shard_path(i).string() + ": not verified: this rank reads " + std::to_string(s.read) +
                    " of its " + std::to_string(size) + " bytes" + (s.ordered ? "" : ", out of file order") +
                    " (verify=full reads the rest to hash it whole)");
    } else if (i >= expected_.size() || !expected_[i]) {
      out.push_back(cat.shard_path(i).string() +
                    ": no expected digest (no hf-cache blob, no local-dir metadata, not published by its storage, "
                    "not in a manifest or a saved catalog's digests)");
    }
  }
  return out;
}

std::vector<ShardCheck> ShardHasher::finish() {
  std::vector<ShardCheck> out;
  if (!enabled()) return out;
  const Catalog& cat = plan_.catalog();
  for (uint32_t i = 0; i < shards_.size(); ++i) {
    Shard& s = *shards_[i];
    const std::optional<ExpectedDigest> none;
    const std::optional<ExpectedDigest>& want = i < expected_.size() ? expected_[i] : none;
    const std::string path = cat.shard_path(i).string();
    const RandomAccessFile* f = nullptr;
    if (s.sha || mode_ == ExecOptions::Verify::kFull) f = &file_for_(i);
    if (s.sha) {
      fill_to(i, s, f->size());  // the tail after the last unit
      const uint64_t bytes = s.next;
      out.push_back(compare_digest(path, s.sha->hex(), bytes, want));
    } else if (mode_ == ExecOptions::Verify::kFull) {
      // Read in an order the hash cannot follow, or not read by this rank: a separate read.
      std::string actual = sha256_file(*f);
      extra_bytes_ += f->size();
      s.extra = f->size();
      out.push_back(compare_digest(path, std::move(actual), f->size(), want));
      out.back().note = s.read ? "hashed by a separate read (the plan reads it out of file order)"
                               : "hashed by a separate read (this rank reads none of it)";
    } else {
      ShardCheck c;
      c.file = path;
      c.status = ShardCheck::Status::kPartial;
      if (want) c.expected = want->sha256, c.source = want->source;
      const uint64_t size = cat.shards()[i].signature.size;
      c.note = s.read == 0 ? "this rank reads none of it"
               : !s.ordered
                   ? "the plan reads it out of file order"
                   : "this rank reads " + std::to_string(s.read) + " of its " + std::to_string(size) + " bytes";
      c.note += "; --verify=full reads the rest to hash it";
      out.push_back(std::move(c));
    }
    out.back().extra_bytes = s.extra;
  }
  return out;
}

}  // namespace wmap::exec_detail
