// The CUDA runtime behind the seam (cuda_seam.h): each call forwards to libcudart (linked
// statically into libwmap). Built only with the toolkit; cuda_seam_stub.cc otherwise.
#include <cuda.h>  // types only: the driver is reached through the runtime's entry points
#include <cuda_runtime_api.h>

#include <mutex>

#include "cuda_kernels.h"
#include "cuda_seam.h"

namespace wmap::cuda {
namespace {

class SystemRuntime final : public Runtime {
 public:
  int device_count(int* count) override { return cudaGetDeviceCount(count); }
  int get_device(int* device) override { return cudaGetDevice(device); }
  int set_device(int device) override { return cudaSetDevice(device); }
  // cuCtxGetCurrent, found through the runtime (no link against libcuda, which machines without
  // a driver lack). Unknown (no entry point): a thread on a device other than 0 has chosen it;
  // on device 0 it is taken to have none, so restoring never creates a context on GPU 0.
  int context_active(bool* active) override {
    using GetCurrent = CUresult (*)(CUcontext*);
    static GetCurrent get_current = nullptr;
    static std::once_flag once;
    std::call_once(once, [] {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult found{};
      if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 4000, cudaEnableDefault, &found) == cudaSuccess &&
          found == cudaDriverEntryPointSuccess) {
        get_current = reinterpret_cast<GetCurrent>(fn);
      }
    });
    if (get_current == nullptr) {
      int device = 0;
      const cudaError_t e = cudaGetDevice(&device);
      *active = e == cudaSuccess && device != 0;
      return e;
    }
    CUcontext ctx = nullptr;
    *active = get_current(&ctx) == CUDA_SUCCESS && ctx != nullptr;
    return cudaSuccess;
  }
  int mem_get_info(uint64_t* free_bytes, uint64_t* total_bytes) override {
    size_t f = 0, t = 0;
    const cudaError_t e = cudaMemGetInfo(&f, &t);
    *free_bytes = f;
    *total_bytes = t;
    return e;
  }
  int malloc_device(void** p, uint64_t bytes) override { return cudaMalloc(p, bytes); }
  int free_device(void* p) override { return cudaFree(p); }
  int malloc_pinned(void** p, uint64_t bytes) override { return cudaHostAlloc(p, bytes, cudaHostAllocPortable); }
  int free_pinned(void* p) override { return cudaFreeHost(p); }
  int stream_create(Stream* s) override {
    cudaStream_t stream = nullptr;
    const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    *s = stream;
    return e;
  }
  int stream_destroy(Stream s) override { return cudaStreamDestroy(static_cast<cudaStream_t>(s)); }
  int stream_synchronize(Stream s) override { return cudaStreamSynchronize(static_cast<cudaStream_t>(s)); }
  int memcpy_to_device_async(void* dst, const void* src, uint64_t bytes, Stream s) override {
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(s));
  }
  int memcpy_to_host(void* dst, const void* src, uint64_t bytes) override {
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  int event_create(Event* e) override {
    cudaEvent_t event = nullptr;
    const cudaError_t r = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    *e = event;
    return r;
  }
  int event_record(Event e, Stream s) override {
    return cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(s));
  }
  int event_query(Event e) override { return cudaEventQuery(static_cast<cudaEvent_t>(e)); }
  int event_synchronize(Event e) override { return cudaEventSynchronize(static_cast<cudaEvent_t>(e)); }
  int event_destroy(Event e) override { return cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
  int device_synchronize() override { return cudaDeviceSynchronize(); }
  int invert_scales_async(void* data, uint64_t count, DType dtype, Stream s) override {
    return launch_invert_scales(data, count, dtype, static_cast<cudaStream_t>(s));
  }
  int block_scale_interleave_async(void* data, uint64_t rows, uint64_t cols, Stream s) override {
    return launch_block_scale_interleave(data, rows, cols, static_cast<cudaStream_t>(s));
  }
  void clear_last_error() override { (void)cudaGetLastError(); }
  std::string error_text(int code) override {
    const auto e = static_cast<cudaError_t>(code);
    return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
  }
};

}  // namespace

std::shared_ptr<Runtime> system_runtime(std::string*) {
  static const auto runtime = std::make_shared<SystemRuntime>();
  return runtime;
}

}  // namespace wmap::cuda
