// `wmap_h2d_bench [MiB] [repeats]`: host-to-device bandwidth of plain copies from pinned memory,
// the ceiling a `wmap load --device cuda:0` is compared with (bench/gpu.sh). Prints one line per
// mode: `h2d <mode> <GB/s>`; exit 1 (with the CUDA error) when no GPU is usable.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

void check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "wmap_h2d_bench: %s failed: %s (%s)\n", call, cudaGetErrorName(e), cudaGetErrorString(e));
  std::exit(1);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const size_t bytes = mib << 20;
  check(cudaSetDevice(0), "cudaSetDevice");
  void *host = nullptr, *dev = nullptr;
  check(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  check(cudaMalloc(&dev, bytes), "cudaMalloc");
  std::memset(host, 1, bytes);
  check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (warm-up)");

  double t0 = now();
  for (int r = 0; r < repeats; ++r) check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  const double whole = static_cast<double>(bytes) * repeats / (now() - t0) / 1e9;

  // wmap's pattern: 256 MiB pieces over four streams.
  constexpr int kStreams = 4;
  const size_t piece = size_t{256} << 20;
  cudaStream_t streams[kStreams];
  for (auto& s : streams) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  t0 = now();
  for (int r = 0; r < repeats; ++r) {
    int k = 0;
    for (size_t at = 0; at < bytes; at += piece, ++k) {
      const size_t n = bytes - at < piece ? bytes - at : piece;
      check(cudaMemcpyAsync(static_cast<char*>(dev) + at, static_cast<char*>(host) + at, n, cudaMemcpyHostToDevice,
                            streams[k % kStreams]),
            "cudaMemcpyAsync");
    }
    for (auto& s : streams) check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
  const double chunked = static_cast<double>(bytes) * repeats / (now() - t0) / 1e9;

  std::printf("h2d pinned_memcpy %.3f\n", whole);
  std::printf("h2d pinned_async_4streams %.3f\n", chunked);
  for (auto& s : streams) cudaStreamDestroy(s);
  cudaFree(dev);
  cudaFreeHost(host);
  return 0;
}
