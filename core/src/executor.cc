#include "wmap/executor.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "wmap/error.h"
#include "wmap/safetensors_writer.h"

namespace wmap {

const LoadedParam* LoadedModel::find(std::string_view name) const {
  for (const auto& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

namespace {

// Copies output dims [k, n) of the box; `src` points at the box origin of those dims.
void copy_dims(const std::byte* src, const std::vector<uint64_t>& extent, const std::vector<uint64_t>& stride, size_t k,
               uint64_t run_bytes, size_t run_dims, std::byte*& dst) {
  if (k + run_dims == extent.size()) {
    std::memcpy(dst, src, run_bytes);
    dst += run_bytes;
    return;
  }
  for (uint64_t i = 0; i < extent[k]; ++i) copy_dims(src + i * stride[k], extent, stride, k + 1, run_bytes, run_dims, dst);
}

}  // namespace

void copy_piece(const std::byte* src, const PlannedPiece& p, std::byte* dst) {
  if (p.out_bytes == 0) return;
  const size_t n = p.view.size();
  if (n == 0) {
    std::memcpy(dst, src, p.elem_bytes);
    return;
  }
  std::vector<uint64_t> view_stride(n, p.elem_bytes);
  for (size_t d = n; d-- > 1;) view_stride[d - 1] = view_stride[d] * p.view[d];
  const std::byte* origin = src;
  for (size_t d = 0; d < n; ++d) origin += p.box[d].begin * view_stride[d];
  // Output dim k walks view dim perm[k].
  std::vector<uint64_t> extent(n), stride(n);
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
  if (run_dims == 0) run = p.elem_bytes;  // innermost dim strided (a transpose): element by element
  std::byte* out = dst;
  if (run_dims == 0) {
    // Walk all n dims; the innermost copies single elements.
    std::vector<uint64_t> ext = extent, str = stride;
    ext.push_back(1);
    str.push_back(0);
    copy_dims(origin, ext, str, 0, p.elem_bytes, 1, out);
  } else {
    copy_dims(origin, extent, stride, 0, run, run_dims, out);
  }
}

LoadedModel execute_plan(const LoadPlan& plan, const Catalog& catalog, Device& device, const ExecOptions& options) {
  if (!plan.ok() && !options.allow_partial) {
    throw Error(ErrorCode::kValidation, "refusing to load: the plan has " + std::to_string(plan.problems().size()) +
                                            " problem(s); first: " + plan.problems().front().message);
  }
  const auto start = std::chrono::steady_clock::now();
  const FileSystem& fs = options.fs ? *options.fs : FileSystem::posix();
  const auto& params = plan.params();

  // Shards are opened on first use and kept until the load ends.
  std::vector<std::unique_ptr<RandomAccessFile>> files(catalog.shards().size());
  std::vector<std::once_flag> opened(catalog.shards().size());
  auto file_for = [&](uint32_t shard) -> const RandomAccessFile& {
    std::call_once(opened[shard], [&] { files[shard] = fs.open(catalog.shard_path(shard), options.io); });
    return *files[shard];
  };
  std::vector<std::atomic<uint32_t>> readers(plan.readers().size());
  for (size_t i = 0; i < readers.size(); ++i) readers[i].store(plan.readers()[i]);

  LoadedModel model;
  std::vector<std::shared_ptr<DeviceBuffer>> buffers(params.size());
  const uint64_t total = plan.bytes_to_load();
  std::atomic<uint64_t> done_bytes{0}, read_bytes{0};
  std::mutex progress_mutex;

  auto load_param = [&](size_t index, std::vector<std::byte>& staging) {
    const PlannedParam& p = params[index];
    if (p.absent || p.broken || !p.alias_of.empty()) return;
    auto buffer = device.allocate(p.nbytes);
    std::span<std::byte> dst = device.begin_write(*buffer);
    uint64_t at = 0;
    for (const PlannedPiece& piece : p.pieces) {
      std::byte* out = dst.data() + at;
      if (!piece.record) {
        std::memset(out, 0, piece.out_bytes);
      } else {
        const TensorRecord& r = *piece.record;
        const RandomAccessFile& file = file_for(r.shard);
        if (piece.out_bytes > 0) {
          std::span<const std::byte> whole = file.view(r.offset, r.nbytes);
          if (!whole.empty()) {
            copy_piece(whole.data(), piece, out);
          } else {
            // pread the covering span into reused staging; the piece's geometry is relative to
            // the tensor start, so point `base` that far before the staging data.
            const uint64_t len = piece.span_end - piece.span_begin;
            if (staging.size() < len) staging.resize(len);
            file.read(piece.span_begin, std::span(staging.data(), len));
            copy_piece(staging.data() - (piece.span_begin - r.offset), piece, out);
          }
          read_bytes += piece.out_bytes;
        }
        if (readers[catalog.index_of(r)].fetch_sub(1) == 1) file.release(r.offset, r.nbytes);
      }
      if (!piece.transform.empty()) {
        const TransformFn* fn = options.transforms ? options.transforms(piece.transform) : nullptr;
        if (fn == nullptr) {
          throw Error(ErrorCode::kInternal, p.name + ": transform '" + piece.transform + "' is not registered");
        }
        (*fn)(std::span(out, piece.out_bytes), p.dtype, piece.record ? piece.record->name : p.name);
      }
      at += piece.out_bytes;
    }
    device.end_write(*buffer, dst);
    buffers[index] = std::move(buffer);
    const uint64_t now = done_bytes += p.nbytes;
    if (options.progress) {
      std::lock_guard<std::mutex> lock(progress_mutex);
      options.progress(now, total);
    }
  };

  unsigned workers = options.workers ? options.workers : std::min(4u, std::max(1u, std::thread::hardware_concurrency()));
  workers = static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(workers, params.size())));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    std::vector<std::byte> staging;
    for (size_t i; !failed && (i = next.fetch_add(1)) < plan.read_order().size();) {
      try {
        load_param(plan.read_order()[i], staging);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  device.synchronize();
  if (error) std::rethrow_exception(error);

  std::unordered_map<std::string_view, size_t> by_name;
  for (size_t i = 0; i < params.size(); ++i) by_name[params[i].name] = i;
  for (size_t i = 0; i < params.size(); ++i) {
    const PlannedParam& p = params[i];
    if (p.absent || p.broken) continue;
    auto buffer = p.alias_of.empty() ? buffers[i] : buffers[by_name.at(p.alias_of)];
    model.params.push_back({p.name, p.dtype, p.shape, std::move(buffer)});
  }
  model.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  model.stats.bytes_loaded = done_bytes;
  model.stats.bytes_read = read_bytes;
  model.stats.workers = workers;
  model.stats.io_path = options.io == IoMode::kMmap ? "mmap" : "pread";
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
