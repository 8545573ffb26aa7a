#include "plan_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "copy_kernels.h"
#include "must_match.h"
#include "wmap/exec/nvfp4_conversions.h"
#include "wmap/format/layout_transforms.h"
#include "wmap/format/dtype_convert.h"
#include "wmap/util/error.h"

namespace wmap::exec_detail {
namespace {

int64_t ns_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t).count();
}

// Free assembly buffers kept for reuse: two of the plan's largest, at most 512 MiB (the bytes a
// load may hold beyond its parameters for it).
uint64_t assembly_keep_bytes(const LoadPlan& plan) {
  uint64_t largest = 0;
  for (const PlannedParam& p : plan.params()) {
    if (p.converts()) largest = std::max(largest, p.assembled_bytes);
  }
  return std::min<uint64_t>(2 * largest, uint64_t{512} << 20);
}

}  // namespace

PlanRunner::PlanRunner(const LoadPlan& plan, Device& device, const ExecOptions& options)
    : plan_(plan),
      catalog_(plan.catalog()),
      device_(device),
      options_(options),
      fs_(options.fs ? *options.fs : FileSystem::standard()),
      params_(plan.params()),
      schedule_(plan.schedule()),
      units_(schedule_.units()),
      prefault_(options.prefault),
      files_(catalog_.shards().size()),
      opened_(catalog_.shards().size()),
      state_(plan.params().size()),
      assembly_(assembly_keep_bytes(plan)),
      items_(plan.params().size(), 0),
      transforms_(plan.params().size()),
      unit_done_(schedule_.units().size(), 0),
      verify_files_(options.verify_fs ? catalog_.shards().size() : 0),
      hasher_(plan, options, [this](uint32_t shard) -> const RandomAccessFile& { return verify_file(shard); }) {
  configure();
}

void require_met(const std::vector<std::string>& unmet, ExecOptions::Verify mode) {
  if (unmet.empty()) return;
  std::string msg = "verify=" + std::string(verify_mode_name(mode)) + " cannot be met for " +
                    std::to_string(unmet.size()) + " shard(s), so nothing was read:";
  for (const auto& u : unmet) msg += "\n  " + u;
  msg += "\n  (give the digests with a manifest, or verify=best-effort to load and report them unverified)";
  throw Error(ErrorCode::kValidation, msg);
}

