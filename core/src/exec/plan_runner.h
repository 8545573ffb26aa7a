#pragma once
// Runs one LoadPlan's schedule (wmap/plan/read_schedule.h): its units, in its order, releasing
// each unit's ranges once that unit and every unit before it are consumed. Private to
// core/src/exec; execute_plan() is its only user.
//
// Threading, all set up in run(): a read pool claims units in schedule order (admit: readahead
// window; read_unit: pread straight into destinations, into staging, or populate a mapped
// window) and hands copies over a bounded JobQueue to a load pool (copy_unit: copies out of
// staging or the mapping under the SIGBUS guard, zero fills; finish: transforms, publication).
// A unit is consumed when its bytes are in their destinations (by whichever pool did that last);
// unit_consumed() advances the in-order watermark and releases what the passed units own. The
// first error stops both pools and is rethrown by run(). One object is one load; run() once.

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "wmap/exec/executor.h"
#include "wmap/util/error.h"
#include "assembly_pool.h"
#include "prefault_policy.h"
#include "shard_hasher.h"
#include "work_queues.h"

namespace wmap::exec_detail {

// Throws kValidation listing `unmet` (ShardHasher::unmet) when it is not empty.
void require_met(const std::vector<std::string>& unmet, ExecOptions::Verify mode);

class PlanRunner {
 public:
  PlanRunner(const LoadPlan& plan, Device& device, const ExecOptions& options);
  LoadedModel run();

 private:
  struct ParamState {
    std::once_flag allocated;
    std::shared_ptr<DeviceBuffer> buffer;
    std::span<std::byte> dst;  // host memory for the whole parameter (not in region mode)
    // A converted parameter's pieces, before its conversion; an FP8 requantisation (converted in
    // place) keeps only its scales here, its weight parts land in `dst` itself.
    exec_detail::AssemblyPool::Buffer assembled;
    std::atomic<uint64_t> left{0};  // work items (segments, copies, zero fills) still to land
    // Region mode (a device that stages writes, Device::stages_writes): each unit fills its part
    // of the parameter in a staged region of its own, published as soon as it is filled; the
    // parameter's transforms (all deferrable) are queued region by region.
    bool regions = false;
    // A column concatenation (Conversion::kConcatColumns) whose pieces are each one part of one
    // block lands straight in its columns of `dst` (no assembly buffer, no second pass): the
    // bytes of one of its rows (all parts side by side); 0 for every other parameter.
    uint64_t concat_row = 0;
  };
  // A piece's transform over parameter bytes [begin, end) (region-mode parameters only).
  struct TransformSpan {
    uint64_t begin, end;
    const std::string* transform;
    const std::string* key;
    std::vector<uint64_t> shape;  // the piece's (PlannedPiece::out_shape)
  };
  // A staged region open for one unit.
  struct OpenRegion {
    uint32_t param;
    StagedRegion region;
  };

  void configure();
  // Stages.
  void admit(size_t pos);  // readahead over the window ahead of the claimed units (claim positions)
  size_t unit_at(size_t pos) const { return claim_order_.empty() ? pos : claim_order_[pos]; }
  // Per-worker buffers, reused from unit to unit.
  struct Scratch {
    std::vector<UnitSegment> segments;  // the unit's, expanded from its slices
    std::vector<UnitSegment> rows;      // the same cut at the part rows of direct concatenations
    std::vector<ReadSegment> reads;
    std::vector<std::byte*> dsts;
    std::vector<std::byte> gathered;       // a strided source in row-major order
    std::vector<OpenRegion> regions;       // the unit's staged regions (region-mode parameters)
    std::vector<ShardHasher::Part> parts;  // what the unit read, for the shard's hash
    std::vector<std::byte> hash_copy;      // region mode: the parts, kept while the regions are published
  };
  void hash_read(size_t ui, Scratch& scratch);   // the unit's reads (scratch.reads) into its shard's hash
  void read_unit(size_t pos, Scratch& scratch);  // the unit claimed at position `pos`
  void read_span(size_t ui);
  void read_runs(size_t ui, Scratch& scratch);
  void copy_unit(Job& job, Scratch& scratch);
  void copy_piece_unit(Job& job, Scratch& scratch);
  void copy_runs(size_t ui, Scratch& scratch);
  void finish(uint32_t param);  // transforms and publication once every byte is in
  void unit_consumed(size_t ui);
  void check_digests();  // after the last unit: every hashed shard against its expected digest
  void open_shards();    // every shard read, opened and checked against the plan, before the reads
  // A failed load into the caller's buffers: `what` and the destinations already written.
  [[noreturn]] void throw_with_written(ErrorCode code, const std::string& what) const;
  void release(size_t ui) const;
  LoadedModel report();
  // Pool bodies.
  void read_worker();
  void load_worker();
  // Helpers.
  const RandomAccessFile& file_for(uint32_t shard);
  const RandomAccessFile& verify_file(uint32_t shard);
  DeviceBuffer& buffer_of(uint32_t param);      // allocated on first use
  std::span<std::byte> dst_of(uint32_t param);  // whole-parameter host memory (not region mode)
  // Where byte `off` of the pieces lands (not region mode): dst_of, a converted parameter's
  // assembly buffer, or for an in-place conversion dst (the weight) then the buffer (its scales).
  std::byte* written_at(uint32_t param, uint64_t off);
  // Whether the parameter is converted in place (kFp8Requant: a byte-for-byte table lookup).
  static bool in_place(const PlannedParam& p);
  static void convert_assembled(const PlannedParam& p, std::span<const std::byte> in, std::span<std::byte> out);
  // Where bytes [dst_off, dst_off + len) of a parameter are written: its host memory, or the
  // unit's open region holding them.
  std::byte* target(uint32_t param, uint64_t dst_off, uint64_t len, Scratch& scratch);
  void open_region(uint32_t param, uint64_t offset, uint64_t bytes, Scratch& scratch);
  // The row bytes of a concatenation that can land directly (ParamState::concat_row), else 0.
  static uint64_t direct_concat_row(const PlannedParam& p);
  // Where assembled byte `off` of a direct concatenation lands in its parameter (a byte offset),
  // and how many bytes follow it in the same part row.
  uint64_t concat_offset(uint32_t param, uint64_t off, uint64_t* row_left = nullptr) const;
  // `segs`, with the segments of direct concatenations cut at their part rows (scratch.rows),
  // or `segs` itself when it has none.
  const std::vector<UnitSegment>& cut_rows(const std::vector<UnitSegment>& segs, Scratch& scratch);
  void open_regions(const std::vector<UnitSegment>& segs, Scratch& scratch);  // one per contiguous run of a parameter
  void close_regions(Scratch& scratch);                                       // deferred transforms, then published
  void reserve_memory();
  void piece_done(uint32_t param, uint64_t items, bool in_load_pool);
  void add_done(uint64_t bytes);
  void fail();
  Error sigbus_error(const ReadUnit& u, const std::byte* base, const void* fault) const;

