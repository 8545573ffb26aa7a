#pragma once
// The `exchange` I/O policy's transfer: the union of the bytes every rank needs (read_ranges) is
// cut into chunks; chunk c is read from storage by rank c mod N alone and each rank is sent
// (point to point) exactly its rows inside the chunk, packed by the sender, straight into its
// ExtentStoreFileSystem (contiguous there: the store is in file order). Storage traffic is the
// union once, however many ranks load. Collective over the world communicator; call it on the
// thread that initialised MPI (the only one that calls MPI, MPI_THREAD_FUNNELED: a reader thread
// of its own does the preads, so reads and transfers overlap). In flight per rank:
// kExchangeSlots chunks, i.e. at most 4 x 32 MiB of read buffers plus their packed copies.
//
// A failed transfer (posting, sending, receiving, waiting) ends the whole job with MPI_Abort
// after printing why: peers wait for messages that will never come, and posted transfers point
// into buffers unwinding would free. Test hook: WMAP_FAULT_INJECT=exchange-irecv (this rank's
// first MPI_Irecv fails) or exchange-recv-wait (its wait for the receives fails), read here only.

#include <cstdint>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/mpi/extent_store_fs.h"
#include "wmap/mpi/file_extents.h"
#include "wmap/mpi/mpi_world.h"

namespace wmap::mpi {

struct ExchangeStats {
  uint64_t storage_bytes = 0;            // read from the shard files by this rank (its chunks)
  uint64_t received_bytes = 0;           // sent to this rank by the others
  uint64_t sent_bytes = 0;               // sent by this rank to the others
  uint64_t received_off_node_bytes = 0;  // of received_bytes: from ranks on other nodes
  uint64_t sent_off_node_bytes = 0;      // of sent_bytes: to ranks on other nodes (the network)
  uint64_t chunks_owned = 0;
  uint64_t union_bytes = 0;  // read from storage by all ranks together
  double seconds = 0;
};

// Chunks in flight per rank: one per slot; a slot is reused once its sends completed.
constexpr int kExchangeSlots = 4;
constexpr uint64_t kMaxExchangeChunkBytes = uint64_t{32} << 20;
// Host memory the transfer itself may take per rank at most: each slot's chunk and packed copies.
constexpr uint64_t kExchangeBufferBytes = uint64_t{kExchangeSlots} * 2 * kMaxExchangeChunkBytes;

// Chunk size for a union of `union_bytes` over `ranks` ranks: about 8 chunks per rank (so the
// reads spread evenly), between 1 MiB and kMaxExchangeChunkBytes (bounded buffers, counts within
// an MPI int).
uint64_t exchange_chunk_bytes(uint64_t union_bytes, int ranks);

// `needed[r]` is rank r's merged extents (identical on every rank); `store` was built from
// needed[world.rank()]. Every rank returns after every transfer completed, even when some owner
// failed to read: such an owner sends empty messages (error markers) for the rest of its chunks
// and then throws its read error, which the caller's agree() reports on every rank. The shards
// are read through `fs` (the load's FileSystem, so fault injection reaches the exchange too).
ExchangeStats exchange_extents(const MpiWorld& world, const Catalog& catalog,
                               const std::vector<std::vector<FileExtent>>& needed, ExtentStoreFileSystem& store,
                               const FileSystem& fs);

}  // namespace wmap::mpi
