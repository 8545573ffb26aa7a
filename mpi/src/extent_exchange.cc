#include "wmap/mpi/extent_exchange.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>

#include "wmap/util/error.h"

namespace wmap::mpi {
namespace {

constexpr int kDataTag = 7;  // one tag: MPI keeps messages between two ranks in order

// The test hook (extent_exchange.h): which transfer of this rank fails as a broken transport would.
// exchange-shard-changed: this rank's shards are touched (mtime) just before its reader opens them,
// as a publisher rewriting a checkpoint between the plan and the reads would.
enum class Fault { kNone, kIrecv, kRecvWait, kShardChanged };
Fault injected_fault() {
  const char* v = std::getenv("WMAP_FAULT_INJECT");
  if (v == nullptr) return Fault::kNone;
  const std::string_view s(v);
  return s == "exchange-irecv"           ? Fault::kIrecv
         : s == "exchange-recv-wait"     ? Fault::kRecvWait
         : s == "exchange-shard-changed" ? Fault::kShardChanged
                                         : Fault::kNone;
}

void check(int rc, const MpiWorld& world, const char* what) {
  if (rc != MPI_SUCCESS)
    throw Error(ErrorCode::kIo, world.tag() + ": " + what + " failed (MPI error " + std::to_string(rc) + ")");
}

// One chunk in flight: free -> read by the reader thread -> ready -> sent by the MPI thread ->
// free once its sends completed.
struct Slot {
  std::vector<std::byte> buf;                 // the chunk's file span
  std::vector<std::vector<std::byte>> packs;  // per destination, when its rows are scattered
  std::vector<MPI_Request> requests;          // MPI thread only
  bool free = true, ready = false;            // guarded by the exchange's mutex
};

// One rank's part of the exchange. Its destructor stops and joins the reader thread, so no
// thread is left behind whatever happens.
class Exchange {
 public:
  Exchange(const MpiWorld& world, const Catalog& catalog, const std::vector<std::vector<FileExtent>>& needed,
           ExtentStoreFileSystem& store, const FileSystem& fs, Fault fault)
      : world_(world),
        catalog_(catalog),
        fs_(fs),
        needed_(needed),
        store_(store),
        me_(world.rank()),
        n_(world.size()),
        fault_(fault) {
    const std::vector<FileRange> ranges = read_ranges(needed);
    stats_.union_bytes = range_bytes(ranges);
    ch_ = chunk_ranges(ranges, exchange_chunk_bytes(stats_.union_bytes, n_));
    for (size_t c = static_cast<size_t>(me_); c < ch_.chunks.size(); c += static_cast<size_t>(n_)) own_.push_back(c);
    stats_.chunks_owned = own_.size();
    slots_.resize(kExchangeSlots);
    for (Slot& s : slots_) s.packs.resize(static_cast<size_t>(n_));
  }
  ~Exchange() { stop_reader(); }

  ExchangeStats run() {
    post_receives();
    reader_ = std::thread([this] { read_own_chunks(); });
    send_own_chunks();
    stop_reader();
    for (Slot& s : slots_) {
      check(MPI_Waitall(static_cast<int>(s.requests.size()), s.requests.data(), MPI_STATUSES_IGNORE), world_,
            "MPI_Waitall (sends)");
      s.requests.clear();
    }
    // Everything addressed to us. An empty message stands for data its owner could not read;
    // that owner throws its read error after this, and the caller's agreement names it.
    std::vector<MPI_Status> statuses(recvs_.size());
    int rc = MPI_Waitall(static_cast<int>(recvs_.size()), recvs_.data(), statuses.data());
    if (fault_ == Fault::kRecvWait) rc = MPI_ERR_OTHER;
    check(rc, world_, "MPI_Waitall (receives)");
    for (MPI_Status& s : statuses) {
      int got = 0;
      MPI_Get_count(&s, MPI_BYTE, &got);
      stats_.received_bytes += static_cast<uint64_t>(got);
      if (!world_.same_node(s.MPI_SOURCE, me_)) stats_.received_off_node_bytes += static_cast<uint64_t>(got);
    }
    return stats_;
  }
  std::exception_ptr read_error() const { return read_error_; }
  void stop_reader() {
    if (!reader_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;  // after a normal run the reader has finished already
      cv_.notify_all();
    }
    reader_.join();
  }

