// The CUDA device on the CPU: its runtime calls go to a checking fake (fake_cuda_seam.h) whose
// copies complete late and out of order, so the device's staging, chunking, fencing and arena
// logic runs here as it would on a GPU. Family loads are checked bit for bit against the numpy
// reference with rings smaller than the parameters; what the fake flags as misuse (staging reused
// before its fence, a pointer of another device, a copy from pageable memory) fails every test.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "cuda_device.h"
#include "fake_cuda_seam.h"
#include "test_util.h"
#include "wmap/loader/loader.h"
#include "wmap/catalog/shard_digests.h"
#include "wmap/exec/destinations.h"
#include "wmap/format/layout_transforms.h"
#include "wmap/util/error.h"
#include "wmap/util/sha256.h"

namespace wmap::test {
namespace {

std::filesystem::path synth(const TempDir& dir, const std::string& family, const std::string& flags = "") {
  const auto ckpt = dir / family;
  auto r = run_wmap("synth " + family + " " + shell_quote(ckpt.string()) + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ckpt;
}

std::shared_ptr<FakeCudaRuntime> fake_with(int devices, uint64_t memory = uint64_t{1} << 30, int max_delay_us = 200) {
  FakeCudaRuntime::Options o;
  o.devices = devices;
  o.memory_per_device = memory;
  o.max_delay_us = max_delay_us;
  return std::make_shared<FakeCudaRuntime>(o);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "\n  " + x;
  return s;
}

struct Rank {
  uint32_t tp = 1, rank = 0, ep = 1;
  Target target = Target::kTrtllm;
  std::string flags() const {
    return "--tp-size " + std::to_string(tp) + " --tp-rank " + std::to_string(rank) + " --ep-size " +
           std::to_string(ep) + " --target " + std::string(target_name(target));
  }
};

LoadedModel load(const std::filesystem::path& ckpt, Device& device, const Rank& r, IoMode io = IoMode::kPread,
                 uint64_t chunk_bytes = 0) {
  LoaderOptions lo = rank_options(ckpt, r.tp, r.rank, r.ep, r.target);
  if (chunk_bytes) lo.plan.chunk_bytes = chunk_bytes;
  LoaderSession session(lo);
  auto prepared = session.prepare();
  ExecOptions exec;
  exec.io = io;
  exec.read_workers = 4;
  exec.load_workers = 3;
  return session.load(*prepared, device, exec);
}

// Loads rank `r` through the fake and checks it against the reference; empty when it matches.
std::string load_mismatches(const std::filesystem::path& ckpt, Device& device, const Rank& r,
                            IoMode io = IoMode::kPread, uint64_t chunk_bytes = 0) {
  TempDir out;
  const LoadedModel model = load(ckpt, device, r, io, chunk_bytes);
  const auto dump = out / "rank.safetensors";
  dump_safetensors(model, device, dump);
  return reference_mismatches(ckpt, dump, r.flags());
}

// Rings smaller than the parameters: 64 KiB read units in 256 KiB slabs (most regions fit a
// lease), and default 16 MiB units through two 64 KiB slabs (every region streamed in chunks).
struct Setup {
  const char* name;
  CudaTuning tuning;
  uint64_t chunk_bytes;
};
const Setup kSetups[] = {
    {"leases", {.slab_bytes = 256 << 10, .slabs = 3, .streams = 3}, 64 << 10},
    {"streamed", {.slab_bytes = 64 << 10, .slabs = 2, .streams = 2}, 0},
};

void expect_every_rank_matches_through_fake(const std::filesystem::path& ckpt, const std::vector<Rank>& layouts,
                                            std::initializer_list<IoMode> ios = {IoMode::kPread}) {
  for (const Setup& s : kSetups) {
    auto fake = std::make_shared<FakeCudaRuntime>();
    auto device = make_cuda_device(0, fake, s.tuning);
    uint64_t loads = 0;
    for (const Rank& layout : layouts) {
      for (uint32_t r = 0; r < layout.tp; ++r) {
        for (IoMode io : ios) {
          Rank rank = layout;
          rank.rank = r;
          EXPECT_EQ(load_mismatches(ckpt, *device, rank, io, s.chunk_bytes), "") << s.name << " " << rank.flags();
          ++loads;
        }
      }
    }
    const auto c = fake->counts();
    EXPECT_EQ(c.device_mallocs, loads) << s.name << ": one arena per load, no cudaMalloc per parameter";
    EXPECT_GT(c.async_copies, loads) << s.name;
    EXPECT_TRUE(fake->violations().empty()) << s.name << joined(fake->violations());
  }
}

TEST(FakeCuda, LlamaTp1Tp2BitExactThroughTheFake) {
  TempDir dir;
  expect_every_rank_matches_through_fake(synth(dir, "llama", "--shards 3"), {{1}, {2}},
                                         {IoMode::kPread, IoMode::kMmap});
}

TEST(FakeCuda, DeepseekFp8BitExactWithParametersLargerThanTheRing) {
  TempDir dir;
  expect_every_rank_matches_through_fake(synth(dir, "deepseek_v3", "--fp8"), {{1}, {2, 0, 2}});
}

// Padded cuts, interleaved rows, the int64/int32 views and the host transforms that stage a
// parameter whole (bf16_to_f32, block_scale_interleave_128x4) through the device's staging.
TEST(FakeCuda, GptOssBothTargetsBitExactThroughTheFake) {
  TempDir dir;
  expect_every_rank_matches_through_fake(synth(dir, "gpt_oss"),
                                         {{1}, {2}, {2, 0, 2}, {4, 0, 4, Target::kVllm}, {2, 0, 1, Target::kVllm}},
                                         {IoMode::kPread, IoMode::kMmap});
}

// Per-expert transposes of stacked slabs and the within-head pair permutation.
TEST(FakeCuda, Llama4BothTargetsBitExactThroughTheFake) {
  TempDir dir;
  expect_every_rank_matches_through_fake(synth(dir, "llama4"),
                                         {{2}, {4, 0, 2}, {2, 0, 1, Target::kVllm}, {4, 0, 4, Target::kVllm}});
}

// Converted parameters (DeepSeek-V3.2's F32 norms narrowed to BF16, its FP8 indexer wk
// dequantized): assembled whole on the host, converted, then published through the staging ring.
TEST(FakeCuda, DeepseekV32ConversionsBitExactThroughTheFake) {
  TempDir dir;
  expect_every_rank_matches_through_fake(synth(dir, "deepseek_v32", "--fp8"), {{2}, {1, 0, 1, Target::kVllm}});
}

// load --verify and --digests through the staged device: the shards' SHA-256 comes from the
// bytes as read (staged regions copied out before they are published), and each parameter's
// XXH3-64 (hashed on the host from the device's final bytes: scale inversions run after staging)
// equals the host load's, for every ring setup, with no misuse of the fake.
TEST(FakeCuda, DigestsAndVerificationEqualTheHostLoad) {
  TempDir dir;
  for (const auto& [family, flags] :
       {std::pair<std::string, std::string>{"llama", "--shards 3"}, {"qwen3_moe", "--nvfp4"}}) {
    const auto ckpt = synth(dir, family, flags);
    LoaderSession session(rank_options(ckpt, 1, 0));
    auto prepared = session.prepare();
    ExecOptions exec;
    exec.digests = true;
    exec.verify = ExecOptions::Verify::kBestEffort;  // no expected digests here: hashed and reported
    exec.read_workers = 4;
    exec.load_workers = 3;
    auto host = make_device(DeviceSpec::parse("host"));
    const LoadedModel want = session.load(*prepared, *host, exec);
    ASSERT_EQ(want.digests.size(), want.params.size());
    ASSERT_EQ(want.stats.verification.size(), prepared->catalog->shards().size());
    for (const ShardCheck& c : want.stats.verification) {
      EXPECT_EQ(c.status, ShardCheck::Status::kNoDigest) << c.line();
      EXPECT_EQ(c.actual, sha256_hex(read_file(c.file))) << c.file;
    }
    for (const auto& s : kSetups) {
      auto fake = std::make_shared<FakeCudaRuntime>();
      auto device = make_cuda_device(0, fake, s.tuning);
      LoaderOptions lo = rank_options(ckpt, 1, 0);
      lo.plan.chunk_bytes = s.chunk_bytes;
      LoaderSession staged_session(lo);
      auto staged_prepared = staged_session.prepare();
      const LoadedModel got = staged_session.load(*staged_prepared, *device, exec);
      ASSERT_EQ(got.params.size(), want.params.size()) << s.name;
      for (size_t i = 0; i < got.params.size(); ++i) {
        EXPECT_EQ(got.params[i].name, want.params[i].name);
        EXPECT_EQ(got.digests[i], want.digests[i]) << family << " " << s.name << " " << got.params[i].name;
      }
      ASSERT_EQ(got.stats.verification.size(), want.stats.verification.size());
      for (size_t i = 0; i < got.stats.verification.size(); ++i) {
        EXPECT_EQ(got.stats.verification[i].actual, want.stats.verification[i].actual) << s.name;
      }
      EXPECT_TRUE(fake->violations().empty()) << s.name << joined(fake->violations());
    }
  }
}

// Global scales inverted by the "kernel" (the host rule, run by the fake's stream) region by region.
// TensorRT-LLM's NVFP4 parameters (swizzled scales, inverted and multiplied global scales) are
// assembled and converted on the host, then published through the seam like any other bytes.
TEST(FakeCuda, Nvfp4ConvertedParametersPublishedBitExact) {
  TempDir dir;
  const std::string dims =
      "--nvfp4 --hidden 256 --heads 4 --kv-heads 2 --head-dim 128 --intermediate 512 "
      "--experts 4 --moe-intermediate 192";
  expect_every_rank_matches_through_fake(synth(dir, "qwen3_moe", dims), {{2, 0, 2}});
  expect_every_rank_matches_through_fake(synth(dir, "qwen3_moe", dims + " --nvfp4-format modelopt"), {{2, 0, 2}});
}

// An engine (torch) in the same process keeps its current device across our calls.
TEST(FakeCuda, TheCallersCurrentDeviceIsRestored) {
  TempDir dir;
  const auto ckpt = synth(dir, "llama");
  auto fake = fake_with(2);
  ASSERT_EQ(fake->set_device(1), 0);
  auto device0 = make_cuda_device(0, fake, kSetups[1].tuning);
  int current = -1;
  fake->get_device(&current);
  EXPECT_EQ(current, 1) << "opening cuda:0";
  EXPECT_EQ(load_mismatches(ckpt, *device0, {}), "");
  fake->get_device(&current);
  EXPECT_EQ(current, 1) << "loading on cuda:0";
  ASSERT_EQ(fake->set_device(0), 0);
  auto device1 = make_cuda_device(1, fake, kSetups[1].tuning);
  EXPECT_EQ(load_mismatches(ckpt, *device1, {}), "");
  fake->get_device(&current);
  EXPECT_EQ(current, 0) << "loading on cuda:1";
  EXPECT_TRUE(fake->violations().empty()) << joined(fake->violations());
}

// A thread that never used CUDA (a CLI, the executor's workers) is not switched "back" to
// device 0 after a call on cuda:1: that would create a context on GPU 0, taking memory from the
// rank that owns it.
TEST(FakeCuda, ALoadOnAnotherGpuCreatesNoContextOnGpu0) {
  TempDir dir;
  const auto ckpt = synth(dir, "llama");
  auto fake = fake_with(2);
  std::string mismatches = "not run";
  std::thread([&] {
    auto device = make_cuda_device(1, fake, kSetups[1].tuning);
    mismatches = load_mismatches(ckpt, *device, {2, 1, 1});
  }).join();
  EXPECT_EQ(mismatches, "");
  EXPECT_TRUE(fake->context_created(1));
  EXPECT_FALSE(fake->context_created(0));
  EXPECT_TRUE(fake->violations().empty()) << joined(fake->violations());
}

// Each load allocates from its own reservation: two loads at once on one device take one
// allocation each and neither falls back to an allocation per parameter.
TEST(FakeCuda, ConcurrentLoadsOnOneDeviceKeepTheirOwnArenas) {
  TempDir dir;
  const auto ckpt = synth(dir, "llama");
  auto fake = fake_with(1);
  auto device = make_cuda_device(0, fake, kSetups[0].tuning);
  std::string a = "not run", b = "not run";
  std::thread ta([&] { a = load_mismatches(ckpt, *device, {2, 0, 1}); });
  std::thread tb([&] { b = load_mismatches(ckpt, *device, {2, 1, 1}); });
  ta.join();
  tb.join();
  EXPECT_EQ(a, "");
  EXPECT_EQ(b, "");
  EXPECT_EQ(fake->counts().device_mallocs, 2u);
  EXPECT_TRUE(fake->violations().empty()) << joined(fake->violations());
}

// Out of device memory is known from the plan: the error names the need and what is free, and
// comes before any allocation or copy.
TEST(FakeCuda, ALoadTooLargeForTheDeviceFailsBeforeAnyByteIsCopied) {
  TempDir dir;
  const auto ckpt = synth(dir, "llama");
  auto fake = fake_with(1, 64 << 10);
  auto device = make_cuda_device(0, fake, kSetups[1].tuning);
  try {
    load(ckpt, *device, {});
    FAIL() << "loaded into 64 KiB";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kValidation) << m;
    EXPECT_NE(m.find("cuda:0: the load needs "), std::string::npos) << m;
    EXPECT_NE(m.find("parameters but only 64.00 KiB (65536 bytes) of 64.00 KiB (65536 bytes) is free on the device"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("nothing was read"), std::string::npos) << m;
  }
  EXPECT_EQ(fake->counts().device_mallocs, 0u);
  EXPECT_EQ(fake->counts().async_copies, 0u);
}

TEST(FakeCuda, AFailedDeviceAllocationNamesTheCallAndTheNeed) {
  TempDir dir;
  const auto ckpt = synth(dir, "llama");
  auto fake = std::make_shared<FakeCudaRuntime>();
  auto device = make_cuda_device(0, fake, kSetups[1].tuning);
  fake->fail_device_malloc_after(0);
  try {
    load(ckpt, *device, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda:0: the load's parameters ("), std::string::npos) << m;
    EXPECT_NE(m.find("cudaMalloc failed: cudaErrorMemoryAllocation (out of memory)"), std::string::npos) << m;
  }
  EXPECT_EQ(fake->counts().async_copies, 0u);
  fake->fail_device_malloc_after(-1);
  EXPECT_EQ(load_mismatches(ckpt, *device, {}), "");  // the device is still usable
}

// Review F5: a copy that fails inside a staged (transposed) copy unit. DeepSeek FP8's
// k_b_proj_trans pieces are read whole into staging buffers (pread) and copied out under a CUDA
// region; failing each of the first copies in turn runs that error path at every point of the
// load. The staging buffer goes back once (a second give-back let two read workers fill it at
// once); the load fails naming the runtime's error, the fake sees no misuse, and the device loads
// bit-exact afterwards.
TEST(FakeCuda, AFailedCopyInAStagedUnitFailsTheLoadAndLeavesTheDeviceUsable) {
  TempDir dir;
  const auto ckpt = synth(dir, "deepseek_v3", "--fp8");
  auto fake = std::make_shared<FakeCudaRuntime>();
  auto device = make_cuda_device(0, fake, kSetups[0].tuning);
  for (int after : {0, 3, 17, 60}) {
    fake->fail_async_copy_after(after);
    try {
      load(ckpt, *device, {2, 0, 2}, IoMode::kPread, 64 << 10);
      ADD_FAILURE() << "a failing cudaMemcpyAsync after " << after << " copies went unnoticed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cudaErrorInvalidValue"), std::string::npos) << e.what();
    }
    fake->fail_async_copy_after(-1);
    device->synchronize();
  }
  EXPECT_TRUE(fake->violations().empty()) << joined(fake->violations());
  EXPECT_EQ(load_mismatches(ckpt, *device, {2, 0, 2}, IoMode::kPread, 64 << 10), "");
  EXPECT_TRUE(fake->violations().empty()) << joined(fake->violations());
}

// Pinned memory short: the device opens with fewer slabs (a warning) and loads the same bytes;
// with none at all, opening it is the error.
TEST(FakeCuda, PinnedMemoryShortfallMeansFewerSlabsNotAFailedLoad) {
  TempDir dir;
  const auto ckpt = synth(dir, "llama");
  for (int slabs : {2, 1}) {
    auto fake = std::make_shared<FakeCudaRuntime>();
    fake->fail_pinned_after(slabs);
    auto device = make_cuda_device(0, fake, {.slab_bytes = 256 << 10, .slabs = 4, .streams = 2});
    EXPECT_EQ(fake->counts().pinned_bytes_live, static_cast<uint64_t>(slabs) << 18)
        << slabs << " slab(s), when the device opened";
    EXPECT_EQ(load_mismatches(ckpt, *device, {}, IoMode::kPread, 64 << 10), "") << slabs;
    EXPECT_TRUE(fake->violations().empty()) << joined(fake->violations());
  }

  auto none = std::make_shared<FakeCudaRuntime>();
  none->fail_pinned_after(0);
  try {
    make_cuda_device(0, none);
    FAIL() << "opened without pinned memory";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda:0: cannot pin any host staging memory"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaHostAlloc failed: cudaErrorMemoryAllocation"), std::string::npos) << m;
  }
}

