// The scale inversion the host transforms and the CUDA kernel share: fp32 arithmetic, rounded to
// nearest even into BF16/F16, bad scales to 0 (lenient) or an error naming the key (strict).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "wmap/device/scale_inversion.h"
#include "test_util.h"
#include "wmap/util/error.h"

namespace wmap {
namespace {

std::vector<std::byte> bytes_of(const std::vector<uint16_t>& v) {
  std::vector<std::byte> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint16_t> halves_of(const std::vector<std::byte>& b) {
  std::vector<uint16_t> v(b.size() / 2);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

TEST(ScaleInversion, F32MatchesOneOverX) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {2.0f, 3.0f, 0.0f, -1.0f, inf, nan, 1e-3f};
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  invert_scales(b, DType::kF32);
  std::memcpy(v.data(), b.data(), b.size());
  EXPECT_EQ(v[0], 0.5f);
  EXPECT_EQ(v[1], 1.0f / 3.0f);
  for (int i : {2, 3, 4, 5}) EXPECT_EQ(v[i], 0.0f) << i;
  EXPECT_EQ(v[6], 1.0f / 1e-3f);
}

TEST(ScaleInversion, Bf16RoundsToNearestEven) {
  // 2 -> 0.5 (0x3f00); 3 -> 1/3 = 0x3eaaaaab -> 0x3eab; 0x3f81 (1.0078125) -> 0.99224806 = 0x3f7e03f8 -> 0x3f7e;
  // -2, +Inf, NaN -> 0; the smallest subnormal's inverse overflows to +Inf (0x7f80).
  auto b = bytes_of({0x4000, 0x4040, 0x3f81, 0xc000, 0x7f80, 0x7fc0, 0x0001});
  invert_scales(b, DType::kBF16);
  EXPECT_EQ(halves_of(b), (std::vector<uint16_t>{0x3f00, 0x3eab, 0x3f7e, 0, 0, 0, 0x7f80}));
}

TEST(ScaleInversion, F16RoundsToNearestEven) {
  // 2 -> 0.5 (0x3800); 3 -> 0.33325195 (0x3555); 65504 -> 1.5266e-5 (subnormal 0x0100); 0 -> 0;
  // the smallest subnormal (5.96e-8) -> 1.68e7, beyond F16: +Inf (0x7c00).
  auto b = bytes_of({0x4000, 0x4200, 0x7bff, 0x0000, 0x0001});
  invert_scales(b, DType::kF16);
  EXPECT_EQ(halves_of(b), (std::vector<uint16_t>{0x3800, 0x3555, 0x0100, 0, 0x7c00}));
}

// The hand-written binary16 conversions against numpy's, for every F16 pattern.
TEST(ScaleInversion, EveryF16PatternMatchesNumpy) {
  std::vector<uint16_t> all(1 << 16);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  auto b = bytes_of(all);
  invert_scales(b, DType::kF16);
  test::TempDir dir;
  test::write_file(dir / "f16.bin", std::string(reinterpret_cast<const char*>(b.data()), b.size()));
  const std::string script =
      "import numpy as np, sys\n"
      "got = np.fromfile(sys.argv[1], dtype=np.uint16)\n"
      "x = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)\n"
      "with np.errstate(all='ignore'):\n"
      "    y = np.where(np.isfinite(x) & (x > 0), np.float32(1) / x, np.float32(0)).astype(np.float32)\n"
      "    want = y.astype(np.float16).view(np.uint16)\n"
      "bad = np.nonzero(got != want)[0]\n"
      "print(len(bad), 'mismatches', [hex(i) for i in bad[:8]])\n";
  test::write_file(dir / "check.py", script);
  const auto r = test::run_command(test::python() + " " + test::shell_quote((dir / "check.py").string()) + " " +
                                   test::shell_quote((dir / "f16.bin").string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("0 mismatches", 0), 0u) << r.out << r.err;
}

TEST(ScaleInversion, StrictNamesTheKeyAndTheElement) {
  auto b = bytes_of({0x4000, 0x8000});  // 2, -0 (BF16)
  try {
    check_scales_positive(b, DType::kBF16, "model.layers.0.mlp.down_proj.weight_global_scale");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kValidation);
    EXPECT_NE(std::string(e.what()).find("'model.layers.0.mlp.down_proj.weight_global_scale': global scale element 1"),
              std::string::npos)
        << e.what();
  }
}

TEST(ScaleInversion, OtherDtypesAreRefusedNamingTheKey) {
  check_scale_dtype(DType::kF16, "k");
  try {
    check_scale_dtype(DType::kF8_E4M3, "some.scale");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'some.scale': scale inversion needs F32, BF16 or F16, not F8_E4M3"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace wmap
