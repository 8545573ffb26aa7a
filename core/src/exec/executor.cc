#include "wmap/exec/executor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "copy_kernels.h"
#include "plan_runner.h"
#include "shard_hasher.h"
#include "wmap/format/safetensors_writer.h"
#include "wmap/util/xxh3.h"
#include "wmap/util/env.h"
#include "wmap/util/error.h"

namespace wmap {

const LoadedParam* LoadedModel::find(std::string_view name) const {
  for (const auto& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

namespace {

unsigned hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace

std::string_view verify_mode_name(ExecOptions::Verify mode) {
  switch (mode) {
    case ExecOptions::Verify::kOff: return "off";
    case ExecOptions::Verify::kBestEffort: return "best-effort";
    case ExecOptions::Verify::kRead: return "read";
    case ExecOptions::Verify::kFull: return "full";
  }
  return "off";
}

std::optional<ExecOptions::Verify> parse_verify_mode(std::string_view name) {
  for (auto m : {ExecOptions::Verify::kOff, ExecOptions::Verify::kBestEffort, ExecOptions::Verify::kRead,
                 ExecOptions::Verify::kFull}) {
    if (name == verify_mode_name(m)) return m;
  }
  return std::nullopt;
}

unsigned default_read_workers() { return std::min(4u, hardware_threads()); }
unsigned default_load_workers() { return std::min(4u, hardware_threads()); }
unsigned default_staged_read_workers() {
  const unsigned hw = hardware_threads();
  return std::min(hw, std::clamp(hw / 2, 4u, 8u));
}

unsigned worker_count_from_env(const char* name) {
  return static_cast<unsigned>(env_integer(name, 1, 4096, "a number of workers").value_or(0));
}

IoMode choose_io_mode(const LoadPlan&, std::string* reason) {
  // Measured (docs/performance.md): pread straight into the parameters beats copying out of
  // populated mmap windows on every load measured, whole checkpoints included, and it turns a
  // shard truncated under a load into an error instead of a signal. So auto is pread, said so.
  if (reason) *reason = "auto: pread (measured faster than mmap on every load in docs/performance.md)";
  return IoMode::kPread;
}

void require_verification(const LoadPlan& plan, const ExecOptions& options) {
  const exec_detail::ShardHasher hasher(plan, options, [](uint32_t) -> const RandomAccessFile& {
    throw Error(ErrorCode::kInternal, "require_verification reads no file");
  });
  exec_detail::require_met(hasher.unmet(), options.verify);
}

LoadedModel execute_plan(const LoadPlan& plan, Device& device, const ExecOptions& options) {
  plan.require_runnable(options.allow_partial);
  return exec_detail::PlanRunner(plan, device, options).run();
}

std::vector<uint64_t> param_digests(const LoadedModel& model, Device& device) {
  std::vector<uint64_t> out;
  out.reserve(model.params.size());
  std::vector<std::byte> staged;
  for (const LoadedParam& p : model.params) {
    const uint64_t n = p.buffer ? p.buffer->size() : 0;
    const std::byte* host = n ? p.buffer->host_data() : nullptr;
    if (n && host == nullptr) {
      if (staged.size() < n) staged.resize(n);
      device.copy_to_host(*p.buffer, std::span(staged.data(), n));
      host = staged.data();
    }
    out.push_back(xxh3_64({host, n}));
  }
  return out;
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
