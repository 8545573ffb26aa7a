#pragma once
// SHA-256 of each shard computed from the bytes a load reads, as it reads them (`load --verify`):
// never a second read of what the plan reads. Private to core/src/exec; PlanRunner is its user.
//
// A shard's units are claimed in the schedule's order, which is (shard, span begin): a unit's
// bytes are hashed once every earlier unit of its shard has been (the worker waits for its turn,
// holding only what it read; the earliest unit never waits, so the wait always ends). Bytes the
// plan does not read (the header, skipped tensors, gaps between a unit's runs) are read by the
// hasher where they fall, and counted. A shard this rank reads less than 7/8 of the tensor data of
// is "partial": not
// hashed unless `--verify=full`, which then reads the rest; full also hashes a shard this rank
// does not read at all. Digests are compared after the last unit, before anything is handed over.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "wmap/catalog/shard_digests.h"
#include "wmap/exec/executor.h"
#include "wmap/util/sha256.h"

namespace wmap::exec_detail {

class ShardHasher {
 public:
  using FileFor = std::function<const RandomAccessFile&(uint32_t shard)>;
  ShardHasher(const LoadPlan& plan, const ExecOptions& options, FileFor file_for);

  bool enabled() const { return mode_ != ExecOptions::Verify::kOff; }
  // The order for the read pool to claim units in: one core hashes one shard at a time, and the
  // schedule takes shards one after the other, so with two or more hashed shards their units are
  // interleaved by progress through each shard (each shard's own order kept: the wait for a
  // turn still ends). Empty: the schedule's order. Zero units stay first.
  std::vector<uint32_t> claim_order() const;
  bool hashes(size_t unit) const { return enabled() && unit_seq_[unit] != kNone; }

  struct Part {
    uint64_t offset = 0;
    const std::byte* data = nullptr;
    uint64_t len = 0;
  };
  // Waits for the unit's turn (or `failed`), then hashes the holes before and between `parts`
  // (sorted by offset) and the parts. `mapped`: the parts are views of a mapping (a shrunk file
  // faults; the fault is an error naming the shard).
  void hash_unit(size_t unit, std::span<const Part> parts, bool mapped, const std::atomic<bool>& failed);
  void wake_all();  // the load failed: every waiting worker returns

  // What a required verification (kRead, kFull) cannot meet, known before any byte is read: one
  // line per shard this rank reads that will not be hashed (a partial read under kRead) or has no
  // expected digest. Empty under kBestEffort, and when everything can be verified.
  std::vector<std::string> unmet() const;

  // After the last unit: each hashed shard's tail, `--verify=full`'s separate reads, and the
  // comparison. One check per shard, in catalog order.
  std::vector<ShardCheck> finish();
  uint64_t extra_bytes() const { return extra_bytes_; }

 private:
  static constexpr uint32_t kNone = ~uint32_t{0};
  struct Shard {
    std::mutex mutex;
    std::condition_variable turn;
    std::optional<Sha256> sha;  // set: hashed as read
    uint32_t hashed_units = 0;
    uint64_t next = 0;   // bytes [0, next) hashed
    uint64_t read = 0;   // bytes this rank's plan reads of it
    uint64_t extra = 0;  // bytes read only for the hash
    bool ordered = true;
  };
  void hash_range(uint32_t shard, Shard& s, uint64_t offset, const std::byte* data, uint64_t len, bool mapped);
  void fill_to(uint32_t shard, Shard& s, uint64_t offset);  // reads and hashes [s.next, offset)

  const LoadPlan& plan_;
  ExecOptions::Verify mode_;
  const std::vector<std::optional<ExpectedDigest>>& expected_;
  FileFor file_for_;
  std::vector<uint32_t> unit_seq_;  // per unit: its place among its shard's hashed units
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> extra_bytes_{0};
};

}  // namespace wmap::exec_detail