// Buffers through the device API directly: whole buffers larger than the ring, and many regions
// of one buffer filled and published from several threads at once.
TEST(FakeCuda, WholeBuffersAndConcurrentRegionsRoundTrip) {
  auto fake = std::make_shared<FakeCudaRuntime>();
  auto device = make_cuda_device(0, fake, {.slab_bytes = 64 << 10, .slabs = 2, .streams = 3});
  auto pattern = [](uint64_t i, uint64_t salt) { return static_cast<std::byte>((i * 131 + salt) & 0xff); };
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{1000}, uint64_t{300} << 10}) {
    auto b = device->allocate(n, "whole");
    auto host = device->begin_write(*b);
    for (uint64_t i = 0; i < n; ++i) host[i] = pattern(i, n);
    device->end_write(*b, host);
    std::vector<std::byte> back(n);
    device->copy_to_host(*b, back);
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], pattern(i, n)) << n << " byte " << i;
  }
  const uint64_t region = 40 << 10, regions = 24;
  auto b = device->allocate(region * regions, "regions");
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      for (uint64_t k = static_cast<uint64_t>(t); k < regions; k += 4) {
        StagedRegion r = device->begin_region(*b, k * region, region);
        for (uint64_t i = 0; i < region; ++i) r.host[i] = pattern(k * region + i, 7);
        device->end_region(*b, r);
      }
    });
  }
  for (auto& w : workers) w.join();
  std::vector<std::byte> back(region * regions);
  device->copy_to_host(*b, back);
  for (uint64_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], pattern(i, 7)) << "byte " << i;
  EXPECT_TRUE(fake->violations().empty()) << joined(fake->violations());
}

