// TensorView: rows() is a zero-copy sub-view, column_block() a strided block copied on demand.
#include <gtest/gtest.h>

#include <numeric>

#include "core_test_helpers.h"
#include "wmap/tensor_view.h"

namespace wmap::test {
namespace {

// A view over `buf` whose bytes are 0, 1, 2, ... (mod 256).
TensorView iota_view(std::vector<std::byte>& buf, DType dtype, std::vector<uint64_t> shape) {
  uint64_t n = 1;
  for (auto d : shape) n *= d;
  buf.resize(n * dtype_bits(dtype) / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>(i & 0xff);
  return TensorView{dtype, std::move(shape), std::span<const std::byte>(buf), "w.weight"};
}

std::vector<uint8_t> copy_block(const StridedBlock& b) {
  std::vector<std::byte> out(b.nbytes());
  b.copy_to(out.data());
  std::vector<uint8_t> v(out.size());
  for (size_t i = 0; i < out.size(); ++i) v[i] = static_cast<uint8_t>(out[i]);
  return v;
}

TEST(TensorViewTest, NumelAndRowBytes) {
  std::vector<std::byte> buf;
  const TensorView v = iota_view(buf, DType::kF32, {4, 3});
  EXPECT_EQ(v.numel(), 12u);
  EXPECT_EQ(v.row_bytes(), 12u);
  const TensorView s = iota_view(buf, DType::kF32, {});
  EXPECT_EQ(s.numel(), 1u);
  const TensorView z = iota_view(buf, DType::kF32, {0, 3});
  EXPECT_EQ(z.numel(), 0u);
  EXPECT_EQ(z.row_bytes(), 0u);
}

TEST(TensorViewTest, RowsAreZeroCopy) {
  std::vector<std::byte> buf;
  const TensorView v = iota_view(buf, DType::kF32, {4, 3});
  const TensorView r = v.rows(1, 3);
  EXPECT_EQ(r.shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(r.dtype, DType::kF32);
  EXPECT_EQ(r.name, "w.weight");
  EXPECT_EQ(r.bytes.data(), buf.data() + 12);  // points into the same memory
  EXPECT_EQ(r.bytes.size(), 24u);
  // Nested rows stay in the same memory.
  const TensorView rr = r.rows(1, 2);
  EXPECT_EQ(rr.bytes.data(), buf.data() + 24);
  EXPECT_EQ(rr.bytes.size(), 12u);
  // All rows, and an empty range.
  EXPECT_EQ(v.rows(0, 4).bytes.data(), buf.data());
  EXPECT_EQ(v.rows(0, 4).bytes.size(), buf.size());
  EXPECT_EQ(v.rows(4, 4).bytes.size(), 0u);
  EXPECT_EQ(v.rows(2, 2).shape, (std::vector<uint64_t>{0, 3}));
}

TEST(TensorViewTest, RowsOfHigherRankAndOneDim) {
  std::vector<std::byte> buf;
  const TensorView v = iota_view(buf, DType::kBF16, {3, 2, 5});
  const TensorView r = v.rows(2, 3);
  EXPECT_EQ(r.shape, (std::vector<uint64_t>{1, 2, 5}));
  EXPECT_EQ(r.bytes.data(), buf.data() + 40);
  EXPECT_EQ(r.bytes.size(), 20u);
  std::vector<std::byte> buf1;
  const TensorView one = iota_view(buf1, DType::kU8, {10});
  EXPECT_EQ(one.rows(3, 7).bytes.data(), buf1.data() + 3);
}

TEST(TensorViewTest, RowsOfByteAlignedSubByteDtype) {
  std::vector<std::byte> buf;
  const TensorView v = iota_view(buf, DType::kF4, {4, 6});  // 3 bytes per row
  const TensorView r = v.rows(1, 3);
  EXPECT_EQ(r.bytes.data(), buf.data() + 3);
  EXPECT_EQ(r.bytes.size(), 6u);
}

TEST(TensorViewTest, RowErrors) {
  std::vector<std::byte> buf;
  const TensorView v = iota_view(buf, DType::kF32, {4, 3});
  EXPECT_WMAP_ERROR(v.rows(2, 5), ErrorCode::kInvalidArgument, "'w.weight'", "[2, 5)", "4");
  EXPECT_WMAP_ERROR(v.rows(3, 2), ErrorCode::kInvalidArgument, "'w.weight'", "[3, 2)");
  std::vector<std::byte> sbuf;
  const TensorView s = iota_view(sbuf, DType::kF32, {});
  EXPECT_WMAP_ERROR(s.rows(0, 1), ErrorCode::kInvalidArgument, "'w.weight'", "scalar");
  // F4 rows of 3 elements are 12 bits: not addressable by byte.
  std::vector<std::byte> fbuf;
  const TensorView f = iota_view(fbuf, DType::kF4, {4, 3});
  EXPECT_WMAP_ERROR(f.rows(1, 2), ErrorCode::kUnsupported, "'w.weight'", "F4");
}

TEST(TensorViewTest, ColumnBlockIsStrided) {
  std::vector<std::byte> buf;
  const TensorView v = iota_view(buf, DType::kI16, {4, 6});  // 12 bytes per row
  const StridedBlock b = column_block(v, 2, 5);
  EXPECT_EQ(b.rows, 4u);
  EXPECT_EQ(b.stride, 12u);
  EXPECT_EQ(b.run_bytes, 6u);
  EXPECT_EQ(b.base, buf.data() + 4);  // no copy until copy_to
  EXPECT_EQ(b.nbytes(), 24u);
  std::vector<uint8_t> want;
  for (int r = 0; r < 4; ++r) {
    for (int c = 4; c < 10; ++c) want.push_back(static_cast<uint8_t>(r * 12 + c));
  }
  EXPECT_EQ(copy_block(b), want);
}

TEST(TensorViewTest, ColumnBlockMatchesReferenceOnManyShapes) {
  for (DType d : {DType::kU8, DType::kBF16, DType::kF32, DType::kF64}) {
    for (uint64_t rows : {1u, 3u, 5u}) {
      for (uint64_t cols : {1u, 4u, 7u}) {
        for (uint64_t inner : {1u, 3u}) {
          std::vector<std::byte> buf;
          const TensorView v = iota_view(buf, d, inner == 1 ? std::vector<uint64_t>{rows, cols}
                                                            : std::vector<uint64_t>{rows, cols, inner});
          const uint64_t es = dtype_bits(d) / 8 * inner;  // bytes per dim-1 step
          for (uint64_t b = 0; b <= cols; ++b) {
            for (uint64_t e = b; e <= cols; ++e) {
              std::vector<uint8_t> want;
              for (uint64_t r = 0; r < rows; ++r) {
                for (uint64_t x = b * es; x < e * es; ++x) want.push_back(static_cast<uint8_t>((r * cols * es + x) & 0xff));
              }
              EXPECT_EQ(copy_block(column_block(v, b, e)), want) << dtype_name(d) << " " << rows << "x" << cols << "x"
                                                                 << inner << " [" << b << "," << e << ")";
            }
          }
        }
      }
    }
  }
}

TEST(TensorViewTest, ColumnBlockFullWidthIsContiguous) {
  std::vector<std::byte> buf;
  const TensorView v = iota_view(buf, DType::kF32, {3, 4});
  const StridedBlock b = column_block(v, 0, 4);
  EXPECT_EQ(b.stride, b.run_bytes);
  std::vector<uint8_t> want(buf.size());
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(copy_block(b), want);
}

TEST(TensorViewTest, ColumnBlockEmpty) {
  std::vector<std::byte> buf;
  const TensorView v = iota_view(buf, DType::kF32, {3, 4});
  EXPECT_EQ(column_block(v, 2, 2).nbytes(), 0u);
  copy_block(column_block(v, 2, 2));  // copies nothing, touches nothing
  const TensorView z = iota_view(buf, DType::kF32, {0, 4});
  EXPECT_EQ(column_block(z, 1, 3).nbytes(), 0u);
}

TEST(TensorViewTest, ColumnBlockOfSubByteDtype) {
  std::vector<std::byte> buf;
  const TensorView v = iota_view(buf, DType::kF4, {2, 8});  // 4 bytes per row
  const StridedBlock b = column_block(v, 2, 6);              // bytes 1..2 of each row
  EXPECT_EQ(b.stride, 4u);
  EXPECT_EQ(b.run_bytes, 2u);
  EXPECT_EQ(copy_block(b), (std::vector<uint8_t>{1, 2, 5, 6}));
  EXPECT_WMAP_ERROR(column_block(v, 1, 4), ErrorCode::kUnsupported, "'w.weight'", "[1, 4)", "F4");
}

TEST(TensorViewTest, ColumnBlockOfSubByteRowsNotWholeBytes) {
  // F4 [2, 3]: each row is 12 bits, so row 1 starts mid-byte; columns [0, 2) are byte-aligned
  // within row 0 only and cannot be described as a byte-strided block.
  std::vector<std::byte> buf;
  const TensorView v = iota_view(buf, DType::kF4, {2, 3});
  EXPECT_WMAP_ERROR(column_block(v, 0, 2), ErrorCode::kUnsupported, "'w.weight'", "F4");
  // F6 [2, 4]: 24-bit rows (3 bytes), columns [0, 4) are whole rows.
  std::vector<std::byte> buf6;
  const TensorView v6 = iota_view(buf6, DType::kF6_E2M3, {2, 4});
  const StridedBlock b = column_block(v6, 0, 4);
  EXPECT_EQ(b.stride, 3u);
  EXPECT_EQ(copy_block(b), (std::vector<uint8_t>{0, 1, 2, 3, 4, 5}));
}

TEST(TensorViewTest, ColumnBlockErrors) {
  std::vector<std::byte> buf;
  const TensorView one = iota_view(buf, DType::kF32, {8});
  EXPECT_WMAP_ERROR(column_block(one, 0, 1), ErrorCode::kInvalidArgument, "'w.weight'", "rank >= 2");
  std::vector<std::byte> buf2;
  const TensorView v = iota_view(buf2, DType::kF32, {3, 4});
  EXPECT_WMAP_ERROR(column_block(v, 2, 5), ErrorCode::kInvalidArgument, "'w.weight'", "[2, 5)");
  EXPECT_WMAP_ERROR(column_block(v, 3, 2), ErrorCode::kInvalidArgument, "'w.weight'", "[3, 2)");
}

}  // namespace
}  // namespace wmap::test
