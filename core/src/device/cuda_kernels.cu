// Default nvcc flags keep IEEE division (-prec-div=true) and denormals (-ftz=false), which the
// bit-exact agreement with the host transform relies on: do not build this with --use_fast_math.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "block_scale_band.h"
#include "cuda_kernels.h"

namespace wmap::cuda {
namespace {

__device__ float to_float(float x) { return x; }
__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ T from_float(float y);
template <>
__device__ float from_float<float>(float y) {
  return y;
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float y) {
  return __float2bfloat16_rn(y);
}
template <>
__device__ __half from_float<__half>(float y) {
  return __float2half_rn(y);
}

template <typename T>
__global__ void invert_scales_kernel(T* data, uint64_t count) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const float x = to_float(data[i]);
    data[i] = from_float<T>((isfinite(x) && x > 0.0f) ? 1.0f / x : 0.0f);
  }
}

template <typename T>
cudaError_t launch(void* data, uint64_t count, cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<uint64_t>((count + kThreads - 1) / kThreads, 4096));
  // The last-error slot is per thread and survives successful calls: clear what an earlier call
  // (e.g. a cudaEventQuery that said cudaErrorNotReady) left, so only this launch is reported.
  (void)cudaGetLastError();
  invert_scales_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(data), count);
  return cudaGetLastError();
}

// One block per 128-row band: the band is read whole into shared memory (a band swizzles onto its
// own bytes, so every read precedes every write), then written back in order, each thread taking
// the source byte of the band bytes it writes.
__global__ void block_scale_interleave_kernel(unsigned char* data, uint64_t cols) {
  extern __shared__ unsigned char band[];
  const uint64_t n = 128 * cols;
  unsigned char* p = data + static_cast<uint64_t>(blockIdx.x) * n;
  for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) band[i] = p[i];
  __syncthreads();
  for (uint64_t d = threadIdx.x; d < n; d += blockDim.x) p[d] = band[block_scale_band_source(d, cols)];
}

}  // namespace

cudaError_t launch_block_scale_interleave(void* data, uint64_t rows, uint64_t cols, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows % 128 != 0 || cols == 0 || cols % 4 != 0 || 128 * cols > kMaxSwizzleBandBytes || rows / 128 > 0x7fffffffu)
    return cudaErrorInvalidValue;  // the device checked the geometry before deferring
  (void)cudaGetLastError();        // as launch() above: report this launch's error only
  block_scale_interleave_kernel<<<static_cast<unsigned>(rows / 128), 256, static_cast<size_t>(128 * cols), stream>>>(
      static_cast<unsigned char*>(data), cols);
  return cudaGetLastError();
}

cudaError_t launch_invert_scales(void* data, uint64_t count, DType dtype, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kF32: return launch<float>(data, count, stream);
    case DType::kBF16: return launch<__nv_bfloat16>(data, count, stream);
    case DType::kF16: return launch<__half>(data, count, stream);
    default: return cudaErrorInvalidValue;  // the caller checked the dtype (check_scale_dtype)
  }
}

}  // namespace wmap::cuda
