#include "wmap/exec/executor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "wmap/format/strided_copy.h"
#include "wmap/util/error.h"
#include "wmap/plan/piece_runs.h"
#include "wmap/format/safetensors_writer.h"

namespace wmap {

const LoadedParam* LoadedModel::find(std::string_view name) const {
  for (const auto& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

namespace {

using Clock = std::chrono::steady_clock;

// --- copy geometry --------------------------------------------------------------------------
// Computed before a guarded copy so the copy itself owns nothing that needs a destructor (a
// SIGBUS inside it is left with siglongjmp).
constexpr size_t kMaxDims = 15;

struct CopyGeometry {
  size_t dims = 0;  // output dims walked (innermost run excluded)
  uint64_t extent[kMaxDims + 1];
  uint64_t stride[kMaxDims + 1];
  uint64_t run = 0;     // bytes copied by one memcpy
  uint64_t origin = 0;  // byte offset of the box origin from the tensor start
};

CopyGeometry copy_geometry(const PlannedPiece& p) {
  CopyGeometry g;
  const size_t n = p.view.size();
  if (n == 0) {
    g.run = p.elem_bytes;
    return g;
  }
  if (n > kMaxDims) throw Error(ErrorCode::kInternal, p.source + ": " + std::to_string(n) + "-d views are not supported");
  const std::vector<uint64_t> view_stride = p.source_strides();
  for (size_t d = 0; d < n; ++d) g.origin += p.box[d].begin * view_stride[d];
  // Output dim k walks view dim perm[k].
  uint64_t extent[kMaxDims], stride[kMaxDims];
  for (size_t k = 0; k < n; ++k) {
    extent[k] = p.box[p.perm[k]].size();
    stride[k] = view_stride[p.perm[k]];
  }
  // Merge trailing output dims that are contiguous in the source into one memcpy run.
  uint64_t run = p.elem_bytes;
  size_t run_dims = 0;
  while (run_dims < n && stride[n - 1 - run_dims] == run) {
    run *= extent[n - 1 - run_dims];
    ++run_dims;
  }
  g.dims = n - run_dims;
  g.run = run;  // with run_dims == 0 (innermost dim strided: a transpose) one element at a time
  for (size_t k = 0; k < g.dims; ++k) {
    g.extent[k] = extent[k];
    g.stride[k] = stride[k];
  }
  return g;
}

void copy_dims(const std::byte* src, const CopyGeometry& g, size_t k, std::byte*& dst) {
  if (k + 2 == g.dims && g.run <= 64) {
    // The last two walked dims of a transpose (short runs): a tiled copy, not one run at a time.
    copy_2d_strided(src, g.extent[k], g.extent[k + 1], g.stride[k], g.stride[k + 1], g.run, dst);
    dst += g.extent[k] * g.extent[k + 1] * g.run;
    return;
  }
  if (k == g.dims) {
    std::memcpy(dst, src, g.run);
    dst += g.run;
    return;
  }
  for (uint64_t i = 0; i < g.extent[k]; ++i) copy_dims(src + i * g.stride[k], g, k + 1, dst);
}

void run_copy(const std::byte* tensor, const CopyGeometry& g, std::byte* dst) {
  std::byte* out = dst;
  copy_dims(tensor + g.origin, g, 0, out);
}

// --- work units -----------------------------------------------------------------------------

struct Seg {
  uint32_t shard;
  uint64_t offset;  // absolute file offset
  uint64_t len;
  uint32_t param;
  uint64_t dst_off;  // within the parameter
};

struct Unit {
  enum class Kind { kRead, kCopy, kZero } kind;
  uint32_t shard = 0;
  uint64_t begin = 0, end = 0;  // file span
  size_t seg_begin = 0, seg_end = 0;   // kRead: segments [seg_begin, seg_end)
  uint32_t param = 0, piece = 0;       // kCopy, kZero
  uint64_t dst_off = 0;
};

// A job for the load pool.
struct Job {
  enum class Kind { kCopyView, kCopyStaged, kZero, kFinish } kind;
  size_t unit = 0;
  uint32_t param = 0;
  size_t staging = 0;
};

// A bounded multi-producer multi-consumer queue; close() or fail() wakes everyone.
class JobQueue {
 public:
  explicit JobQueue(size_t capacity) : capacity_(capacity) {}
  bool push(const Job& j) {
    std::unique_lock lock(mu_);
    not_full_.wait(lock, [&] { return failed_ || q_.size() < capacity_; });
    if (failed_) return false;
    q_.push_back(j);
    not_empty_.notify_one();
    return true;
  }
  bool pop(Job& j) {
    std::unique_lock lock(mu_);
    not_empty_.wait(lock, [&] { return failed_ || closed_ || !q_.empty(); });
    if (failed_ || q_.empty()) return false;
    j = q_.front();
    q_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
  }
  void fail() {
    std::lock_guard lock(mu_);
    failed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<Job> q_;
  size_t capacity_;
  bool closed_ = false, failed_ = false;
};

// Reused staging buffers for pieces that must be rearranged (transposes): read workers take
// one, load workers give it back after the copy. Bounded: never more than `count` exist.
class StagingPool {
 public:
  explicit StagingPool(size_t count) : buffers_(count) {
    for (size_t i = 0; i < count; ++i) free_.push_back(i);
  }
  // Returns an index, or SIZE_MAX when the load failed.
  size_t acquire(const std::atomic<bool>& failed) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return failed.load() || !free_.empty(); });
    if (failed) return SIZE_MAX;
    const size_t i = free_.back();
    free_.pop_back();
    return i;
  }
  void release(size_t i) {
    std::lock_guard lock(mu_);
    free_.push_back(i);
    cv_.notify_one();
  }
  void wake() {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  }
  std::vector<std::byte>& buffer(size_t i) { return buffers_[i]; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<std::byte>> buffers_;
  std::vector<size_t> free_;
};

unsigned hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

// Segments whose gaps hold no whole page share one populate/readahead call.
template <class Fn>
void for_each_page_batch(const Seg* s, size_t n, uint64_t page, Fn&& fn) {
  for (size_t b = 0; b < n;) {
    size_t e = b + 1;
    uint64_t end = s[b].offset + s[b].len;
    while (e < n && s[e].offset / page <= (end - 1) / page + 1) {
      end = std::max(end, s[e].offset + s[e].len);
      ++e;
    }
    fn(s[b].offset, end - s[b].offset);
    b = e;
  }
}

struct CopySegmentsCtx {
  const Seg* segs;
  size_t n;
  const std::byte* base;  // view of the file at absolute offset `base_offset`
  uint64_t base_offset;
  std::byte* const* dsts;  // per segment
};

void copy_segments(void* p) {
  auto* c = static_cast<CopySegmentsCtx*>(p);
  for (size_t i = 0; i < c->n; ++i) std::memcpy(c->dsts[i], c->base + (c->segs[i].offset - c->base_offset), c->segs[i].len);
}

struct CopyPieceCtx {
  const std::byte* tensor;
  const CopyGeometry* g;
  std::byte* dst;
  const TensorRecord* strided = nullptr;  // set: `tensor` is its span, gathered into `gathered` first
  std::byte* gathered = nullptr;
};

void copy_piece_guarded(void* p) {
  auto* c = static_cast<CopyPieceCtx*>(p);
  if (c->strided) {
    gather_tensor(*c->strided, c->tensor, c->gathered);
    run_copy(c->gathered, *c->g, c->dst);
  } else {
    run_copy(c->tensor, *c->g, c->dst);
  }
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

// Faults a destination in ahead of the copy (ExecOptions::prefault).
void prefault(std::span<std::byte> dst) {
  if (dst.empty()) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(dst.data()) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(dst.data()) + dst.size()) / page * page;
  if (end <= begin) return;
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0) return;
  for (uintptr_t a = begin; a < end; a += page) *reinterpret_cast<volatile std::byte*>(a) = std::byte{0};
}

}  // namespace

void copy_piece(const std::byte* src, const PlannedPiece& p, std::byte* dst) {
  if (p.out_bytes == 0) return;
  run_copy(src, copy_geometry(p), dst);
}

unsigned default_read_workers() { return std::min(4u, hardware_threads()); }
unsigned default_load_workers() { return std::min(4u, hardware_threads()); }

unsigned worker_count_from_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return 0;
  const std::string s(v);
  unsigned long n = 0;
  bool ok = !s.empty() && s.size() <= 6 && s.find_first_not_of("0123456789") == std::string::npos;
  if (ok) {
    n = std::stoul(s);
    ok = n > 0 && n <= 4096;
  }
  if (!ok) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(name) + "='" + s + "': expected a positive integer number of workers (1..4096)");
  }
  return static_cast<unsigned>(n);
}