// TensorRT-LLM's 128x4 block-scale swizzle after the raw copy, as a kernel (block_scale_band.h,
// run by the fake on the host): through the device API against the host transform, for band
// widths up to the kernel's shared-memory limit, over two pieces of one buffer; wider bands and
// other geometries are left to the host (defer_transform says false); and a gpt-oss TensorRT-LLM
// load swizzles every scale parameter on the device, bit for bit with the numpy reference.
TEST(FakeCuda, TheBlockScaleSwizzleRunsOnTheDeviceAfterTheRawCopy) {
  auto fake = std::make_shared<FakeCudaRuntime>();
  auto device = make_cuda_device(0, fake, {.slab_bytes = 64 << 10, .slabs = 2, .streams = 2});
  std::mt19937 rng(11);
  for (uint64_t cols : {uint64_t{4}, uint64_t{8}, uint64_t{92}, uint64_t{384}}) {
    const uint64_t rows = 256, piece = rows * cols;
    std::vector<std::byte> input(2 * piece);
    for (auto& b : input) b = static_cast<std::byte>(rng());
    auto buffer = device->allocate(input.size(), "scales");
    auto staging = device->begin_write(*buffer);
    std::memcpy(staging.data(), input.data(), input.size());
    const std::vector<uint64_t> shape{rows, cols};
    ASSERT_TRUE(device->defer_transform(*buffer, "block_scale_interleave_128x4", 0, piece, DType::kI32, "s", shape));
    ASSERT_TRUE(
        device->defer_transform(*buffer, "block_scale_interleave_128x4", piece, piece, DType::kI32, "s", shape));
    device->end_write(*buffer, staging);
    std::vector<std::byte> back(input.size());
    device->copy_to_host(*buffer, back);
    for (uint64_t at = 0; at < input.size(); at += piece)
      block_scale_interleave_128x4(std::span(input).subspan(at, piece), DType::kI32, "s", shape);
    EXPECT_EQ(back, input) << cols << " columns";
  }
  EXPECT_EQ(fake->counts().swizzle_kernels, 8u);
  auto buffer = device->allocate(128 * 388, "wide");
  device->begin_write(*buffer);
  const std::vector<uint64_t> wide{128, 388}, ragged{100, 4}, odd{128, 6};
  EXPECT_FALSE(device->defer_transform(*buffer, "block_scale_interleave_128x4", 0, 128 * 388, DType::kI32, "w", wide))
      << "a band over the kernel's shared memory stays on the host";
  EXPECT_FALSE(device->defer_transform(*buffer, "block_scale_interleave_128x4", 0, 400, DType::kI32, "w", ragged));
  EXPECT_FALSE(device->defer_transform(*buffer, "block_scale_interleave_128x4", 0, 768, DType::kI32, "w", odd));
  EXPECT_EQ(fake->counts().swizzle_kernels, 8u);

  TempDir dir;
  const auto ckpt = synth(dir, "gpt_oss", "--preset tiny");
  const uint64_t before = fake->counts().swizzle_kernels;
  EXPECT_EQ(load_mismatches(ckpt, *device, Rank{}), "");
  // Two swizzled scale parameters per layer (w3_w1 and w2), each run as one kernel per piece.
  const auto config = run_wmap("plan " + shell_quote(ckpt.string()) + " --target trtllm --json");
  ASSERT_EQ(config.exit_code, 0) << config.err;
  size_t swizzled = 0;
  for (size_t at = 0; (at = config.out.find("\"block_scale_interleave_128x4\"", at)) != std::string::npos; ++at)
    ++swizzled;
  EXPECT_GT(swizzled, 0u);
  EXPECT_EQ(fake->counts().swizzle_kernels - before, swizzled);
  EXPECT_TRUE(fake->violations().empty()) << joined(fake->violations());
}

