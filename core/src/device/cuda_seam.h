#pragma once
// The one seam between the CUDA device (cuda_device.cc) and the CUDA runtime: every runtime call
// the device makes (current device, allocations, pinned memory, streams, asynchronous copies,
// events, the scale-inversion and block-scale swizzle kernels) goes through this interface. The system runtime
// (cuda_seam_system.cc, built with the toolkit) forwards to libcudart; tests put a checking
// fake behind it (tests/device/fake_cuda_seam.h) so the device's staging, chunking, fencing and
// arena logic runs, and is checked, on machines without a GPU. No CUDA header here. (Not named
// cuda_runtime.h: this folder is on nvcc's include path, where CUDA's own header of that name
// must stay visible.)
//
// Calls return the runtime's error code (0: success) and never throw; error_text() names a code.
// As in CUDA, the current device is per thread, and streams, events and device pointers belong to
// the device that was current when they were made.

#include <cstdint>
#include <memory>
#include <string>

#include "wmap/format/dtype.h"
#include "wmap/util/export.h"

namespace wmap::cuda {

using Stream = void*;
using Event = void*;

class WMAP_API Runtime {
 public:
  static constexpr int kSuccess = 0;
  static constexpr int kNotReady = 600;  // cudaErrorNotReady: an event or stream still has work

  virtual ~Runtime() = default;
  virtual int device_count(int* count) = 0;
  virtual int get_device(int* device) = 0;
  virtual int set_device(int device) = 0;  // creates the device's context for this thread (CUDA 12+)
  // Whether the calling thread has a current context: one it made current or used. A thread
  // that never touched CUDA has none, though get_device() then says 0.
  virtual int context_active(bool* active) = 0;
  virtual int mem_get_info(uint64_t* free_bytes, uint64_t* total_bytes) = 0;  // of the current device
  virtual int malloc_device(void** p, uint64_t bytes) = 0;
  virtual int free_device(void* p) = 0;
  virtual int malloc_pinned(void** p, uint64_t bytes) = 0;  // portable page-locked host memory
  virtual int free_pinned(void* p) = 0;
  virtual int stream_create(Stream* s) = 0;  // non-blocking with respect to the default stream
  virtual int stream_destroy(Stream s) = 0;
  virtual int stream_synchronize(Stream s) = 0;
  virtual int memcpy_to_device_async(void* dst, const void* src, uint64_t bytes, Stream s) = 0;
  virtual int memcpy_to_host(void* dst, const void* src, uint64_t bytes) = 0;  // synchronous
  virtual int event_create(Event* e) = 0;                                      // without timing
  virtual int event_record(Event e, Stream s) = 0;
  virtual int event_query(Event e) = 0;  // kSuccess, kNotReady or an error
  virtual int event_synchronize(Event e) = 0;
  virtual int event_destroy(Event e) = 0;
  virtual int device_synchronize() = 0;
  // In place over `count` elements of F32, BF16 or F16 (scale_inversion.h's rules), on `s`.
  virtual int invert_scales_async(void* data, uint64_t count, DType dtype, Stream s) = 0;
  // In place over a [rows, cols] byte matrix (rows a multiple of 128, 128 * cols at most
  // kMaxSwizzleBandBytes): TensorRT-LLM's 128x4 block-scale swizzle, band by band
  // (block_scale_band.h), on `s`.
  virtual int block_scale_interleave_async(void* data, uint64_t rows, uint64_t cols, Stream s) = 0;
  // After kNotReady: CUDA records it as the thread's last error, which a later checked launch
  // would otherwise report as its own failure.
  virtual void clear_last_error() {}
  // "cudaErrorMemoryAllocation (out of memory)".
  virtual std::string error_text(int code) = 0;
};

// The process's CUDA runtime, or null with `reason` set (a build without CUDA, no driver, no GPU
// is not decided here: that is device_count()).
WMAP_API std::shared_ptr<Runtime> system_runtime(std::string* reason);

// Puts `runtime` behind make_device("cuda...") and cuda_device_count() for the whole process
// instead of the system runtime (null: the system's again). For tests that drive a front end
// (the Python module) through the checking fake; exported from libwmap, declared only here.
WMAP_API void set_process_runtime(std::shared_ptr<Runtime> runtime);

}  // namespace wmap::cuda
