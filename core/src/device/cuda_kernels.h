#pragma once
// Kernels of the CUDA device (cuda_kernels.cu), launched on the caller's stream after the copy
// they follow. Only cuda_device.cc includes this header.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "wmap/format/dtype.h"

namespace wmap::cuda {

// In place over `count` elements of F32, BF16 or F16: x > 0 ? 1/x : 0 in fp32, NaN/Inf -> 0,
// rounded to nearest even (the rules of scale_inversion.h, so host and GPU agree bit for bit).
cudaError_t launch_invert_scales(void* data, uint64_t count, DType dtype, cudaStream_t stream);

// In place over a [rows, cols] byte matrix, rows a multiple of 128 and 128 * cols at most
// kMaxSwizzleBandBytes: the 128x4 block-scale swizzle (block_scale_band.h), one block per band.
cudaError_t launch_block_scale_interleave(void* data, uint64_t rows, uint64_t cols, cudaStream_t stream);

}  // namespace wmap::cuda