// atomic load_into into device memory: staged on the host, committed through the device's pinned
// ring once the whole load succeeded. A load that fails (a digest mismatch found after the reads)
// leaves the device memory as it was; a copy failing during the commit says the destinations may
// hold a mixture and names them all.
TEST(FakeCuda, AnAtomicLoadIntoDeviceMemoryCommitsOnlyAfterTheWholeLoad) {
  TempDir dir;
  const auto ckpt = synth(dir, "deepseek_v3", "--fp8");
  auto fake = std::make_shared<FakeCudaRuntime>();
  auto device = make_cuda_device(0, fake, kSetups[1].tuning);
  LoaderSession session(rank_options(ckpt, 2, 1, 1, Target::kTrtllm));
  auto prepared = session.prepare();
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;
  std::vector<Destination> dests;
  for (const PlannedParam& p : prepared->plan->params()) {
    if (p.absent || !p.alias_of.empty()) continue;
    auto b = device->allocate(p.nbytes, p.name);
    auto host = device->begin_write(*b);
    std::fill(host.begin(), host.end(), std::byte{0xAB});
    device->end_write(*b, host);
    dests.push_back({p.name, b->device_data(), p.nbytes, p.shape, dtype_bits(p.dtype) / 8, p.dtype, "cuda:0", true});
    buffers.push_back(b);
  }
  auto contents = [&] {
    std::map<std::string, std::vector<std::byte>> m;
    for (size_t i = 0; i < buffers.size(); ++i) {
      std::vector<std::byte> v(buffers[i]->size());
      device->copy_to_host(*buffers[i], v);
      m[dests[i].name] = std::move(v);
    }
    return m;
  };
  const auto before = contents();
  DestinationOptions atomic;
  atomic.atomic = true;
  ExecOptions bad;
  bad.verify = ExecOptions::Verify::kFull;
  const auto files = shard_files(ckpt);
  for (size_t i = 0; i < files.size(); ++i) {
    bad.expected_sha256.push_back(ExpectedDigest{
        i + 1 == files.size() ? std::string(64, '0') : sha256_hex(read_file(ckpt / files[i])), "test manifest"});
  }
  EXPECT_THROW(session.load_into(*prepared, *device, dests, bad, atomic), Error);
  EXPECT_TRUE(contents() == before) << "a failed atomic load changed device memory";

  auto host = make_device("host");
  const LoadedModel reference = session.load(*prepared, *host, ExecOptions{});
  const LoadIntoReport r = session.load_into(*prepared, *device, dests, ExecOptions{}, atomic);
  EXPECT_TRUE(r.atomic);
  const auto after = contents();
  for (const auto& p : reference.params) {
    const std::vector<std::byte> want(p.buffer->host_data(), p.buffer->host_data() + p.buffer->size());
    EXPECT_TRUE(after.at(p.name) == want) << p.name;
  }

  fake->fail_async_copy_after(2);
  try {
    session.load_into(*prepared, *device, dests, ExecOptions{}, atomic);
    ADD_FAILURE() << "a failing copy during the commit went unnoticed";
  } catch (const PartialWriteError& e) {
    EXPECT_NE(std::string(e.what()).find("they may hold a mixture"), std::string::npos) << e.what();
    EXPECT_EQ(e.written().size(), dests.size());
  }
  fake->fail_async_copy_after(-1);
  device->synchronize();
  EXPECT_TRUE(fake->violations().empty()) << joined(fake->violations());
}