// Every shard the schedule reads, opened (and checked against the plan's identities) before any
// byte is read or written: a shard changed since planning fails the load with nothing written.
// In parallel, since a remote object's open may be a round trip.
void PlanRunner::open_shards() {
  std::vector<uint32_t> shards;
  std::vector<uint8_t> used(catalog_.shards().size(), 0);
  for (const ReadUnit& u : units_) {
    if (u.kind != ReadUnit::Kind::kZero && !used[u.shard]) used[u.shard] = 1, shards.push_back(u.shard);
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex mu;
  auto worker = [&] {
    for (size_t k; (k = next.fetch_add(1)) < shards.size();) {
      try {
        file_for(shards[k]);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
        next = shards.size();
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    const size_t n =
        std::min<size_t>(shards.size(), std::max(1u, fs_.concurrency(catalog_.root()) ? read_workers_ : 1u));
    for (size_t t = 1; t < n; ++t) pool.emplace_back(worker);
    worker();
  }
  if (error) std::rethrow_exception(error);
}

// I/O path, pool sizes, prefetch, and each parameter's count of work items.
void PlanRunner::configure() {
  stats_.io_requested = std::string(io_mode_name(options_.io));
  io_ = options_.io == IoMode::kAuto ? choose_io_mode(plan_, &stats_.io_reason) : options_.io;
  use_mmap_ = io_ == IoMode::kMmap;
  // A rearranging copy (a transpose, a gather, a padded cut) staged by pread is copied twice, by
  // the kernel and then by the cut; out of the mapping it is copied once (Llama 4's transposed
  // experts: 0.35 s staged against 0.27 s mapped, docs/performance.md). Runs keep pread, which
  // lands them in their destinations directly.
  map_copies_ = options_.io == IoMode::kAuto && io_ == IoMode::kPread;
  open_mode_ = map_copies_ ? IoMode::kAuto : io_;
  page_ = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const size_t n_units = std::max<size_t>(1, units_.size());
  const unsigned read_req = options_.read_workers, load_req = options_.load_workers;
  // Remote storage: a read is a round trip, so as many in flight as the storage wants.
  const unsigned read_default =
      std::max(fs_.concurrency(plan_.catalog().root()),
               device_.stages_writes() ? default_staged_read_workers() : default_read_workers());
  read_workers_ = std::max<unsigned>(1, std::min<size_t>(read_req ? read_req : read_default, n_units));
  load_workers_ = std::max<unsigned>(1, std::min<size_t>(load_req ? load_req : default_load_workers(), n_units));
  stats_.read_workers_requested = read_req;
  stats_.load_workers_requested = load_req;
  stats_.read_workers = read_workers_;
  stats_.load_workers = load_workers_;
  stats_.io_path = std::string(io_mode_name(io_));
  stats_.bytes_needed = plan_.bytes_to_read();
  total_bytes_ = plan_.bytes_to_load();
  stats_.prefault_decision = prefault_.decision();
  prefetch_ = options_.prefetch == ExecOptions::Prefetch::kOn;
  if (options_.prefetch == ExecOptions::Prefetch::kAuto) {
    const uint64_t avail = available_memory_bytes();
    prefetch_ = avail > 0 && static_cast<double>(stats_.bytes_needed) < 0.9 * static_cast<double>(avail);
  }
  stats_.prefetch = prefetch_;
  claim_order_ = hasher_.claim_order();
  queue_ = std::make_unique<JobQueue>(2 * static_cast<size_t>(load_workers_) + read_workers_);
  staging_ = std::make_unique<StagingPool>(static_cast<size_t>(read_workers_) + load_workers_);
  for (const ReadUnit& u : units_) {
    if (u.kind != ReadUnit::Kind::kRead) {
      ++items_[u.param];
      continue;
    }
    for (const UnitSlice& s : schedule_.slices(u)) items_[s.param] += s.count;
  }
  for (size_t i = 0; i < state_.size(); ++i) {
    state_[i].left.store(items_[i]);
    state_[i].concat_row = direct_concat_row(params_[i]);
  }
  if (!device_.stages_writes()) return;
  // Region mode for every parameter whose transforms the device runs itself; the others (a
  // plugin's host transform) are staged whole, transformed on the host, then published.
  for (size_t i = 0; i < params_.size(); ++i) {
    const PlannedParam& p = params_[i];
    bool deferrable = !p.converts();  // a converted parameter is assembled whole on the host
    std::vector<TransformSpan> spans;
    uint64_t at = 0;
    for (const PlannedPiece& piece : p.pieces) {
      if (!piece.transform.empty()) {
        deferrable = deferrable && device_.can_defer(piece.transform);
        spans.push_back({at, at + piece.out_bytes, &piece.transform, piece.record ? &piece.record->name : &p.name,
                         piece.out_shape()});
      }
      at += piece.out_bytes;
    }
    state_[i].regions = deferrable;
    if (deferrable) transforms_[i] = std::move(spans);
  }
}

// The plan's memory is decided before any byte is read: the device refuses a load it cannot
// hold now, naming the need, rather than after its reads.
void PlanRunner::reserve_memory() {
  uint64_t bytes = 0, count = 0;
  for (const PlannedParam& p : params_) {
    if (p.absent || p.broken || !p.alias_of.empty()) continue;
    if (__builtin_add_overflow(bytes, p.nbytes, &bytes)) {
      throw Error(ErrorCode::kValidation, "the plan's parameters add up to more than 2^64 bytes (at " + p.name + ")");
    }
    ++count;
  }
  const auto t0 = Clock::now();
  reservation_ = device_.reserve(bytes, count);
  stats_.setup_seconds = static_cast<double>(ns_since(t0)) / 1e9;
}

// The only place threads exist: both pools start here and are joined here.
LoadedModel PlanRunner::run() {
  // A verification that was asked for is met or the load does not start (review F3).
  require_met(hasher_.unmet(), options_.verify);
  stats_.verified = std::string(verify_mode_name(options_.verify));
  open_shards();
  reserve_memory();
  // Fused sources that must carry identical companions (NVFP4 global scales): a few bytes each,
  // compared before any parameter is written so a mismatch fails the load with nothing loaded.
  for (const PlannedParam& p : params_) {
    if (!p.absent && !p.broken && !p.must_match.empty()) {
      verify_must_match(p, [this](uint32_t shard) -> const RandomAccessFile& { return file_for(shard); });
    }
  }
  {
    // jthreads: a thread that cannot start fails the load (every worker is woken and joined),
    // instead of destroying joinable threads, which terminates the process (review F13).
    std::vector<std::jthread> loaders, readers;
    try {
      for (unsigned t = 0; t < load_workers_; ++t) loaders.emplace_back([this] { load_worker(); });
      for (unsigned t = 0; t < read_workers_; ++t) readers.emplace_back([this] { read_worker(); });
    } catch (...) {
      fail();
    }
    for (auto& t : readers) t.join();
    queue_->close();
    for (auto& t : loaders) t.join();
  }
  device_.synchronize();
  if (error_) {
    // Into the caller's buffers (refit), every failure names what it already wrote (review F9.6).
    if (!options_.name_written_on_failure) std::rethrow_exception(error_);
    try {
      std::rethrow_exception(error_);
    } catch (const Error& e) {
      throw_with_written(e.code(), e.what());
    } catch (const std::bad_alloc&) {
      throw_with_written(ErrorCode::kOutOfMemory, "out of memory");
    } catch (const std::exception& e) {
      throw_with_written(ErrorCode::kInternal, e.what());
    }
  }
  check_digests();
  reservation_.reset();  // what was set aside and not carved goes back with the last buffer
  // (the zero-size parameters below take no memory)
  // Parameters with nothing to read (zero-size) still get their (empty) buffer.
  for (size_t i = 0; i < params_.size(); ++i) {
    const PlannedParam& p = params_[i];
    if (p.absent || p.broken || !p.alias_of.empty() || items_[i] != 0) continue;
    finish(static_cast<uint32_t>(i));
  }
  LoadedModel model = report();
  if (options_.digests) model.digests = param_digests(model, device_);
  return model;
}

void PlanRunner::read_worker() {
  Scratch scratch;
  for (size_t pos; !failed_ && (pos = next_.fetch_add(1)) < units_.size();) {
    try {
      if (options_.cancel && options_.cancel->load(std::memory_order_relaxed))
        throw Error(ErrorCode::kCancelled, "the load was cancelled");
      read_unit(pos, scratch);
    } catch (...) {
      fail();
    }
  }
}

void PlanRunner::load_worker() {
  Scratch scratch;
  for (;;) {
    Job j;  // its staging lease, if any, goes back when it leaves scope, once
    if (!queue_->pop(j)) break;
    try {
      copy_unit(j, scratch);
    } catch (...) {
      fail();
    }
  }
}

// Keeps readahead (will_need) up to prefetch_window_bytes ahead of the bytes claimed so far.
void PlanRunner::admit(size_t pos) {
  const ReadUnit& u = units_[unit_at(pos)];
  std::lock_guard<std::mutex> lock(prefetch_mutex_);
  claimed_bytes_ += u.end - u.begin;
  prefetch_next_ = std::max(prefetch_next_, pos);
  while (prefetch_next_ < units_.size() && prefetched_bytes_ < claimed_bytes_ + options_.prefetch_window_bytes) {
    const ReadUnit& w = units_[unit_at(prefetch_next_++)];
    if (w.kind == ReadUnit::Kind::kZero) continue;
    const uint64_t span = w.end - w.begin;
    prefetched_bytes_ += span;
    // Only dense spans: a strided one would pull the pages between its runs in.
    if (w.kind == ReadUnit::Kind::kCopy || w.wanted * 10 >= span * 9) file_for(w.shard).will_need(w.begin, span);
  }
}

void PlanRunner::read_unit(size_t pos, Scratch& scratch) {
  const size_t ui = unit_at(pos);
  const ReadUnit& u = units_[ui];
  if (prefetch_ && u.kind != ReadUnit::Kind::kZero) admit(pos);
  switch (u.kind) {
    case ReadUnit::Kind::kZero: queue_->push({Job::Kind::kZero, ui, u.param, {}}); return;
    case ReadUnit::Kind::kCopy: return read_span(ui);
    case ReadUnit::Kind::kRead: return read_runs(ui, scratch);
  }
}

// A copy unit's whole span: populated in the mapping, or read into a staging buffer.
void PlanRunner::read_span(size_t ui) {
  const ReadUnit& u = units_[ui];
  const RandomAccessFile& f = file_for(u.shard);
  const uint64_t len = u.end - u.begin;
  const auto t0 = Clock::now();
  if (use_mmap_ || (map_copies_ && !f.view(u.begin, len).empty())) {
    if (!use_mmap_) ++mapped_copies_;
    f.populate(u.begin, len);
    read_bytes_ += len;
    ++read_calls_;
    read_ns_ += ns_since(t0);
    if (hasher_.hashes(ui)) {
      const ShardHasher::Part part{u.begin, f.view(u.begin, len).data(), len};
      hasher_.hash_unit(ui, std::span(&part, 1), true, failed_);
    }
    queue_->push({Job::Kind::kCopyView, ui, u.param, {}});
    return;
  }
  StagingLease lease = staging_->acquire(failed_);
  if (!lease) return;
  auto& buf = lease.buffer();
  buf.reserve(len);
  f.read(u.begin, std::span(buf.data(), len));  // a throw gives the lease back
  read_bytes_ += len;
  ++read_calls_;
  read_ns_ += ns_since(t0);
  if (hasher_.hashes(ui)) {
    const ShardHasher::Part part{u.begin, buf.data(), len};
    hasher_.hash_unit(ui, std::span(&part, 1), false, failed_);
  }
  queue_->push({Job::Kind::kCopyStaged, ui, u.param, std::move(lease)});  // refused: the lease goes back
}

// A read unit's runs: populated in the mapping (copied by the load pool), or read by preadv
// straight into their destinations (consumed here).
void PlanRunner::read_runs(size_t ui, Scratch& scratch) {
  const ReadUnit& u = units_[ui];
  schedule_.segments(u, params_, scratch.segments);
  const std::vector<UnitSegment>& segs = scratch.segments;
  const RandomAccessFile& f = file_for(u.shard);
  const auto t0 = Clock::now();
  if (use_mmap_) {
    for_each_page_batch(segs, page_, [&](uint64_t off, uint64_t len) {
      f.populate(off, len);
      read_bytes_ += len;
      ++read_calls_;
    });
    read_ns_ += ns_since(t0);
    if (hasher_.hashes(ui)) {
      const ShardHasher::Part part{u.begin, f.view(u.begin, u.end - u.begin).data(), u.end - u.begin};
      hasher_.hash_unit(ui, std::span(&part, 1), true, failed_);
    }
    queue_->push({Job::Kind::kCopyView, ui, 0, {}});
    return;
  }
  scratch.reads.clear();
  open_regions(segs, scratch);
  for (const UnitSegment& s : cut_rows(segs, scratch))
    scratch.reads.push_back({s.offset, s.len, target(s.param, s.dst_off, s.len, scratch)});
  const auto t1 = Clock::now();  // allocation, staging and prefault are not reading
  read_bytes_ += f.read_segments(scratch.reads);
  ++read_calls_;
  read_ns_ += ns_since(t1);
  if (hasher_.hashes(ui)) hash_read(ui, scratch);
  close_regions(scratch);
  uint64_t n = 0;
  for (const UnitSegment& s : segs) n += s.len;
  add_done(n);
  unit_consumed(ui);
  for (const UnitSegment& s : segs) piece_done(s.param, 1, false);
}

// The parts in file order. In region mode they are staged regions, published (and reused) once
// closed: copied out first, so a worker waiting for its shard's turn holds no staging slab.
void PlanRunner::hash_read(size_t ui, Scratch& scratch) {
  std::vector<ShardHasher::Part>& parts = scratch.parts;
  parts.clear();
  for (const ReadSegment& r : scratch.reads) parts.push_back({r.offset, r.dst, r.len});
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  if (!scratch.regions.empty()) {
    uint64_t n = 0;
    for (const auto& p : parts) n += p.len;
    if (scratch.hash_copy.size() < n) scratch.hash_copy.resize(n);
    uint64_t at = 0;
    for (auto& p : parts) {
      std::memcpy(scratch.hash_copy.data() + at, p.data, p.len);
      p.data = scratch.hash_copy.data() + at;
      at += p.len;
    }
    close_regions(scratch);
  }
  hasher_.hash_unit(ui, parts, false, failed_);
}

// Every shard hashed during the load against its expected digest. A mismatch fails the load
// before any parameter is handed over; into the caller's buffers, it names those written.
void PlanRunner::check_digests() {
  if (!hasher_.enabled()) return;
  stats_.verification = hasher_.finish();
  stats_.verify_extra_bytes = hasher_.extra_bytes();
  std::string bad;
  for (const ShardCheck& c : stats_.verification) {
    if (c.failed())
      bad +=
          (bad.empty() ? "" : "; ") + std::string("SHA-256 mismatch: ") + c.line().substr(c.status_name().size() + 2);
  }
  if (bad.empty()) return;
  if (options_.name_written_on_failure) throw_with_written(ErrorCode::kValidation, bad);
  throw Error(ErrorCode::kValidation, bad + "; no parameter was handed over");
}

void PlanRunner::throw_with_written(ErrorCode code, const std::string& what) const {
  std::vector<std::string> names;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (state_[i].buffer) names.push_back(params_[i].name);
  }
  std::string msg = what;
  if (names.empty()) {
    msg += "; no destination was written";
  } else {
    constexpr size_t kNamed = 100;
    msg += "; destinations already written (" + std::to_string(names.size()) + "), which now hold a mixture: ";
    for (size_t i = 0; i < names.size() && i < kNamed; ++i) msg += (i ? ", " : "") + names[i];
    if (names.size() > kNamed) msg += ", ... (" + std::to_string(names.size() - kNamed) + " more)";
  }
  throw PartialWriteError(code, msg, std::move(names));
}

void PlanRunner::copy_unit(Job& job, Scratch& scratch) {
  if (job.kind == Job::Kind::kFinish) return finish(job.param);
  scratch.regions.clear();
  const ReadUnit& u = units_[job.unit];
  if (job.kind == Job::Kind::kZero) {
    const auto t0 = Clock::now();
    // The bytes the plan's certificate checked (ReadSchedule::unit_output): the zero piece's.
    const ByteRange out = schedule_.unit_output(u, params_);
    const uint64_t bytes = out.end - out.begin;
    // Staged in bounded regions: a zero piece can be as large as a padded vocabulary.
    const uint64_t step = state_[u.param].regions ? schedule_.chunk_bytes() : std::max<uint64_t>(bytes, 1);
    for (uint64_t at = 0; at < bytes; at += step) {
      const uint64_t n = std::min(step, bytes - at);
      open_region(u.param, out.begin + at, n, scratch);
      std::memset(target(u.param, out.begin + at, n, scratch), 0, n);
      close_regions(scratch);
    }
    copy_ns_ += ns_since(t0);
    add_done(bytes);
    unit_consumed(job.unit);
    return piece_done(u.param, 1, true);
  }
  if (u.kind == ReadUnit::Kind::kCopy) return copy_piece_unit(job, scratch);
  copy_runs(job.unit, scratch);
}

// One piece cut (transposed, gathered) out of its span, from staging or the mapping.
void PlanRunner::copy_piece_unit(Job& job, Scratch& scratch) {
  const ReadUnit& u = units_[job.unit];
  const PlannedPiece& piece = params_[u.param].pieces[u.piece];
  std::vector<std::byte>& gathered = scratch.gathered;
  const auto t0 = Clock::now();
  // A band of rows of the outer dim (ReadSchedule: its output is a contiguous range), or the
  // whole piece; the region staged is the unit's output (ReadSchedule::unit_output, the bytes
  // the plan's certificate checked), bounded as its read is.
  const bool band = u.rows_end > 0;
  const uint64_t rows0 = piece.box.empty() ? 0 : piece.box.front().begin;
  // A direct concatenation's piece: its rows land a whole parameter row apart.
  const uint64_t pitch = state_[u.param].concat_row;
  const CopyGeometry g = band ? copy_geometry(piece, Range{rows0 + u.rows_begin, rows0 + u.rows_end}, pitch)
                              : copy_geometry(piece, std::nullopt, pitch);
  const ByteRange out = schedule_.unit_output(u, params_);
  const uint64_t out_bytes = out.end - out.begin;
  open_region(u.param, out.begin, out_bytes, scratch);
  std::byte* dst = target(u.param, out.begin, out_bytes, scratch);
  const uint64_t before = u.begin - piece.record->offset;  // geometry is tensor-relative
  // A strided source (non-contiguous PyTorch view) seen in its own shape is copied with its
  // strides (the geometry has them); reshaped by the spec, its whole span was read and is
  // gathered into row-major order here before the piece is cut from it.
  const TensorRecord* strided = piece.gathers_source() ? piece.record : nullptr;
  if (strided && gathered.size() < strided->nbytes) gathered.resize(strided->nbytes);
  if (job.kind == Job::Kind::kCopyStaged) {
    CopyPieceCtx ctx{job.staging.buffer().data() - before, &g, dst, strided, gathered.data()};
    copy_piece_guarded(&ctx);
    job.staging.release();  // free for the next read before the region closes (which may throw)
  } else {
    std::span<const std::byte> v = file_for(u.shard).view(u.begin, u.end - u.begin);
    CopyPieceCtx ctx{v.data() - before, &g, dst, strided, gathered.data()};
    if (const void* fault = guard_sigbus(copy_piece_guarded, &ctx)) throw sigbus_error(u, v.data(), fault);
  }
  close_regions(scratch);
  copy_ns_ += ns_since(t0);
  add_done(out_bytes);
  unit_consumed(job.unit);
  piece_done(u.param, 1, true);
}

// A read unit's runs copied out of the mapped window the read pool populated.
void PlanRunner::copy_runs(size_t ui, Scratch& scratch) {
  const ReadUnit& u = units_[ui];
  schedule_.segments(u, params_, scratch.segments);
  const std::vector<UnitSegment>& segs = scratch.segments;
  std::vector<std::byte*>& dsts = scratch.dsts;
  dsts.clear();
  open_regions(segs, scratch);
  uint64_t n = 0;
  for (const UnitSegment& s : segs) n += s.len;
  const std::vector<UnitSegment>& runs = cut_rows(segs, scratch);
  for (const UnitSegment& s : runs) dsts.push_back(target(s.param, s.dst_off, s.len, scratch));
  const auto t0 = Clock::now();
  std::span<const std::byte> v = file_for(u.shard).view(u.begin, u.end - u.begin);
  CopySegmentsCtx ctx{runs.data(), runs.size(), v.data(), u.begin, dsts.data()};
  if (const void* fault = guard_sigbus(copy_segments, &ctx)) throw sigbus_error(u, v.data(), fault);
  close_regions(scratch);
  copy_ns_ += ns_since(t0);
  add_done(n);
  unit_consumed(ui);
  for (const UnitSegment& s : segs) piece_done(s.param, 1, true);
}

void PlanRunner::finish(uint32_t i) {
  if (state_[i].regions) {
    buffer_of(i);  // a parameter with nothing to write still gets its (empty) buffer
    return;        // published and transformed region by region
  }
  const auto t0 = Clock::now();
  const PlannedParam& p = params_[i];
  std::span<std::byte> dst = dst_of(i);
  uint64_t at = 0;
  for (const PlannedPiece& piece : p.pieces) {
    if (!piece.transform.empty()) {
      const TransformFn* fn = options_.transforms ? options_.transforms(piece.transform) : nullptr;
      if (fn == nullptr)
        throw Error(ErrorCode::kInternal, p.name + ": transform '" + piece.transform + "' is not registered");
      const std::string& key = piece.record ? piece.record->name : p.name;
      // A GPU device may run it as a kernel after its copy (device.h).
      const std::vector<uint64_t> shape = piece.out_shape();
      if (p.converts() ||
          !device_.defer_transform(*state_[i].buffer, piece.transform, at, piece.out_bytes, p.dtype, key, shape)) {
        (*fn)(std::span(written_at(i, at), piece.out_bytes), p.dtype, key, shape);
      }
    }
    at += piece.out_bytes;
  }
  if (in_place(p)) {
    // The weight parts are dst; the scales follow in `assembled` (TensorRT-LLM's requantisation).
    fp8_requant_to_group_max(dst, state_[i].assembled.span(), dst, p.convert.parts, p.convert.group, p.name);
    assembly_.release(state_[i].assembled);
    add_done(p.nbytes - p.assembled_bytes);
  } else if (p.converts() && !state_[i].concat_row) {
    convert_assembled(p, state_[i].assembled.span(), dst);
    assembly_.release(state_[i].assembled);  // held no longer than needed (reused by the next one)
    // The pieces counted their assembled bytes; the parameter is nbytes (modular: may be fewer).
    add_done(p.nbytes - p.assembled_bytes);
  }
  device_.end_write(*state_[i].buffer, dst);
  transform_ns_ += ns_since(t0);
}

// Units complete out of order across workers; ranges are released in schedule order, once
// every unit up to their owner (their last reader) is consumed, so no reader still needs them.
void PlanRunner::unit_consumed(size_t ui) {
  size_t from, to;
  {
    std::lock_guard<std::mutex> lock(release_mutex_);
    unit_done_[ui] = 1;
    from = watermark_;
    while (watermark_ < unit_done_.size() && unit_done_[watermark_]) ++watermark_;
    to = watermark_;
  }
  for (size_t k = from; k < to; ++k) release(k);
}

void PlanRunner::release(size_t ui) const {
  const ReadUnit& u = units_[ui];
  for (const ByteRange& r : schedule_.releases(u)) files_[u.shard]->release(r.begin, r.end - r.begin);
}

LoadedModel PlanRunner::report() {
  LoadedModel model;
  std::unordered_map<std::string_view, size_t> by_name;
  for (size_t i = 0; i < params_.size(); ++i) by_name[params_[i].name] = i;
  for (size_t i = 0; i < params_.size(); ++i) {
    const PlannedParam& p = params_[i];
    if (p.absent || p.broken) continue;
    auto buffer = p.alias_of.empty() ? state_[i].buffer : state_[by_name.at(p.alias_of)].buffer;
    model.params.push_back({p.name, p.dtype, p.shape, std::move(buffer)});
  }
  stats_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  stats_.prefault = prefaulted_.load();
  stats_.bytes_loaded = done_bytes_;
  stats_.bytes_read = read_bytes_;
  if (mapped_copies_ > 0) {
    stats_.io_path = "pread+mmap";
    stats_.io_reason +=
        "; " + std::to_string(mapped_copies_.load()) +
        " rearranging copies (transposes, gathers, padded cuts) out of the mapping, one copy where a staged "
        "read makes two";
  }
  stats_.reads = read_calls_;
  stats_.read_seconds = static_cast<double>(read_ns_.load()) / 1e9;
  stats_.copy_seconds = static_cast<double>(copy_ns_.load()) / 1e9;
  stats_.transform_seconds = static_cast<double>(transform_ns_.load()) / 1e9;
  model.stats = std::move(stats_);
  return model;
}

// The hash's own reads: the storage when the plan's bytes come from elsewhere (verify_fs).
const RandomAccessFile& PlanRunner::verify_file(uint32_t shard) {
  if (verify_files_.empty()) return file_for(shard);
  std::lock_guard<std::mutex> lock(verify_files_mutex_);
  auto& f = verify_files_[shard];
  if (!f) {
    auto opened = options_.verify_fs->open(catalog_.shard_path(shard), IoMode::kPread);
    catalog_.require_unchanged(shard, opened->signature());
    f = std::move(opened);
  }
  return *f;
}

const RandomAccessFile& PlanRunner::file_for(uint32_t shard) {
  // The plan's offsets are the catalogued headers': a shard rewritten since (a refit's next step,
  // a publisher renaming files in) is refused, not read at stale offsets (review F1). The
  // signature is the one taken when the file was opened (fstat of its descriptor; a remote
  // object's size and ETag), so nothing can change between this check and the reads.
  std::call_once(opened_[shard], [&] {
    auto f = fs_.open(catalog_.shard_path(shard), open_mode_);
    catalog_.require_unchanged(shard, f->signature());
    files_[shard] = std::move(f);
  });
  return *files_[shard];
}

// A converted parameter's assembled pieces into its bytes (Conversion, spec/model_spec.h).
void PlanRunner::convert_assembled(const PlannedParam& p, std::span<const std::byte> in, std::span<std::byte> out) {
  const Conversion& c = p.convert;
  if (c.kind == Conversion::Kind::kF32ToBf16) return f32_to_bf16_rne(in, out);
  if (c.kind == Conversion::Kind::kFp8Requant) {
    return fp8_requant_to_group_max(in.subspan(0, p.nbytes), in.subspan(p.nbytes), out, c.parts, c.group, p.name);
  }
  if (c.kind == Conversion::Kind::kScaleMax) return f32_group_max(in, out, c.group, c.tail, c.invert, p.name);
  if (c.kind == Conversion::Kind::kNvfp4Scales) return nvfp4_scales(in, out, c.scale_op, c.group, c.tail, p.name);
  if (c.kind == Conversion::Kind::kConcatColumns) return concat_columns(in, out, c.rows, c.parts, p.name);
  if (c.kind == Conversion::Kind::kIntToFloat) return i64_to_float(in, out, p.dtype, p.name);
  if (c.kind == Conversion::Kind::kBlockScaleSwizzle) {
    return block_scale_swizzle(in, out, c.rows, c.cols, c.pad_rows, c.pad_cols, p.name);
  }
  if (c.kind == Conversion::Kind::kKvScales) {
    // [k, v] -> [1, k, v]: the [1] reductions of one scale each, after the query's 1.0.
    const float one = 1.0f;
    std::memcpy(out.data(), &one, 4);
    return f32_group_max(in, out.subspan(4), 1, 0, c.invert, p.name);
  }
  // kFp8BlockDequant: [F8 weight][F32 scales][bytes copied after the dequantized ones].
  const uint64_t weight = c.rows * c.cols, esize = p.dtype == DType::kF32 ? 4 : 2;
  const uint64_t scales = ceil_div(c.rows, c.block_rows) * ceil_div(c.cols, c.block_cols) * 4, done = weight * esize;
  const std::string& key = p.pieces.empty() || !p.pieces[0].record ? p.name : p.pieces[0].record->name;
  fp8_block_dequant(in.subspan(0, weight), in.subspan(weight, scales), c.rows, c.cols, c.block_rows, c.block_cols,
                    p.dtype, out.subspan(0, done), key);
  const std::span<const std::byte> rest = in.subspan(weight + scales);
  if (rest.size() != out.size() - done) {
    throw Error(ErrorCode::kInternal, p.name + ": " + std::to_string(rest.size()) + " assembled bytes for " +
                                          std::to_string(out.size() - done) + " after the dequantized ones");
  }
  if (!rest.empty()) std::memcpy(out.data() + done, rest.data(), rest.size());
}

DeviceBuffer& PlanRunner::buffer_of(uint32_t i) {
  ParamState& s = state_[i];
  std::call_once(s.allocated, [&] {
    s.buffer = device_.allocate_reserved(reservation_, params_[i].nbytes, params_[i].name);
    if (params_[i].converts() && !s.concat_row) {
      s.assembled = assembly_.acquire(params_[i].assembled_bytes - (in_place(params_[i]) ? params_[i].nbytes : 0));
    }
    if (s.regions) return;
    s.dst = device_.begin_write(*s.buffer);
    if (prefault_.applies(s.buffer->page_bytes())) {
      prefault(s.dst);
      prefaulted_.store(true, std::memory_order_relaxed);
    }
  });
  return *s.buffer;
}

std::span<std::byte> PlanRunner::dst_of(uint32_t i) {
  buffer_of(i);
  return state_[i].dst;
}

bool PlanRunner::in_place(const PlannedParam& p) { return p.convert.kind == Conversion::Kind::kFp8Requant; }

std::byte* PlanRunner::written_at(uint32_t i, uint64_t off) {
  std::span<std::byte> dst = dst_of(i);
  const PlannedParam& p = params_[i];
  if (in_place(p)) return off < p.nbytes ? dst.data() + off : state_[i].assembled.data.get() + (off - p.nbytes);
  return p.converts() ? state_[i].assembled.data.get() + off : dst.data() + off;
}

// A concatenation whose pieces are each a whole part of one block, in order, cut and copied as
// they are (no zero piece, padding or transform) and at least 2-D with the block's rows outermost.
uint64_t PlanRunner::direct_concat_row(const PlannedParam& p) {
  const Conversion& c = p.convert;
  if (c.kind != Conversion::Kind::kConcatColumns || c.parts.empty() || p.pieces.empty() ||
      p.pieces.size() % c.parts.size() != 0) {
    return 0;
  }
  uint64_t row = 0;
  for (uint64_t b : c.parts) row += b;
  if (p.nbytes != row * c.rows * (p.pieces.size() / c.parts.size())) return 0;
  for (size_t j = 0; j < p.pieces.size(); ++j) {
    const PlannedPiece& piece = p.pieces[j];
    if (!piece.reads_source() || piece.padded() || !piece.transform.empty() || piece.view.size() < 2 ||
        piece.out_bytes != c.rows * c.parts[j % c.parts.size()] || piece.out_shape().front() != c.rows) {
      return 0;
    }
  }
  return row;
}

uint64_t PlanRunner::concat_offset(uint32_t param, uint64_t off, uint64_t* row_left) const {
  const Conversion& c = params_[param].convert;
  const uint64_t row = state_[param].concat_row, block = row * c.rows;
  uint64_t in = off % block, col = 0;
  size_t i = 0;
  while (in >= c.rows * c.parts[i]) {  // the part holding `in`: parts are whole (direct_concat_row)
    in -= c.rows * c.parts[i];
    col += c.parts[i];
    ++i;
  }
  if (row_left) *row_left = c.parts[i] - in % c.parts[i];
  return off / block * block + in / c.parts[i] * row + col + in % c.parts[i];
}

const std::vector<UnitSegment>& PlanRunner::cut_rows(const std::vector<UnitSegment>& segs, Scratch& scratch) {
  if (std::none_of(segs.begin(), segs.end(), [&](const UnitSegment& s) { return state_[s.param].concat_row; }))
    return segs;
  std::vector<UnitSegment>& out = scratch.rows;
  out.clear();
  for (const UnitSegment& s : segs) {
    if (!state_[s.param].concat_row) {
      out.push_back(s);
      continue;
    }
    for (uint64_t at = 0; at < s.len;) {
      uint64_t left = 0;
      concat_offset(s.param, s.dst_off + at, &left);
      const uint64_t n = std::min(left, s.len - at);
      out.push_back({s.offset + at, n, s.dst_off + at, s.param, s.shard});
      at += n;
    }
  }
  return out;
}

std::byte* PlanRunner::target(uint32_t param, uint64_t dst_off, uint64_t len, Scratch& scratch) {
  if (state_[param].concat_row) return dst_of(param).data() + concat_offset(param, dst_off);  // one part row
  if (!state_[param].regions) return written_at(param, dst_off);
  for (auto it = scratch.regions.rbegin(); it != scratch.regions.rend(); ++it) {
    const StagedRegion& r = it->region;
    if (it->param == param && dst_off >= r.offset && dst_off + len <= r.offset + r.host.size()) {
      return r.host.data() + (dst_off - r.offset);
    }
  }
  throw Error(ErrorCode::kInternal, params_[param].name + ": bytes [" + std::to_string(dst_off) + ", +" +
                                        std::to_string(len) + ") are in no staged region of their unit");
}

void PlanRunner::open_region(uint32_t param, uint64_t offset, uint64_t bytes, Scratch& scratch) {
  if (!state_[param].regions) return;
  DeviceBuffer& b = buffer_of(param);
  scratch.regions.push_back({param, device_.begin_region(b, offset, bytes)});
}

void PlanRunner::open_regions(const std::vector<UnitSegment>& segs, Scratch& scratch) {
  scratch.regions.clear();  // a failed unit's regions are dropped (nothing copied)
  struct Run {
    uint32_t param;
    uint64_t begin, end;
  };
  std::vector<Run> runs;
  for (const UnitSegment& s : segs) {
    if (!state_[s.param].regions) continue;
    if (!runs.empty() && runs.back().param == s.param && runs.back().end == s.dst_off) {
      runs.back().end += s.len;  // the next run of a piece: the usual case, in file order
    } else {
      runs.push_back({s.param, s.dst_off, s.dst_off + s.len});
    }
  }
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.param != b.param ? a.param < b.param : a.begin < b.begin; });
  for (size_t i = 0; i < runs.size();) {
    Run r = runs[i];
    for (++i; i < runs.size() && runs[i].param == r.param && runs[i].begin <= r.end; ++i)
      r.end = std::max(r.end, runs[i].end);
    open_region(r.param, r.begin, r.end - r.begin, scratch);
  }
}