IoMode choose_io_mode(const LoadPlan& plan, const Catalog& catalog, std::string* reason) {
  // Bytes of the shards this rank touches vs the bytes it needs from them.
  std::vector<bool> touched(catalog.shards().size());
  for (const auto& p : plan.params()) {
    if (p.absent || p.broken) continue;
    for (const auto& piece : p.pieces) {
      if (piece.record) touched[piece.record->shard] = true;
    }
  }
  uint64_t shard_bytes = 0;
  for (size_t s = 0; s < touched.size(); ++s) {
    if (!touched[s]) continue;
    const auto& sh = catalog.shards()[s];
    shard_bytes += sh.signature.size;
  }
  const uint64_t needed = plan.bytes_to_read();
  const double fraction = shard_bytes ? static_cast<double>(needed) / static_cast<double>(shard_bytes) : 1.0;
  char buf[160];
  // Measured (docs/performance.md): pread straight into the parameters beats copying out of
  // populated mmap windows on whole-checkpoint loads too, and it turns a shard truncated under
  // us into an error instead of a signal; so auto picks pread.
  std::snprintf(buf, sizeof buf, "auto: pread (rank needs %.0f%% of its shards' bytes; pread measured faster)", 100 * fraction);
  if (reason) *reason = buf;
  return IoMode::kPread;
}