// The fake's own checks, so a device bug would not pass unnoticed.
TEST(FakeCudaChecks, StagingOverwrittenBeforeItsCopyRanIsAViolation) {
  auto fake = fake_with(1, uint64_t{1} << 30, 20000);
  void *pinned = nullptr, *dev = nullptr;
  cuda::Stream s = nullptr;
  ASSERT_EQ(fake->malloc_pinned(&pinned, 4096), 0);
  ASSERT_EQ(fake->malloc_device(&dev, 4096), 0);
  ASSERT_EQ(fake->stream_create(&s), 0);
  std::memset(pinned, 1, 4096);
  ASSERT_EQ(fake->memcpy_to_device_async(dev, pinned, 4096, s), 0);
  std::memset(pinned, 2, 4096);  // no fence waited for: the copy has not run yet
  ASSERT_EQ(fake->stream_synchronize(s), 0);
  const auto v = fake->violations();
  ASSERT_EQ(v.size(), 1u) << joined(v);
  EXPECT_NE(v[0].find("reused before its fence"), std::string::npos) << v[0];
  fake->stream_destroy(s);
  fake->free_device(dev);
  fake->free_pinned(pinned);
}

TEST(FakeCudaChecks, AnotherDevicesStreamOrPointerAndPageableCopiesAreViolations) {
  auto fake = fake_with(2);
  void *pinned = nullptr, *dev0 = nullptr;
  cuda::Stream s0 = nullptr, s1 = nullptr;
  ASSERT_EQ(fake->malloc_pinned(&pinned, 64), 0);
  ASSERT_EQ(fake->malloc_device(&dev0, 64), 0);
  ASSERT_EQ(fake->stream_create(&s0), 0);
  ASSERT_EQ(fake->set_device(1), 0);
  ASSERT_EQ(fake->stream_create(&s1), 0);
  EXPECT_NE(fake->memcpy_to_device_async(dev0, pinned, 64, s0), 0);  // cuda:0's stream, cuda:1 current
  EXPECT_NE(fake->memcpy_to_device_async(dev0, pinned, 64, s1), 0);  // cuda:0's memory
  ASSERT_EQ(fake->set_device(0), 0);
  std::vector<std::byte> pageable(64);
  EXPECT_EQ(fake->memcpy_to_device_async(dev0, pageable.data(), 64, s0), 0);
  EXPECT_EQ(fake->stream_synchronize(s0), 0);
  const auto v = fake->violations();
  ASSERT_EQ(v.size(), 3u) << joined(v);
  EXPECT_NE(v[0].find("a stream of cuda:0 used while cuda:1 is current"), std::string::npos) << v[0];
  EXPECT_NE(v[1].find("memory of cuda:0 while cuda:1 is current"), std::string::npos) << v[1];
  EXPECT_NE(v[2].find("from pageable memory"), std::string::npos) << v[2];
  fake->stream_destroy(s0);
  fake->free_device(dev0);
  fake->free_pinned(pinned);
  ASSERT_EQ(fake->set_device(1), 0);
  fake->stream_destroy(s1);
}

}  // namespace
}  // namespace wmap::test
