#pragma once
// The index arithmetic of TensorRT-LLM's 128x4 block-scale swizzle (block_scale_interleave_128x4,
// wmap/format/layout_transforms.h) in the direction a GPU thread needs it: which source byte of a
// 128-row band lands at band byte `d`. One definition, compiled by nvcc into the CUDA kernel
// (cuda_kernels.cu) and by the host compiler into the checking fake runtime's instantiation
// (tests/device/fake_cuda_seam.cc), whose loads are compared bit for bit with the host transform.
// A band of 128 rows x cols bytes swizzles onto exactly its own bytes, so a matrix is swizzled
// band by band; byte (m, k) of a band goes to k%4 + (k/4)*512 + (m%32)*16 + (m/32)*4.

#include <cstdint>

#if defined(__CUDACC__)
#define WMAP_HOST_DEVICE __host__ __device__
#else
#define WMAP_HOST_DEVICE
#endif

namespace wmap::cuda {

// The largest band the kernel swizzles in shared memory (the default 48 KiB a block may use
// without opting in): cols <= 384, i.e. K <= 12288 at 32-element blocks.
inline constexpr uint64_t kMaxSwizzleBandBytes = uint64_t{48} << 10;

// The row-major source byte (m * cols + k) of a band whose swizzled byte `d` it becomes.
WMAP_HOST_DEVICE inline uint64_t block_scale_band_source(uint64_t d, uint64_t cols) {
  const uint64_t tile = d / 512, in_tile = d % 512;  // tile: columns 4*tile .. 4*tile+3
  const uint64_t r32 = in_tile / 16, quarter = (in_tile % 16) / 4, byte = in_tile % 4;
  return (32 * quarter + r32) * cols + 4 * tile + byte;
}

}  // namespace wmap::cuda