  using Clock = std::chrono::steady_clock;
  const Clock::time_point start_ = Clock::now();
  const LoadPlan& plan_;
  const Catalog& catalog_;
  Device& device_;
  const ExecOptions& options_;
  const FileSystem& fs_;
  const std::vector<PlannedParam>& params_;
  const ReadSchedule& schedule_;
  const std::vector<ReadUnit>& units_;
  const exec_detail::PrefaultPolicy prefault_;

  LoadStats stats_;
  IoMode io_ = IoMode::kPread;
  IoMode open_mode_ = IoMode::kPread;  // what files are opened with: io_, or kAuto (map_copies_)
  // use_mmap_: every unit through the mapping (--io mmap). map_copies_ (auto, reads by pread):
  // copy units through the mapping where their file maps, not staged.
  bool use_mmap_ = false, map_copies_ = false, prefetch_ = false;
  uint64_t page_ = 4096;
  uint64_t total_bytes_ = 0;  // plan.bytes_to_load(), for progress
  unsigned read_workers_ = 1, load_workers_ = 1;

  std::vector<std::unique_ptr<RandomAccessFile>> files_;  // opened on first use, kept to the end
  std::vector<std::once_flag> opened_;
  std::vector<ParamState> state_;
  exec_detail::AssemblyPool assembly_;                  // the converted parameters' assembled bytes
  std::vector<uint64_t> items_;                         // per parameter: work items in the schedule
  std::vector<std::vector<TransformSpan>> transforms_;  // per region-mode parameter
  std::shared_ptr<void> reservation_;                   // Device::reserve's, held while the load allocates

  std::atomic<uint64_t> done_bytes_{0}, read_bytes_{0}, read_calls_{0}, mapped_copies_{0};
  std::atomic<int64_t> read_ns_{0}, copy_ns_{0}, transform_ns_{0};
  std::mutex progress_mutex_;

  std::atomic<bool> prefaulted_{false};  // some buffer was (LoadStats::prefault)
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  std::mutex error_mutex_;
  std::unique_ptr<StagingPool> staging_;
  std::unique_ptr<JobQueue> queue_;  // after staging_: jobs still queued give their leases back first

  std::atomic<size_t> next_{0};  // the next claim position
  // Claim order (empty: the schedule's). Under verify, the hashed shards' units interleaved
  // (ShardHasher::claim_order) so shards are hashed on several cores at once.
  std::vector<uint32_t> claim_order_;
  std::mutex prefetch_mutex_;
  size_t prefetch_next_ = 0;
  uint64_t prefetched_bytes_ = 0, claimed_bytes_ = 0;

  std::mutex release_mutex_;
  std::vector<uint8_t> unit_done_;
  size_t watermark_ = 0;  // units [0, watermark_) are consumed and their ranges released

  // ExecOptions::verify_fs's files, opened on first use by the hasher.
  std::vector<std::unique_ptr<RandomAccessFile>> verify_files_;
  std::mutex verify_files_mutex_;
  ShardHasher hasher_;  // ExecOptions::verify
};

}  // namespace wmap::exec_detail
