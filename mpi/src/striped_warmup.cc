#include "wmap/mpi/striped_warmup.h"

#include <chrono>
#include <memory>

#include "wmap/util/log.h"
#include "wmap/mpi/extent_exchange.h"

namespace wmap::mpi {

WarmupStats striped_warmup(const MpiWorld& world, const Catalog& catalog,
                           const std::vector<std::vector<FileExtent>>& node_needed, const FileSystem& fs) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<FileRange> ranges = read_ranges(node_needed);
  const int n = world.node_size(), me = world.node_rank();
  WarmupStats stats;
  stats.node_union_bytes = range_bytes(ranges);
  const Chunking ch = chunk_ranges(ranges, exchange_chunk_bytes(stats.node_union_bytes, n));
  // Reading (rather than posix_fadvise WILLNEED alone, which the kernel may cut short) makes the
  // pages resident before the barrier; the buffer is small and reused, so memory stays flat.
  constexpr uint64_t kBuffer = uint64_t{4} << 20;
  std::vector<std::byte> buf(kBuffer);
  std::vector<std::unique_ptr<RandomAccessFile>> files(catalog.shards().size());
  try {
    for (size_t c = static_cast<size_t>(me); c < ch.chunks.size(); c += static_cast<size_t>(n)) {
      const Chunk& k = ch.chunks[c];
      if (!files[k.shard]) files[k.shard] = fs.open(catalog.shard_path(k.shard), IoMode::kPread);
      for (size_t p = k.piece_begin; p < k.piece_end; ++p) {
        const FileRange& x = ch.pieces[p];
        files[k.shard]->will_need(x.begin, x.size());
        for (uint64_t at = x.begin; at < x.end; at += kBuffer) {
          const uint64_t len = std::min(kBuffer, x.end - at);
          files[k.shard]->read_random(at, std::span(buf.data(), len));
          stats.storage_bytes += len;
        }
      }
    }
  } catch (const std::exception& e) {
    log_warn(world.tag() + ": read-ahead stopped: " + e.what());
  }
  MPI_Barrier(world.node());
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

}  // namespace wmap::mpi