void PlanRunner::close_regions(Scratch& scratch) {
  for (OpenRegion& o : scratch.regions) {
    const PlannedParam& p = params_[o.param];
    const uint64_t b = o.region.offset, e = b + o.region.host.size();
    for (const TransformSpan& t : transforms_[o.param]) {
      const uint64_t tb = std::max(b, t.begin), te = std::min(e, t.end);
      if (tb >= te) continue;
      if (!device_.defer_transform(o.region, *t.transform, tb, te - tb, p.dtype, *t.key, t.shape)) {
        throw Error(ErrorCode::kInternal,
                    p.name + ": transform '" + *t.transform + "' was not taken by " + device_.name());
      }
    }
    device_.end_region(*state_[o.param].buffer, o.region);
  }
  scratch.regions.clear();
}

// `items` of a parameter landed; the last one finishes it (inline in the load pool, queued
// for it from a read worker).
void PlanRunner::piece_done(uint32_t i, uint64_t items, bool in_load_pool) {
  if (state_[i].left.fetch_sub(items, std::memory_order_acq_rel) != items) return;
  if (in_load_pool) {
    finish(i);
  } else {
    queue_->push({Job::Kind::kFinish, 0, i, {}});
  }
}

void PlanRunner::add_done(uint64_t n) {
  const uint64_t now = done_bytes_ += n;
  if (options_.progress) {
    std::lock_guard<std::mutex> lock(progress_mutex_);
    options_.progress(now, total_bytes_);
  }
}

void PlanRunner::fail() {
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  failed_ = true;
  queue_->fail();
  staging_->wake();
  hasher_.wake_all();
}

Error PlanRunner::sigbus_error(const ReadUnit& u, const std::byte* base, const void* fault) const {
  const auto* f = static_cast<const std::byte*>(fault);
  std::string where = (f >= base && f < base + (u.end - u.begin))
                          ? "offset " + std::to_string(u.begin + static_cast<uint64_t>(f - base))
                          : "bytes [" + std::to_string(u.begin) + ", " + std::to_string(u.end) + ")";
  return Error(ErrorCode::kIo,
               catalog_.shard_path(u.shard).string() + ": the mapped file shrank during the load (SIGBUS at " + where +
                   "); load it with the pread I/O path (io pread) or keep the checkpoint unchanged while loading");
}

}  // namespace wmap::exec_detail
