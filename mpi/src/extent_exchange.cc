#include "wmap/mpi/extent_exchange.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cstring>

#include "wmap/util/error.h"

namespace wmap::mpi {
namespace {

constexpr int kDataTag = 7;  // one tag: MPI keeps messages between two ranks in order

void check(int rc, const MpiWorld& world, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(ErrorCode::kIo, world.tag() + ": " + what + " failed (MPI error " + std::to_string(rc) + ")");
}

// One chunk in flight: free -> read by the reader thread -> ready -> sent by the MPI thread ->
// free once its sends completed.
struct Slot {
  std::vector<std::byte> buf;                  // the chunk's file span
  std::vector<std::vector<std::byte>> packs;   // per destination, when its overlap is scattered
  std::vector<MPI_Request> requests;           // MPI thread only
  bool free = true, ready = false;             // guarded by the exchange's mutex
};

}  // namespace

uint64_t exchange_chunk_bytes(uint64_t union_bytes, int ranks) {
  const uint64_t mib = uint64_t{1} << 20;
  const uint64_t want = union_bytes / (static_cast<uint64_t>(std::max(ranks, 1)) * 8);
  return std::clamp<uint64_t>((want + mib - 1) / mib * mib, mib, 32 * mib);
}

ExchangeStats exchange_extents(const MpiWorld& world, const Catalog& catalog, const std::vector<std::vector<FileExtent>>& needed,
                               ExtentStoreFileSystem& store) {
  const auto t0 = std::chrono::steady_clock::now();
  const int me = world.rank(), n = world.size();
  std::vector<FileExtent> all;
  for (const auto& e : needed) all.insert(all.end(), e.begin(), e.end());
  const std::vector<FileExtent> merged = merge_extents(std::move(all));
  const Chunking ch = chunk_extents(merged, exchange_chunk_bytes(extent_bytes(merged), n));
  ExchangeStats stats;

  // 1. Every receive is posted before any send, so a sender waiting on its oldest slot never
  //    waits on a rank that is itself blocked sending.
  std::vector<MPI_Request> recvs;
  {
    ExtentCursor mine(needed[me]);
    for (size_t c = 0; c < ch.chunks.size(); ++c) {
      const Chunk& k = ch.chunks[c];
      uint64_t first = UINT64_MAX;
      const uint64_t bytes = mine.overlap(k.shard, k.begin, k.end, [&](uint64_t, uint64_t at, uint64_t) { first = std::min(first, at); });
      if (static_cast<int>(c % n) == me || bytes == 0) continue;
      recvs.emplace_back();
      check(MPI_Irecv(store.data() + first, static_cast<int>(bytes), MPI_BYTE, static_cast<int>(c % n), kDataTag, world.world(),
                      &recvs.back()),
            world, "MPI_Irecv");
    }
  }

  // 2. Own chunks: a reader thread reads them into slots while this thread (the only one that
  //    calls MPI) copies our part into the store and sends each other rank its part, testing the
  //    transfers while it waits, so storage reads and transfers overlap.
  std::vector<size_t> own;
  for (size_t c = static_cast<size_t>(me); c < ch.chunks.size(); c += static_cast<size_t>(n)) own.push_back(c);
  stats.chunks_owned = own.size();
  std::vector<Slot> slots(kExchangeSlots);
  for (Slot& s : slots) s.packs.resize(n);
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr read_error;  // guarded by mu; once set, later chunks are not read
  std::thread reader([&] {
    std::vector<std::unique_ptr<RandomAccessFile>> files(catalog.shards().size());
    for (size_t i = 0; i < own.size(); ++i) {
      Slot& slot = slots[i % slots.size()];
      bool failed;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return slot.free; });
        slot.free = false;
        failed = read_error != nullptr;
      }
      if (!failed) {
        try {
          const Chunk& k = ch.chunks[own[i]];
          if (!files[k.shard]) files[k.shard] = FileSystem::posix().open(catalog.shard_path(k.shard), IoMode::kPread);
          slot.buf.resize(k.end - k.begin);
          for (size_t p = k.piece_begin; p < k.piece_end; ++p) {
            const FileExtent& x = ch.pieces[p];
            files[k.shard]->read(x.begin, std::span(slot.buf.data() + (x.begin - k.begin), x.size()));
            stats.storage_bytes += x.size();
          }
        } catch (...) {
          std::lock_guard lock(mu);
          read_error = std::current_exception();
        }
      }
      std::lock_guard lock(mu);
      slot.ready = true;
      cv.notify_all();
    }
  });
  // Frees the slots whose sends completed; drives MPI's progress while we wait.
  auto progress = [&] {
    bool sending = false;
    for (Slot& s : slots) {
      if (s.requests.empty()) continue;
      sending = true;
      int done = 0;
      check(MPI_Testall(static_cast<int>(s.requests.size()), s.requests.data(), &done, MPI_STATUSES_IGNORE), world, "MPI_Testall");
      if (!done) continue;
      s.requests.clear();
      std::lock_guard lock(mu);
      s.free = true;
      cv.notify_all();
    }
    if (!sending) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, world.world(), &flag, MPI_STATUS_IGNORE);
    }
  };
  std::vector<ExtentCursor> dest;
  dest.reserve(n);
  for (int d = 0; d < n; ++d) dest.emplace_back(needed[d]);
  std::vector<std::pair<uint64_t, uint64_t>> parts;  // (offset in chunk, length)
  try {
    for (size_t i = 0; i < own.size(); ++i) {
      const Chunk& k = ch.chunks[own[i]];
      Slot& slot = slots[i % slots.size()];
      bool failed;
      while (true) {
        {
          std::unique_lock lock(mu);
          if (cv.wait_for(lock, std::chrono::microseconds(200), [&] { return slot.ready; })) {
            slot.ready = false;
            failed = read_error != nullptr;
            break;
          }
        }
        progress();
      }
      for (int d = 0; d < n; ++d) {
        parts.clear();
        uint64_t store_at = 0;
        const uint64_t bytes = dest[d].overlap(k.shard, k.begin, k.end, [&](uint64_t off, uint64_t at, uint64_t len) {
          if (parts.empty()) store_at = at;
          parts.emplace_back(off - k.begin, len);
        });
        if (bytes == 0) continue;
        if (d == me) {
          for (const auto& [off, len] : parts) {
            if (failed) break;
            std::memcpy(store.data() + store_at, slot.buf.data() + off, len);
            store_at += len;
          }
          continue;
        }
        const std::byte* src = nullptr;
        int count = 0;  // 0: the error marker
        if (!failed) {
          count = static_cast<int>(bytes);
          if (parts.size() == 1) {
            src = slot.buf.data() + parts.front().first;
          } else {
            auto& pack = slot.packs[d];
            pack.resize(bytes);
            uint64_t at = 0;
            for (const auto& [off, len] : parts) {
              std::memcpy(pack.data() + at, slot.buf.data() + off, len);
              at += len;
            }
            src = pack.data();
          }
          stats.sent_bytes += bytes;
        }
        slot.requests.emplace_back();
        check(MPI_Isend(src, count, MPI_BYTE, d, kDataTag, world.world(), &slot.requests.back()), world, "MPI_Isend");
      }
      if (slot.requests.empty()) {
        std::lock_guard lock(mu);
        slot.free = true;
        cv.notify_all();
      }
    }
  } catch (...) {
    // An MPI call or an allocation failed while sending (read errors never get here: they send
    // empty markers). Peers are blocked on chunks this rank can no longer send, and our posted
    // receives and Isends point into buffers unwinding would free: the job cannot continue
    // collectively, so it ends here, with the reason, instead of hanging.
    {
      std::lock_guard lock(mu);
      for (Slot& s : slots) s.free = true;
      cv.notify_all();
    }
    reader.join();
    std::string why = "unknown error";
    try {
      throw;
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    std::fprintf(stderr, "wmap[rank %d/%d]: error while sending during the exchange: %s; aborting the job\n", me, n, why.c_str());
    std::fflush(stderr);
    MPI_Abort(world.world(), 1);
    throw;
  }
  reader.join();
  for (Slot& s : slots) {
    check(MPI_Waitall(static_cast<int>(s.requests.size()), s.requests.data(), MPI_STATUSES_IGNORE), world, "MPI_Waitall");
  }

  // 3. Everything addressed to us. An empty message stands for data its owner could not read;
  //    that owner throws below and the caller's agreement names it on every rank.
  std::vector<MPI_Status> statuses(recvs.size());
  check(MPI_Waitall(static_cast<int>(recvs.size()), recvs.data(), statuses.data()), world, "MPI_Waitall");
  for (MPI_Status& s : statuses) {
    int got = 0;
    MPI_Get_count(&s, MPI_BYTE, &got);
    stats.received_bytes += static_cast<uint64_t>(got);
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (read_error) std::rethrow_exception(read_error);
  return stats;
}

}  // namespace wmap::mpi
