// The CUDA device: bit-exact family loads on a GPU (--device cuda:0, dumped back through
// copy_to_host and checked against the numpy reference), the device API on buffers larger than a
// staging slab, and the scale-inversion kernel against the host for every 16-bit pattern. Every GPU
// test skips, naming the reason, where no GPU is usable; the error a GPU-less machine gives for
// --device cuda:N is tested everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "checkpoint_edit.h"
#include "wmap/device/scale_inversion.h"
#include "test_util.h"
#include "wmap/format/layout_transforms.h"
#include "wmap/device/device.h"
#include "wmap/loader/loader.h"
#include "wmap/util/error.h"

namespace wmap::test {
namespace {

// Empty when cuda:0 is usable; else why not (no CUDA in this build, no driver, no GPU).
std::string gpu_missing() {
  std::string why;
  return cuda_device_count(&why) > 0 ? "" : why;
}

#define WMAP_SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                          \
    if (const std::string why = gpu_missing(); !why.empty()) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

std::filesystem::path synth(const TempDir& dir, const std::string& family, const std::string& flags = "") {
  const auto ckpt = dir / family;
  auto r = run_wmap("synth " + family + " " + shell_quote(ckpt.string()) + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ckpt;
}

// Loads every rank of each layout on cuda:0 and checks it against the reference.
void expect_gpu_ranks_match(const std::filesystem::path& ckpt, const std::vector<std::string>& layouts,
                            const std::string& extra = "") {
  TempDir out;
  for (const auto& layout : layouts) {
    const auto t = static_cast<uint32_t>(std::stoul(layout.substr(layout.find("--tp-size ") + 10)));
    for (uint32_t r = 0; r < t; ++r) {
      const std::string flags = layout + " --tp-rank " + std::to_string(r);
      const auto dump = out / "rank.safetensors";
      auto load = run_wmap("load " + shell_quote(ckpt.string()) + " " + flags + " --device cuda:0 --dump " +
                           shell_quote(dump.string()) + " " + extra);
      ASSERT_EQ(load.exit_code, 0) << flags << "\n" << load.err;
      EXPECT_EQ(reference_mismatches(ckpt, dump, flags), "") << flags << " " << extra;
    }
  }
}

TEST(GpuLoad, CudaDeviceThatIsNotThereIsAClearError) {
  TempDir dir;
  const auto ckpt = synth(dir, "llama");
  std::string why;
  const int count = cuda_device_count(&why);
  const std::string spec = "cuda:" + std::to_string(count);  // one past the last device
  auto r = run_wmap("load " + shell_quote(ckpt.string()) + " --device " + spec);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("device " + spec + ":"), std::string::npos) << r.err;
  if (count == 0) {
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;  // the build's or CUDA's reason
  } else {
    EXPECT_NE(r.err.find("device " + std::to_string(count) + " of " + std::to_string(count)), std::string::npos)
        << r.err;
  }
  try {
    make_device(spec);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
}

TEST(GpuLoad, LlamaTp1Tp2BitExact) {
  WMAP_SKIP_WITHOUT_GPU();
  TempDir dir;
  expect_gpu_ranks_match(synth(dir, "llama", "--shards 3"), {"--tp-size 1", "--tp-size 2"});
}

TEST(GpuLoad, WorkerCountsAndIoPathsGiveTheSameBytes) {
  WMAP_SKIP_WITHOUT_GPU();
  TempDir dir;
  const auto ckpt = synth(dir, "llama", "--preset small");
  for (const std::string extra : {"--io pread --load-workers 1 --read-workers 1",
                                  "--io pread --load-workers 8 --read-workers 8", "--io mmap --load-workers 8"}) {
    expect_gpu_ranks_match(ckpt, {"--tp-size 4"}, extra);
  }
}

TEST(GpuLoad, DeepseekV3Fp8BitExact) {
  WMAP_SKIP_WITHOUT_GPU();
  TempDir dir;
  expect_gpu_ranks_match(synth(dir, "deepseek_v3", "--fp8"), {"--tp-size 1", "--tp-size 2 --ep-size 2"});
}

TEST(GpuLoad, Qwen3MoeBitExact) {
  WMAP_SKIP_WITHOUT_GPU();
  TempDir dir;
  expect_gpu_ranks_match(synth(dir, "qwen3_moe"), {"--tp-size 2 --ep-size 2"});
}

// Global scales inverted by the kernel: strict for dense layers, lenient (a zero scale) for experts.
TEST(GpuLoad, Nvfp4BitExact) {
  WMAP_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string dims = "--nvfp4 --hidden 256 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 512";
  expect_gpu_ranks_match(synth(dir, "llama", dims), {"--tp-size 1", "--tp-size 2", "--tp-size 2 --target vllm"});
  expect_gpu_ranks_match(synth(dir, "qwen3_moe", dims + " --experts 4 --moe-intermediate 192 --nvfp4-format modelopt"),
                         {"--tp-size 2 --ep-size 2", "--tp-size 2 --target vllm"});
}

TEST(GpuLoad, DenseZeroGlobalScaleIsAnErrorNamingTheKey) {
  WMAP_SKIP_WITHOUT_GPU();
  TempDir dir;
  const auto ckpt = synth(dir, "llama", "--nvfp4");
  const std::string key = "model.layers.0.self_attn.o_proj.weight_global_scale";
  const auto broken = dir / "edited";
  copy_checkpoint(ckpt, broken, [&](const std::string& n) {
    return TensorEdit{.bytes = n == key ? std::optional(std::string(4, '\0')) : std::nullopt};
  });
  auto r = run_wmap("load " + shell_quote(broken.string()) + " --device cuda:0");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("'" + key + "'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("finite scale > 0"), std::string::npos) << r.err;
}

// Writes `n` bytes of a pattern through the device API and reads them back.
void expect_round_trip(Device& device, const std::vector<uint64_t>& sizes) {
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;
  std::vector<std::span<std::byte>> staging;
  // Every buffer is begun before any is published, as the executor's workers do: the ring fills
  // up and the rest take the pageable path.
  for (uint64_t n : sizes) {
    buffers.push_back(device.allocate(n, "buffer of " + std::to_string(n)));
    staging.push_back(device.begin_write(*buffers.back()));
    ASSERT_EQ(staging.back().size(), n);
    for (uint64_t i = 0; i < n; i += 4093) staging.back()[i] = static_cast<std::byte>((i / 4093 + n) & 0xff);
  }
  for (size_t k = 0; k < buffers.size(); ++k) device.end_write(*buffers[k], staging[k]);
  device.synchronize();
  for (size_t k = 0; k < buffers.size(); ++k) {
    const uint64_t n = sizes[k];
    std::vector<std::byte> back(n);
    device.copy_to_host(*buffers[k], back);
    EXPECT_EQ(buffers[k]->host_data(), nullptr);
    if (n > 0) {
      EXPECT_NE(buffers[k]->device_data(), nullptr);
    }
    for (uint64_t i = 0; i < n; i += 4093) {
      ASSERT_EQ(back[i], static_cast<std::byte>((i / 4093 + n) & 0xff)) << "buffer " << k << " byte " << i;
    }
  }
}

// load_into on a GPU: the caller's device memory (here allocated through the device API, as an
// engine's allocator would hand it) filled bit for bit as a host load, twice (a refit in place).
TEST(GpuLoad, LoadIntoCallerOwnedDeviceMemoryBitExact) {
  WMAP_SKIP_WITHOUT_GPU();
  TempDir dir;
  for (const auto& [family, flags] : {std::pair{"llama", ""}, std::pair{"deepseek_v3", "--fp8"}}) {
    LoaderOptions lo;
    lo.checkpoint = synth(dir, family, flags);
    lo.layout.tp_size = 2;
    lo.layout.tp_rank = 1;
    lo.progress = false;
    LoaderSession session(lo);
    auto prepared = session.prepare();
    auto host = make_device("host");
    const LoadedModel want = session.load(*prepared, *host, ExecOptions{});
    auto gpu = make_device("cuda:0");
    std::vector<std::shared_ptr<DeviceBuffer>> owned;  // the "engine's" memory
    std::vector<Destination> dests;
    for (const PlannedParam& p : prepared->plan->params()) {
      if (p.absent || !p.alias_of.empty()) continue;
      owned.push_back(gpu->allocate(p.nbytes, p.name));
      dests.push_back(
          {p.name, owned.back()->device_data(), p.nbytes, p.shape, dtype_bits(p.dtype) / 8, p.dtype, "cuda:0", true});
    }
    for (int pass = 0; pass < 2; ++pass) {
      const LoadIntoReport r = session.load_into(*prepared, *gpu, dests, ExecOptions{});
      EXPECT_EQ(r.params, dests.size());
      EXPECT_EQ(r.device, "cuda:0");
      for (size_t i = 0; i < dests.size(); ++i) {
        std::vector<std::byte> got(dests[i].bytes);
        gpu->copy_to_host(*owned[i], got);
        const LoadedParam* w = want.find(dests[i].name);
        ASSERT_NE(w, nullptr);
        EXPECT_EQ(0, std::memcmp(got.data(), w->buffer->host_data(), got.size()))
            << family << " " << dests[i].name << " pass " << pass;
      }
    }
  }
}

TEST(GpuDevice, BuffersLargerThanASlabAndMoreThanTheRingHolds) {
  WMAP_SKIP_WITHOUT_GPU();
  auto device = make_device("cuda:0");
  expect_round_trip(*device, {0, 1, 1000, (uint64_t{300} << 20) + 7});  // over the 256 MiB slab
  std::vector<uint64_t> many(12, uint64_t{200} << 20);                  // 2.4 GB begun at once
  expect_round_trip(*device, many);
}

TEST(GpuDevice, ErrorsNameTheCallTheCudaErrorAndTheParameter) {
  WMAP_SKIP_WITHOUT_GPU();
  auto device = make_device("cuda:0");
  try {
    device->allocate(uint64_t{1} << 52, "model.embed_tokens.weight");
    FAIL() << "a 4 PiB allocation succeeded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cudaMalloc"), std::string::npos) << m;
    EXPECT_NE(m.find("'model.embed_tokens.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaError"), std::string::npos) << m;
  }
}

// The kernel and the host transform give the same bits for every BF16 and F16 pattern and for
// random F32 patterns (NaNs, infinities, subnormals included).
TEST(GpuDevice, InvertScaleKernelMatchesTheHostBitForBit) {
  WMAP_SKIP_WITHOUT_GPU();
  auto device = make_device("cuda:0");
  std::mt19937 rng(7);
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    std::vector<std::byte> input;
    if (dtype == DType::kF32) {
      std::vector<uint32_t> v(1 << 20);
      for (auto& x : v) x = rng();
      input.resize(v.size() * 4);
      std::memcpy(input.data(), v.data(), input.size());
    } else {
      std::vector<uint16_t> v(1 << 16);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(i);
      input.resize(v.size() * 2);
      std::memcpy(input.data(), v.data(), input.size());
    }
    auto buffer = device->allocate(input.size(), "scales");
    auto staging = device->begin_write(*buffer);
    std::memcpy(staging.data(), input.data(), input.size());
    // Two pieces, as a parameter of two experts' scales: both must be inverted.
    const uint64_t half = input.size() / 2;
    ASSERT_TRUE(device->defer_transform(*buffer, "invert_scale", 0, half, dtype, "scales", {}));
    ASSERT_TRUE(device->defer_transform(*buffer, "invert_scale", half, input.size() - half, dtype, "scales", {}));
    device->end_write(*buffer, staging);
    std::vector<std::byte> gpu(input.size());
    device->copy_to_host(*buffer, gpu);
    invert_scales(input, dtype);
    EXPECT_EQ(std::memcmp(gpu.data(), input.data(), input.size()), 0) << dtype_name(dtype);
  }
  auto buffer = device->allocate(4, "x");
  device->begin_write(*buffer);
  EXPECT_FALSE(device->defer_transform(*buffer, "some_plugin_transform", 0, 4, DType::kF32, "x", {}));
  EXPECT_THROW(device->defer_transform(*buffer, "invert_scale", 0, 4, DType::kI32, "x", {}), Error);
}

// The 128x4 block-scale swizzle kernel against the host transform, bit for bit, at band widths
// up to its shared-memory limit (the fake runtime runs the same index arithmetic on the host).
TEST(GpuDevice, BlockScaleSwizzleKernelMatchesTheHostBitForBit) {
  WMAP_SKIP_WITHOUT_GPU();
  auto device = make_device("cuda:0");
  std::mt19937 rng(13);
  for (uint64_t cols : {uint64_t{4}, uint64_t{92}, uint64_t{384}}) {
    const uint64_t rows = 128 * 37;
    std::vector<std::byte> input(rows * cols);
    for (auto& b : input) b = static_cast<std::byte>(rng());
    auto buffer = device->allocate(input.size(), "scales");
    auto staging = device->begin_write(*buffer);
    std::memcpy(staging.data(), input.data(), input.size());
    const std::vector<uint64_t> shape{rows, cols};
    ASSERT_TRUE(
        device->defer_transform(*buffer, "block_scale_interleave_128x4", 0, input.size(), DType::kI32, "s", shape));
    device->end_write(*buffer, staging);
    std::vector<std::byte> gpu(input.size());
    device->copy_to_host(*buffer, gpu);
    block_scale_interleave_128x4(input, DType::kI32, "s", shape);
    EXPECT_EQ(gpu, input) << cols << " columns";
  }
}

}  // namespace
}  // namespace wmap::test