 private:
  // Every receive is posted before any send, so a sender waiting on its oldest slot never
  // waits on a rank that is itself blocked sending. Our rows inside a chunk are contiguous in
  // the store, so one receive per (chunk, owner) lands them in place.
  void post_receives() {
    ExtentCursor mine(needed_[static_cast<size_t>(me_)]);
    for (size_t c = 0; c < ch_.chunks.size(); ++c) {
      const Chunk& k = ch_.chunks[c];
      uint64_t first = UINT64_MAX;
      const uint64_t bytes =
          mine.overlap(k.shard, k.begin, k.end, [&](uint64_t, uint64_t at, uint64_t) { first = std::min(first, at); });
      if (static_cast<int>(c % n_) == me_ || bytes == 0) continue;
      recvs_.emplace_back();
      int rc = MPI_Irecv(store_.data() + first, static_cast<int>(bytes), MPI_BYTE, static_cast<int>(c % n_), kDataTag,
                         world_.world(), &recvs_.back());
      if (fault_ == Fault::kIrecv) rc = MPI_ERR_OTHER;
      check(rc, world_, "MPI_Irecv");
    }
  }

  // The reader thread: reads our chunks into slots, in order, as slots come free.
  void read_own_chunks() {
    std::vector<std::unique_ptr<RandomAccessFile>> files(catalog_.shards().size());
    for (size_t i = 0; i < own_.size(); ++i) {
      Slot& slot = slots_[i % slots_.size()];
      bool failed;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return slot.free || stopping_; });
        if (stopping_) return;
        slot.free = false;
        failed = read_error_ != nullptr;
      }
      if (!failed) {
        try {
          const Chunk& k = ch_.chunks[own_[i]];
          if (!files[k.shard]) {
            if (fault_ == Fault::kShardChanged) {
              const struct timespec now[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
              ::utimensat(AT_FDCWD, catalog_.shard_path(k.shard).c_str(), now, 0);
            }
            auto f = fs_.open(catalog_.shard_path(k.shard), IoMode::kPread);
            catalog_.require_unchanged(k.shard, f->signature());  // the peers read at our offsets
            files[k.shard] = std::move(f);
          }
          slot.buf.resize(k.end - k.begin);
          // One scattered read per chunk: on remote storage its pieces become a few concurrent
          // ranged GETs instead of one round trip each.
          std::vector<ReadSegment> segs;
          for (size_t p = k.piece_begin; p < k.piece_end; ++p) {
            const FileRange& x = ch_.pieces[p];
            segs.push_back({x.begin, x.size(), slot.buf.data() + (x.begin - k.begin)});
            stats_.storage_bytes += x.size();
          }
          const bool sorted =
              std::adjacent_find(segs.begin(), segs.end(), [](const ReadSegment& a, const ReadSegment& b) {
                return b.offset < a.offset + a.len;
              }) == segs.end();
          if (sorted) {
            files[k.shard]->read_segments(segs);
          } else {
            for (const ReadSegment& g : segs) files[k.shard]->read(g.offset, std::span(g.dst, g.len));
          }
        } catch (...) {
          std::lock_guard lock(mu_);
          read_error_ = std::current_exception();
        }
      }
      std::lock_guard lock(mu_);
      slot.ready = true;
      cv_.notify_all();
    }
  }