LoadedModel execute_plan(const LoadPlan& plan, const Catalog& catalog, Device& device, const ExecOptions& options) {
  if (!plan.ok() && !options.allow_partial) {
    throw Error(ErrorCode::kValidation, "refusing to load: the plan has " + std::to_string(plan.problems().size()) +
                                            " problem(s); first: " + plan.problems().front().message);
  }
  const auto start = Clock::now();
  const FileSystem& fs = options.fs ? *options.fs : FileSystem::posix();
  const auto& params = plan.params();
  LoadStats stats;
  stats.io_requested = std::string(io_mode_name(options.io));
  IoMode io = options.io;
  if (io == IoMode::kAuto) io = choose_io_mode(plan, catalog, &stats.io_reason);
  const bool use_mmap = io == IoMode::kMmap;
  const uint64_t chunk = std::max<uint64_t>(options.chunk_bytes, 1 << 16);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));

  // 1. Units of work, in (shard, offset) order.
  std::vector<Seg> segs;
  std::vector<Unit> copies, zeros;
  std::vector<uint64_t> left(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    const PlannedParam& p = params[i];
    if (p.absent || p.broken || !p.alias_of.empty()) continue;
    uint64_t at = 0;
    for (size_t j = 0; j < p.pieces.size(); ++j) {
      const PlannedPiece& piece = p.pieces[j];
      const auto pi = static_cast<uint32_t>(i), pj = static_cast<uint32_t>(j);
      if (!piece.record) {
        if (piece.out_bytes) zeros.push_back({Unit::Kind::kZero, 0, 0, 0, 0, 0, pi, pj, at}), ++left[i];
      } else if (piece.out_bytes > 0 && reads_in_runs(piece)) {
        const TensorRecord& r = *piece.record;
        uint64_t dst = at;
        for_each_run(piece, [&](uint64_t off, uint64_t len) {
          for (uint64_t done = 0; done < len;) {
            const uint64_t n = std::min(chunk, len - done);
            segs.push_back({r.shard, r.offset + off + done, n, pi, dst});
            ++left[i];
            done += n;
            dst += n;
          }
        });
      } else if (piece.out_bytes > 0) {
        copies.push_back({Unit::Kind::kCopy, piece.record->shard, piece.span_begin, piece.span_end, 0, 0, pi, pj, at});
        ++left[i];
      }
      at += piece.out_bytes;
    }
  }
  std::stable_sort(segs.begin(), segs.end(),
                   [](const Seg& a, const Seg& b) { return a.shard != b.shard ? a.shard < b.shard : a.offset < b.offset; });
  std::vector<Unit> units = std::move(zeros);
  {
    // Group segments: neighbouring tensors and the strided runs of a row-parallel slice share a
    // unit while its file span stays within one chunk (read_segments then batches them).
    std::vector<Unit> reads;
    for (size_t b = 0; b < segs.size();) {
      size_t e = b + 1;
      while (e < segs.size() && segs[e].shard == segs[b].shard && segs[e].offset >= segs[e - 1].offset + segs[e - 1].len &&
             segs[e].offset + segs[e].len - segs[b].offset <= chunk) {
        ++e;
      }
      reads.push_back({Unit::Kind::kRead, segs[b].shard, segs[b].offset, segs[e - 1].offset + segs[e - 1].len, b, e, 0, 0, 0});
      b = e;
    }
    reads.insert(reads.end(), copies.begin(), copies.end());
    std::stable_sort(reads.begin(), reads.end(),
                     [](const Unit& a, const Unit& b) { return a.shard != b.shard ? a.shard < b.shard : a.begin < b.begin; });
    units.insert(units.end(), reads.begin(), reads.end());
  }

  // 2. Pools.
  const unsigned read_req = options.read_workers, load_req = options.workers;
  const unsigned read_workers = std::max<unsigned>(1, std::min<size_t>(read_req ? read_req : default_read_workers(), std::max<size_t>(1, units.size())));
  const unsigned load_workers = std::max<unsigned>(1, std::min<size_t>(load_req ? load_req : default_load_workers(), std::max<size_t>(1, units.size())));
  stats.read_workers_requested = read_req;
  stats.load_workers_requested = load_req;
  stats.read_workers = read_workers;
  stats.workers = load_workers;
  stats.io_path = std::string(io_mode_name(io));
  stats.bytes_needed = plan.bytes_to_read();
  stats.prefault = options.prefault;
  bool prefetch = options.prefetch == ExecOptions::Prefetch::kOn;
  if (options.prefetch == ExecOptions::Prefetch::kAuto) {
    const uint64_t avail = available_memory_bytes();
    prefetch = avail > 0 && static_cast<double>(stats.bytes_needed) < 0.9 * static_cast<double>(avail);
  }
  stats.prefetch = prefetch;

  // Shards are opened on first use and kept until the load ends.
  std::vector<std::unique_ptr<RandomAccessFile>> files(catalog.shards().size());
  std::vector<std::once_flag> opened(catalog.shards().size());
  auto file_for = [&](uint32_t shard) -> const RandomAccessFile& {
    std::call_once(opened[shard], [&] { files[shard] = fs.open(catalog.shard_path(shard), io); });
    return *files[shard];
  };

  // Fused sources that must carry identical companions (NVFP4 global scales): a few bytes each,
  // compared before any parameter is written so a mismatch fails the load with nothing loaded.
  for (const PlannedParam& p : params) {
    if (!p.absent && !p.broken && !p.must_match.empty()) verify_must_match(p, file_for);
  }

  struct ParamState {
    std::once_flag allocated;
    std::shared_ptr<DeviceBuffer> buffer;
    std::span<std::byte> dst;
    std::atomic<uint64_t> left{0};
  };
  std::vector<ParamState> state(params.size());
  for (size_t i = 0; i < params.size(); ++i) state[i].left.store(left[i]);
  auto dst_of = [&](uint32_t i) -> std::span<std::byte> {
    ParamState& s = state[i];
    std::call_once(s.allocated, [&] {
      s.buffer = device.allocate(params[i].nbytes, params[i].name);
      s.dst = device.begin_write(*s.buffer);
      if (options.prefault) prefault(s.dst);
    });
    return s.dst;
  };

  const uint64_t total = plan.bytes_to_load();
  std::atomic<uint64_t> done_bytes{0}, read_bytes{0}, read_calls{0};
  std::atomic<int64_t> read_ns{0}, copy_ns{0}, transform_ns{0};
  std::mutex progress_mutex;
  auto add_done = [&](uint64_t n) {
    const uint64_t now = done_bytes += n;
    if (options.progress) {
      std::lock_guard<std::mutex> lock(progress_mutex);
      options.progress(now, total);
    }
  };
  auto ns_since = [](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
  };

  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  JobQueue queue(2 * static_cast<size_t>(load_workers) + read_workers);
  StagingPool staging(static_cast<size_t>(read_workers) + load_workers);
  auto fail = [&] {
    {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
    failed = true;
    queue.fail();
    staging.wake();
  };

  // Transforms and publication once every byte of a parameter is in.
  auto finish = [&](uint32_t i) {
    const auto t0 = Clock::now();
    const PlannedParam& p = params[i];
    std::span<std::byte> dst = dst_of(i);
    uint64_t at = 0;
    for (const PlannedPiece& piece : p.pieces) {
      if (!piece.transform.empty()) {
        const TransformFn* fn = options.transforms ? options.transforms(piece.transform) : nullptr;
        if (fn == nullptr) throw Error(ErrorCode::kInternal, p.name + ": transform '" + piece.transform + "' is not registered");
        const std::string& key = piece.record ? piece.record->name : p.name;
        // A GPU device may run it as a kernel after its copy (device.h).
        if (!device.defer_transform(*state[i].buffer, piece.transform, at, piece.out_bytes, p.dtype, key)) {
          (*fn)(std::span(dst.data() + at, piece.out_bytes), p.dtype, key);
        }
      }
      at += piece.out_bytes;
    }
    device.end_write(*state[i].buffer, dst);
    transform_ns += ns_since(t0);
  };
  // Called by the load pool (finish inline) or a read worker (finish queued for the load pool).
  auto consumed = [&](uint32_t i, uint64_t n, bool in_load_pool) {
    if (state[i].left.fetch_sub(n, std::memory_order_acq_rel) != n) return;
    if (in_load_pool) {
      finish(i);
    } else {
      queue.push({Job::Kind::kFinish, 0, i, 0});
    }
  };
  auto sigbus_error = [&](const Unit& u, const std::byte* base, uint64_t base_offset, const void* fault) {
    const auto* f = static_cast<const std::byte*>(fault);
    std::string where = (f >= base && f < base + (u.end - base_offset))
                            ? "offset " + std::to_string(base_offset + static_cast<uint64_t>(f - base))
                            : "bytes [" + std::to_string(u.begin) + ", " + std::to_string(u.end) + ")";
    return Error(ErrorCode::kIo, catalog.shard_path(u.shard).string() + ": the mapped file shrank during the load (SIGBUS at " +
                                     where + "); load it with --io pread or keep the checkpoint unchanged while loading");
  };

  // Read pool: claims units in order, brings their bytes in, hands copies to the load pool.
  std::atomic<size_t> next{0};
  std::mutex prefetch_mutex;
  size_t prefetch_next = 0;
  uint64_t prefetched_bytes = 0, claimed_bytes = 0;
  auto read_work = [&] {
    std::vector<ReadSegment> rs;
    std::vector<uint32_t> touched;
    for (size_t ui; !failed && (ui = next.fetch_add(1)) < units.size();) {
      try {
        const Unit& u = units[ui];
        if (prefetch && u.kind != Unit::Kind::kZero) {
          std::lock_guard<std::mutex> lock(prefetch_mutex);
          claimed_bytes += u.end - u.begin;
          prefetch_next = std::max(prefetch_next, ui);
          while (prefetch_next < units.size() && prefetched_bytes < claimed_bytes + options.prefetch_window_bytes) {
            const Unit& w = units[prefetch_next++];
            if (w.kind == Unit::Kind::kZero) continue;
            const uint64_t span = w.end - w.begin;
            prefetched_bytes += span;
            // Only dense spans: a strided one would pull the pages between its runs in.
            uint64_t want = 0;
            for (size_t k = w.seg_begin; k < w.seg_end; ++k) want += segs[k].len;
            if (w.kind == Unit::Kind::kCopy || want * 10 >= span * 9) file_for(w.shard).will_need(w.begin, span);
          }
        }
        const auto t0 = Clock::now();
        switch (u.kind) {
          case Unit::Kind::kZero:
            queue.push({Job::Kind::kZero, ui, u.param, 0});
            continue;
          case Unit::Kind::kCopy: {
            const RandomAccessFile& f = file_for(u.shard);
            if (use_mmap) {
              f.populate(u.begin, u.end - u.begin);
              read_bytes += u.end - u.begin;
              ++read_calls;
              read_ns += ns_since(t0);
              queue.push({Job::Kind::kCopyView, ui, u.param, 0});
            } else {
              const size_t b = staging.acquire(failed);
              if (b == SIZE_MAX) return;
              auto& buf = staging.buffer(b);
              if (buf.size() < u.end - u.begin) buf.resize(u.end - u.begin);
              try {
                f.read(u.begin, std::span(buf.data(), u.end - u.begin));
              } catch (...) {
                staging.release(b);
                throw;
              }
              read_bytes += u.end - u.begin;
              ++read_calls;
              read_ns += ns_since(t0);
              if (!queue.push({Job::Kind::kCopyStaged, ui, u.param, b})) staging.release(b);
            }
            continue;
          }
          case Unit::Kind::kRead: {
            const RandomAccessFile& f = file_for(u.shard);
            if (use_mmap) {
              for_each_page_batch(segs.data() + u.seg_begin, u.seg_end - u.seg_begin, page, [&](uint64_t off, uint64_t len) {
                f.populate(off, len);
                read_bytes += len;
                ++read_calls;
              });
              read_ns += ns_since(t0);
              queue.push({Job::Kind::kCopyView, ui, 0, 0});
            } else {
              rs.clear();
              touched.clear();
              for (size_t k = u.seg_begin; k < u.seg_end; ++k) {
                const Seg& s = segs[k];
                rs.push_back({s.offset, s.len, dst_of(s.param).data() + s.dst_off});
              }
              const auto t1 = Clock::now();  // allocation and prefault are not reading
              read_bytes += f.read_segments(rs);
              ++read_calls;
              read_ns += ns_since(t1);
              uint64_t n = 0;
              for (size_t k = u.seg_begin; k < u.seg_end; ++k) n += segs[k].len;
              add_done(n);
              for (size_t k = u.seg_begin; k < u.seg_end; ++k) consumed(segs[k].param, 1, false);
            }
            continue;
          }
        }
      } catch (...) {
        fail();
      }
    }
  };

  // Load pool: copies out of mapped windows or staging, zero fills, transforms, publishes.
  auto load_work = [&] {
    std::vector<std::byte*> dsts;
    std::vector<std::byte> gathered;  // a strided source in row-major order, reused
    for (Job j; queue.pop(j);) {
      try {
        if (j.kind == Job::Kind::kFinish) {
          finish(j.param);
          continue;
        }
        const Unit& u = units[j.unit];
        const auto t0 = Clock::now();
        if (j.kind == Job::Kind::kZero) {
          const PlannedPiece& piece = params[u.param].pieces[u.piece];
          std::memset(dst_of(u.param).data() + u.dst_off, 0, piece.out_bytes);
          copy_ns += ns_since(t0);
          add_done(piece.out_bytes);
          consumed(u.param, 1, true);
          continue;
        }
        const RandomAccessFile& f = file_for(u.shard);
        if (u.kind == Unit::Kind::kCopy) {
          const PlannedPiece& piece = params[u.param].pieces[u.piece];
          const CopyGeometry g = copy_geometry(piece);
          std::byte* dst = dst_of(u.param).data() + u.dst_off;
          const uint64_t before = piece.span_begin - piece.record->offset;  // geometry is tensor-relative
          // A strided source (non-contiguous PyTorch view) seen in its own shape is copied with its
          // strides (the geometry has them); reshaped by the spec, its whole span was read and is
          // gathered into row-major order here before the piece is cut from it.
          const TensorRecord* strided = piece.gathers_source() ? piece.record : nullptr;
          if (strided && gathered.size() < strided->nbytes) gathered.resize(strided->nbytes);
          if (j.kind == Job::Kind::kCopyStaged) {
            CopyPieceCtx ctx{staging.buffer(j.staging).data() - before, &g, dst, strided, gathered.data()};
            copy_piece_guarded(&ctx);
            staging.release(j.staging);
          } else {
            std::span<const std::byte> v = f.view(u.begin, u.end - u.begin);
            CopyPieceCtx ctx{v.data() - before, &g, dst, strided, gathered.data()};
            if (const void* fault = guard_sigbus(copy_piece_guarded, &ctx)) throw sigbus_error(u, v.data(), u.begin, fault);
            f.release(u.begin, u.end - u.begin);
          }
          copy_ns += ns_since(t0);
          add_done(piece.out_bytes);
          consumed(u.param, 1, true);
          continue;
        }
        // kRead through a mapping.
        dsts.clear();
        uint64_t n = 0;
        for (size_t k = u.seg_begin; k < u.seg_end; ++k) {
          dsts.push_back(dst_of(segs[k].param).data() + segs[k].dst_off);
          n += segs[k].len;
        }
        const auto t1 = Clock::now();
        std::span<const std::byte> v = f.view(u.begin, u.end - u.begin);
        CopySegmentsCtx ctx{segs.data() + u.seg_begin, u.seg_end - u.seg_begin, v.data(), u.begin, dsts.data()};
        if (const void* fault = guard_sigbus(copy_segments, &ctx)) throw sigbus_error(u, v.data(), u.begin, fault);
        f.release(u.begin, u.end - u.begin);
        copy_ns += ns_since(t1);
        add_done(n);
        for (size_t k = u.seg_begin; k < u.seg_end; ++k) consumed(segs[k].param, 1, true);
      } catch (...) {
        if (j.kind == Job::Kind::kCopyStaged) staging.release(j.staging);
        fail();
      }
    }
  };

  {
    std::vector<std::thread> loaders, readers;
    for (unsigned t = 0; t < load_workers; ++t) loaders.emplace_back(load_work);
    for (unsigned t = 0; t < read_workers; ++t) readers.emplace_back(read_work);
    for (auto& t : readers) t.join();
    queue.close();
    for (auto& t : loaders) t.join();
  }
  device.synchronize();
  if (error) std::rethrow_exception(error);
  // Parameters with nothing to read (zero-size) still get their (empty) buffer.
  for (size_t i = 0; i < params.size(); ++i) {
    const PlannedParam& p = params[i];
    if (p.absent || p.broken || !p.alias_of.empty() || left[i] != 0) continue;
    finish(static_cast<uint32_t>(i));
  }

  LoadedModel model;
  std::unordered_map<std::string_view, size_t> by_name;
  for (size_t i = 0; i < params.size(); ++i) by_name[params[i].name] = i;
  for (size_t i = 0; i < params.size(); ++i) {
    const PlannedParam& p = params[i];
    if (p.absent || p.broken) continue;
    auto buffer = p.alias_of.empty() ? state[i].buffer : state[by_name.at(p.alias_of)].buffer;
    model.params.push_back({p.name, p.dtype, p.shape, std::move(buffer)});
  }
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stats.bytes_loaded = done_bytes;
  stats.bytes_read = read_bytes;
  stats.reads = read_calls;
  stats.read_seconds = static_cast<double>(read_ns.load()) / 1e9;
  stats.copy_seconds = static_cast<double>(copy_ns.load()) / 1e9;
  stats.transform_seconds = static_cast<double>(transform_ns.load()) / 1e9;
  model.stats = std::move(stats);
  return model;
}

uint64_t dump_safetensors(const LoadedModel& model, Device& device, const std::filesystem::path& file) {
  std::vector<const LoadedParam*> sorted;
  for (const auto& p : model.params) sorted.push_back(&p);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::vector<TensorToWrite> tensors;
  for (const LoadedParam* p : sorted) {
    tensors.push_back({p->name, p->dtype, p->shape, p->buffer->size(),
                       [p, &device](std::span<std::byte> dst) { device.copy_to_host(*p->buffer, dst); }});
  }
  return write_safetensors(file, tensors);
}

}  // namespace wmap
