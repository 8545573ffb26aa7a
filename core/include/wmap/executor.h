#pragma once
// Runs a validated LoadPlan: reads exactly the planned bytes, applies transforms, writes each
// parameter once into device memory, and releases each source after its last reader.
// One call is one load; it is thread-safe with respect to other loads.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "wmap/catalog.h"
#include "wmap/device.h"
#include "wmap/file_io.h"
#include "wmap/load_plan.h"
#include "wmap/plugin_api.h"

namespace wmap {

struct LoadedParam {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  std::shared_ptr<DeviceBuffer> buffer;  // shared between aliases (tied embeddings)
};

struct LoadStats {
  double seconds = 0;
  uint64_t bytes_loaded = 0;  // parameter bytes written
  uint64_t bytes_read = 0;    // source bytes copied out of the checkpoint
  unsigned workers = 1;
  std::string io_path;  // "mmap" or "pread"
};

struct ExecOptions {
  IoMode io = IoMode::kMmap;
  unsigned workers = 0;              // 0: min(hardware threads, 4)
  const FileSystem* fs = nullptr;    // default FileSystem::posix()
  bool allow_partial = false;        // run a plan with problems, skipping its broken parameters
  std::function<const TransformFn*(std::string_view)> transforms;  // looks up named transforms
  std::function<void(uint64_t done, uint64_t total)> progress;     // bytes; called from workers, serialised
};

struct LoadedModel {
  std::vector<LoadedParam> params;  // in plan order; absent optional params left out
  LoadStats stats;
  const LoadedParam* find(std::string_view name) const;
};

LoadedModel execute_plan(const LoadPlan& plan, const Catalog& catalog, Device& device, const ExecOptions& options);

// Copies one piece's box out of `src` (the whole source tensor) into `dst` (out_bytes).
void copy_piece(const std::byte* src, const PlannedPiece& piece, std::byte* dst);

// Writes every parameter, under its name and sorted by name, as one safetensors file.
uint64_t dump_safetensors(const LoadedModel& model, Device& device, const std::filesystem::path& file);

}  // namespace wmap