  // Frees the slots whose sends completed; drives MPI's progress while we wait.
  void progress() {
    bool sending = false;
    for (Slot& s : slots_) {
      if (s.requests.empty()) continue;
      sending = true;
      int done = 0;
      check(MPI_Testall(static_cast<int>(s.requests.size()), s.requests.data(), &done, MPI_STATUSES_IGNORE), world_,
            "MPI_Testall");
      if (!done) continue;
      s.requests.clear();
      std::lock_guard lock(mu_);
      s.free = true;
      cv_.notify_all();
    }
    if (!sending) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, world_.world(), &flag, MPI_STATUS_IGNORE);
    }
  }

  // Our chunks, as the reader delivers them: our rows copied into the store, each other rank
  // sent its rows (packed when scattered), testing the transfers while the reader works.
  void send_own_chunks() {
    std::vector<ExtentCursor> dest;
    dest.reserve(static_cast<size_t>(n_));
    for (int d = 0; d < n_; ++d) dest.emplace_back(needed_[static_cast<size_t>(d)]);
    std::vector<std::pair<uint64_t, uint64_t>> parts;  // (offset in chunk, length)
    for (size_t i = 0; i < own_.size(); ++i) {
      const Chunk& k = ch_.chunks[own_[i]];
      Slot& slot = slots_[i % slots_.size()];
      bool failed;
      while (true) {
        {
          std::unique_lock lock(mu_);
          if (cv_.wait_for(lock, std::chrono::microseconds(200), [&] { return slot.ready; })) {
            slot.ready = false;
            failed = read_error_ != nullptr;
            break;
          }
        }
        progress();
      }
      for (int d = 0; d < n_; ++d) {
        if (d == me_) {
          dest[static_cast<size_t>(d)].overlap(k.shard, k.begin, k.end, [&](uint64_t off, uint64_t at, uint64_t len) {
            if (!failed) std::memcpy(store_.data() + at, slot.buf.data() + (off - k.begin), len);
          });
          continue;
        }
        parts.clear();
        const uint64_t bytes = dest[static_cast<size_t>(d)].overlap(
            k.shard, k.begin, k.end,
            [&](uint64_t off, uint64_t, uint64_t len) { parts.emplace_back(off - k.begin, len); });
        if (bytes == 0) continue;
        const std::byte* src = nullptr;
        int count = 0;  // 0: the error marker
        if (!failed) {
          count = static_cast<int>(bytes);
          src = parts.size() == 1 ? slot.buf.data() + parts.front().first
                                  : pack(slot.packs[static_cast<size_t>(d)], slot.buf, parts, bytes);
          stats_.sent_bytes += bytes;
          if (!world_.same_node(d, me_)) stats_.sent_off_node_bytes += bytes;
        }
        slot.requests.emplace_back();
        check(MPI_Isend(src, count, MPI_BYTE, d, kDataTag, world_.world(), &slot.requests.back()), world_, "MPI_Isend");
      }
      if (slot.requests.empty()) {
        std::lock_guard lock(mu_);
        slot.free = true;
        cv_.notify_all();
      }
    }
  }

  static const std::byte* pack(std::vector<std::byte>& out, const std::vector<std::byte>& buf,
                               const std::vector<std::pair<uint64_t, uint64_t>>& parts, uint64_t bytes) {
    out.resize(bytes);
    uint64_t at = 0;
    for (const auto& part : parts) {
      std::memcpy(out.data() + at, buf.data() + part.first, part.second);
      at += part.second;
    }
    return out.data();
  }

  const MpiWorld& world_;
  const Catalog& catalog_;
  const FileSystem& fs_;
  const std::vector<std::vector<FileExtent>>& needed_;
  ExtentStoreFileSystem& store_;
  const int me_, n_;
  const Fault fault_;
  Chunking ch_;
  std::vector<size_t> own_;
  std::vector<Slot> slots_;
  std::vector<MPI_Request> recvs_;
  ExchangeStats stats_;  // storage_bytes: reader thread until joined
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr read_error_;  // guarded by mu_; once set, later chunks are not read
  bool stopping_ = false;          // guarded by mu_
  std::thread reader_;
};

[[noreturn]] void abort_job(const MpiWorld& world, std::exception_ptr error) {
  std::string why = "unknown error";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
  }
  std::fprintf(stderr,
               "%s: error during the exchange: %s; the other ranks would wait for it forever: aborting the job\n",
               world.tag().c_str(), why.c_str());
  std::fflush(stderr);
  MPI_Abort(world.world(), 1);
  std::abort();  // MPI_Abort does not return; if it did, ending this process still ends the job
}

}  // namespace

uint64_t exchange_chunk_bytes(uint64_t union_bytes, int ranks) {
  const uint64_t mib = uint64_t{1} << 20;
  const uint64_t want = union_bytes / (static_cast<uint64_t>(std::max(ranks, 1)) * 8);
  return std::clamp<uint64_t>((want + mib - 1) / mib * mib, mib, kMaxExchangeChunkBytes);
}

ExchangeStats exchange_extents(const MpiWorld& world, const Catalog& catalog,
                               const std::vector<std::vector<FileExtent>>& needed, ExtentStoreFileSystem& store,
                               const FileSystem& fs) {
  const auto t0 = std::chrono::steady_clock::now();
  ExchangeStats stats;
  std::exception_ptr read_error;
  // Anything thrown from here on is a transfer (or set-up) failure on this rank alone, while
  // the others are already exchanging: it cannot be agreed, so it ends the job. The exchange
  // outlives the abort: posted transfers still point into its buffers.
  std::unique_ptr<Exchange> x;
  try {
    x = std::make_unique<Exchange>(world, catalog, needed, store, fs, injected_fault());
    stats = x->run();
    read_error = x->read_error();
  } catch (...) {
    if (x) x->stop_reader();
    abort_job(world, std::current_exception());
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (read_error) std::rethrow_exception(read_error);
  return stats;
}

}  // namespace wmap::mpi
