// One test per format rule and per error kind of the safetensors header parser. Each test builds
// its own corrupted bytes, checks the error code, and checks that the message names the file and
// the offending tensor/values.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <set>

#include "core_test_helpers.h"
#include "test_util.h"
#include "wmap/format/dtype.h"
#include "wmap/util/error.h"
#include "wmap/format/safetensors_header.h"

namespace wmap::test {
namespace {

class HeaderTest : public ::testing::Test {
 protected:
  // Writes `bytes` as a fresh file and returns its path.
  std::filesystem::path put(const std::string& bytes) {
    auto p = dir_ / ("t" + std::to_string(count_++) + ".safetensors");
    write_file(p, bytes);
    return p;
  }
  // A file whose header is `json` and whose data section is `data_bytes` bytes.
  std::filesystem::path put_header(const std::string& json, size_t data_bytes) {
    return put(safetensors_bytes(json, std::string(data_bytes, '\x5a')));
  }
  SafetensorsHeader parse(const std::string& json, size_t data_bytes) {
    return read_header_file(put_header(json, data_bytes));
  }

  TempDir dir_;
  int count_ = 0;
};

std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out;
}

// --- length prefix -------------------------------------------------------------------------------

TEST_F(HeaderTest, FileShorterThanEightBytes) {
  for (size_t n : {0, 1, 7}) {
    const auto p = put(std::string(n, '\0'));
    EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kHeaderTooSmall, p.string(), std::to_string(n) + " bytes");
  }
}

TEST_F(HeaderTest, HeaderLengthOverLimit) {
  const auto p = put(le64(100'000'001) + "{}");
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kHeaderTooLarge, p.string(), "100000001", "100000000");
  const auto q = put(le64(std::numeric_limits<uint64_t>::max()) + "{}");
  EXPECT_WMAP_ERROR(read_header_file(q), ErrorCode::kHeaderTooLarge, q.string(), "18446744073709551615");
}

TEST_F(HeaderTest, HeaderLengthAtLimitButPastEndIsInvalidLength) {
  // Exactly the limit is allowed by the size rule, then refused because the file is short
  // (and nothing of that size is allocated).
  const auto p = put(le64(100'000'000) + "{}");
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderLength, p.string(), "100000000", "10 bytes");
}

TEST_F(HeaderTest, HeaderLengthPastEndOfFile) {
  const auto p = put(le64(1000) + std::string(80, ' '));
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderLength, p.string(), "1000", "88 bytes");
  const auto q = put(le64(3) + "{}");  // one byte short
  EXPECT_WMAP_ERROR(read_header_file(q), ErrorCode::kInvalidHeaderLength, q.string(), "length 3");
}

// --- header text ---------------------------------------------------------------------------------

TEST_F(HeaderTest, HeaderNotUtf8) {
  const auto p = put_header("{\"a\xff\":{}}", 0);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderUtf8, p.string(), "UTF-8");
  const auto overlong = put_header("{\"\xc0\xaf\":1}", 0);  // overlong encoding of '/'
  EXPECT_WMAP_ERROR(read_header_file(overlong), ErrorCode::kInvalidHeaderUtf8, overlong.string());
  const auto surrogate = put_header("{\"\xed\xa0\x80\":1}", 0);  // UTF-16 surrogate encoded as UTF-8
  EXPECT_WMAP_ERROR(read_header_file(surrogate), ErrorCode::kInvalidHeaderUtf8, surrogate.string());
}

TEST_F(HeaderTest, HeaderNotJson) {
  for (const std::string bad : {"{", "{\"a\":}", "{} x", "", "{'a':1}", "{\"a\":{\"dtype\":\"F32\",}}"}) {
    const auto p = put_header(bad, 0);
    EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "JSON");
  }
}

TEST_F(HeaderTest, HeaderJsonNotAnObject) {
  for (const std::string bad : {"[]", "\"str\"", "3", "null", "true"}) {
    const auto p = put_header(bad, 0);
    EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "not a JSON object");
  }
}

TEST_F(HeaderTest, TensorEntryNotAnObject) {
  for (const std::string bad : {"3", "[]", "\"F32\"", "null"}) {
    const auto p = put_header("{\"w.weight\":" + bad + "}", 0);
    EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w.weight'",
                      "not a JSON object");
  }
}

TEST_F(HeaderTest, MissingDtype) {
  const auto p = put_header(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'", "missing dtype");
}

TEST_F(HeaderTest, MissingShape) {
  const auto p = put_header(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'", "missing shape");
}

TEST_F(HeaderTest, MissingDataOffsets) {
  const auto p = put_header(R"({"w":{"dtype":"F32","shape":[2]}})", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'", "missing data_offsets");
}

TEST_F(HeaderTest, MistypedFields) {
  auto p = put_header(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'", "dtype");
  p = put_header(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'", "shape");
  p = put_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'", "data_offsets");
  p = put_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'", "data_offsets");
  p = put_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'", "-8");
  p = put_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,"8"]}})", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'", "\"8\"");
}

TEST_F(HeaderTest, UnknownDtype) {
  // Names are case-sensitive, and no alias is accepted.
  for (const std::string bad : {"F128", "f32", "float32", ""}) {
    const auto p = put_header("{" + entry("w", bad, "[2]", 0, 8) + "}", 8);
    EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidTensorInfo, p.string(), "'w'",
                      "unknown dtype '" + bad + "'");
  }
}

TEST_F(HeaderTest, NegativeDimension) {
  const auto p = put_header("{" + entry("w", "F32", "[2,-1]", 0, 8) + "}", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'", "-1");
}

TEST_F(HeaderTest, FloatDimension) {
  for (const std::string bad : {"[2.0]", "[2.5]", "[1e2]"}) {
    const auto p = put_header("{" + entry("w", "F32", bad, 0, 8) + "}", 8);
    EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'",
                      "not a non-negative integer");
  }
}

TEST_F(HeaderTest, NonNumericDimension) {
  for (const std::string bad : {"[\"2\"]", "[null]", "[[2]]", "[true]"}) {
    const auto p = put_header("{" + entry("w", "F32", bad, 0, 8) + "}", 8);
    EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'w'");
  }
}

TEST_F(HeaderTest, HugeDimensionBeyond64Bits) {
  // 2^64 does not fit any integer type: refused, never wrapped to 0.
  const auto p = put_header("{" + entry("w", "U8", "[18446744073709551616]", 0, 0) + "}", 0);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string());
}

TEST_F(HeaderTest, HugeDimensionFittingIsCheckedAgainstTheFile) {
  // 10^12 F32 elements claimed in a tiny file: the size rule refuses it without reading data.
  const auto p = put_header("{" + entry("w", "F32", "[1000000000000]", 0, 4000000000000) + "}", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kDataSizeMismatch, p.string(), "truncated");
}

TEST_F(HeaderTest, ShapeProductOverflow) {
  const auto p = put_header("{" + entry("w", "U8", "[4294967296,4294967296]", 0, 8) + "}", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kOverflow, p.string(), "'w'", "[4294967296, 4294967296]");
  // Three dims each fitting, product overflowing only at the last step.
  const auto q = put_header("{" + entry("w", "U8", "[2,9223372036854775807,2]", 0, 8) + "}", 8);
  EXPECT_WMAP_ERROR(read_header_file(q), ErrorCode::kOverflow, q.string(), "'w'");
}

TEST_F(HeaderTest, ElementsTimesBitsOverflow) {
  // 2^62 elements fit, 2^62 x 32 bits do not.
  const auto p = put_header("{" + entry("w", "F32", "[4611686018427387904]", 0, 8) + "}", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kOverflow, p.string(), "'w'", "4611686018427387904", "F32");
}

TEST_F(HeaderTest, ZeroDimensionMakesHugeShapeEmpty) {
  // A zero anywhere makes the product 0 even when the other dims would overflow together.
  const auto h = parse("{" + entry("w", "F32", "[0,4294967296,4294967296]", 0, 0) + "}", 0);
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].shape, (std::vector<uint64_t>{0, 4294967296, 4294967296}));
}

TEST_F(HeaderTest, SubByteDtypeNotWholeBytes) {
  // F4 x 3 = 12 bits; F6 x 1 = 6 bits.
  auto p = put_header("{" + entry("w", "F4", "[3]", 0, 2) + "}", 2);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidTensorInfo, p.string(), "'w'", "12 bits", "F4");
  p = put_header("{" + entry("w", "F6_E2M3", "[1]", 0, 1) + "}", 1);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidTensorInfo, p.string(), "'w'", "6 bits", "F6_E2M3");
  p = put_header("{" + entry("w", "F4", "[3,5]", 0, 8) + "}", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidTensorInfo, p.string(), "'w'", "60 bits");
}

TEST_F(HeaderTest, SubByteDtypeWholeBytes) {
  const auto h = parse("{" + entry("a", "F4", "[2,3]", 0, 3) + "," + entry("b", "F6_E3M2", "[4]", 3, 6) + "}", 6);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].end - h.tensors[0].begin, 3u);
  EXPECT_EQ(h.tensors[1].end - h.tensors[1].begin, 3u);
}

TEST_F(HeaderTest, ByteLengthDiffersFromShape) {
  auto p = put_header("{" + entry("w", "F32", "[2]", 0, 4) + "}", 4);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidTensorInfo, p.string(), "'w'", "needs 8 bytes", "span 4",
                    "[2]");
  p = put_header("{" + entry("w", "BF16", "[2,3]", 0, 16) + "}", 16);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidTensorInfo, p.string(), "'w'", "needs 12 bytes", "span 16");
}

TEST_F(HeaderTest, OffsetsNotStartingAtZero) {
  const auto p = put_header("{" + entry("w", "F32", "[1]", 4, 8) + "}", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidOffset, p.string(), "'w'", "[4, 8]", "start at 0");
}

TEST_F(HeaderTest, OffsetsWithGap) {
  const auto p = put_header("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 8, 12) + "}", 12);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidOffset, p.string(), "'b'", "[8, 12]", "gap", "start at 4");
}

TEST_F(HeaderTest, OffsetsOverlapping) {
  const auto p = put_header("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}", 12);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidOffset, p.string(), "'b'", "[4, 12]", "overlaps");
  // The very same range twice.
  const auto q = put_header("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 0, 4) + "}", 4);
  EXPECT_WMAP_ERROR(read_header_file(q), ErrorCode::kInvalidOffset, q.string(), "[0, 4]");
}

TEST_F(HeaderTest, OffsetsReversed) {
  const auto p = put_header("{" + entry("w", "F32", "[1]", 4, 0) + "}", 4);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidOffset, p.string(), "'w'", "[4, 0]", "end precedes begin");
  const auto q = put_header("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 4, 0) + "}", 8);
  EXPECT_WMAP_ERROR(read_header_file(q), ErrorCode::kInvalidOffset, q.string(), "'b'", "end precedes begin");
}

TEST_F(HeaderTest, DataTruncated) {
  const auto p = put_header("{" + entry("w", "F32", "[4]", 0, 16) + "}", 14);
  const uint64_t file_size = std::filesystem::file_size(p);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kDataSizeMismatch, p.string(), "truncated",
                    std::to_string(file_size) + " bytes");
}

TEST_F(HeaderTest, DataWithTrailingBytes) {
  const auto p = put_header("{" + entry("w", "F32", "[4]", 0, 16) + "}", 17);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kDataSizeMismatch, p.string(), "trailing bytes");
  // An empty header followed by stray bytes.
  const auto q = put_header("{}", 1);
  EXPECT_WMAP_ERROR(read_header_file(q), ErrorCode::kDataSizeMismatch, q.string(), "trailing bytes");
}

TEST_F(HeaderTest, DuplicateTensorNameInOneHeader) {
  const auto p = put_header("{" + entry("w", "F32", "[1]", 0, 4) + "," + entry("w", "F32", "[1]", 4, 8) + "}", 8);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kDuplicateTensor, p.string(), "'w'", "twice");
}

TEST_F(HeaderTest, DuplicateMetadata) {
  const auto p = put_header(R"({"__metadata__":{"a":"b"},"__metadata__":{"c":"d"}})", 0);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kDuplicateTensor, p.string(), "__metadata__");
}

TEST_F(HeaderTest, MetadataValueNotString) {
  for (const std::string bad : {"1", "null", "[\"x\"]", "{\"y\":\"z\"}", "true"}) {
    const auto p = put_header("{\"__metadata__\":{\"format\":\"pt\",\"k\":" + bad + "}}", 0);
    EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "'k'", bad);
  }
}

TEST_F(HeaderTest, MetadataNotAnObject) {
  const auto p = put_header(R"({"__metadata__":"pt"})", 0);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidHeaderJson, p.string(), "__metadata__");
}

// --- valid files ---------------------------------------------------------------------------------

TEST_F(HeaderTest, EmptyHeader) {
  const auto h = parse("{}", 0);
  EXPECT_TRUE(h.tensors.empty());
  EXPECT_TRUE(h.metadata.empty());
  EXPECT_EQ(h.header_bytes, 2u);
  EXPECT_EQ(h.data_start(), 10u);
}

TEST_F(HeaderTest, ScalarShape) {
  const auto h = parse("{" + entry("s", "F64", "[]", 0, 8) + "}", 8);
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_TRUE(h.tensors[0].shape.empty());
  EXPECT_EQ(h.tensors[0].dtype, DType::kF64);
  EXPECT_EQ(h.tensors[0].end, 8u);
  EXPECT_EQ(checked_numel({}, "f", "s"), 1u);
}

TEST_F(HeaderTest, ScalarWithWrongLengthIsRefused) {
  const auto p = put_header("{" + entry("s", "F32", "[]", 0, 0) + "}", 0);
  EXPECT_WMAP_ERROR(read_header_file(p), ErrorCode::kInvalidTensorInfo, p.string(), "'s'", "needs 4 bytes");
}

TEST_F(HeaderTest, ZeroSizeTensors) {
  // Zero-size tensors share offsets with each other and with their neighbours.
  const auto h = parse("{" + entry("z0", "F32", "[0]", 0, 0) + "," + entry("a", "F32", "[2]", 0, 8) + "," +
                           entry("z1", "BF16", "[3,0,2]", 8, 8) + "," + entry("z2", "F4", "[0]", 8, 8) + "," +
                           entry("b", "U8", "[1]", 8, 9) + "," + entry("z3", "I64", "[0,0]", 9, 9) + "}",
                       9);
  ASSERT_EQ(h.tensors.size(), 6u);
  for (const auto& t : h.tensors) {
    if (t.name[0] == 'z') {
      EXPECT_EQ(t.begin, t.end) << t.name;
    }
  }
}

TEST_F(HeaderTest, OnlyZeroSizeTensors) {
  const auto h = parse("{" + entry("z", "F32", "[0,7]", 0, 0) + "}", 0);
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].shape, (std::vector<uint64_t>{0, 7}));
}

TEST_F(HeaderTest, LeadingAndTrailingWhitespace) {
  const auto h = parse(" \t\n\r{" + entry("w", "U8", "[2]", 0, 2) + "} \n\t\r   ", 2);
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].name, "w");
}

TEST_F(HeaderTest, UnpaddedHeaderLeavesDataUnaligned) {
  const std::string json = "{" + entry("w", "U8", "[3]", 0, 3) + "}";
  ASSERT_NE((8 + json.size()) % 8, 0u);
  const auto p = put(safetensors_bytes(json, "xyz"));
  const auto h = read_header_file(p);
  EXPECT_EQ(h.header_bytes, json.size());
  EXPECT_EQ(h.data_start(), 8 + json.size());
  // The bytes at the data start are the tensor's.
  EXPECT_EQ(read_file(p).substr(h.data_start() + h.tensors[0].begin, 3), "xyz");
}

TEST_F(HeaderTest, UnknownExtraKeysIgnored) {
  const auto h =
      parse(R"({"w":{"extra":{"x":[1,2]},"dtype":"I16","note":"hi","shape":[3],"data_offsets":[0,6],"z":null}})", 6);
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].dtype, DType::kI16);
  EXPECT_EQ(h.tensors[0].shape, std::vector<uint64_t>{3});
}

TEST_F(HeaderTest, MetadataKeptApartAndSorted) {
  const auto h = parse(
      R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"__metadata__":{"z":"1","format":"pt","a":"\u00e9\n"}})",
      1);
  ASSERT_EQ(h.tensors.size(), 1u);
  const std::vector<std::pair<std::string, std::string>> want = {{"a", "\xc3\xa9\n"}, {"format", "pt"}, {"z", "1"}};
  EXPECT_EQ(h.metadata, want);
}

TEST_F(HeaderTest, TensorsSortedByNameAndOffsetsAnyOrder) {
  // Header order, name order and offset order all differ.
  const auto h = parse("{" + entry("m", "U8", "[1]", 2, 3) + "," + entry("z", "U8", "[2]", 0, 2) + "," +
                           entry("a", "U8", "[1]", 3, 4) + "}",
                       4);
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[1].name, "m");
  EXPECT_EQ(h.tensors[2].name, "z");
  EXPECT_EQ(h.tensors[2].begin, 0u);
}

TEST_F(HeaderTest, EscapedAndUnicodeNames) {
  const auto h = parse(
      R"({"a\"b\\c":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"\u00fcber.w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
      2);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a\"b\\c");
  EXPECT_EQ(h.tensors[1].name,
            "\xc3\xbc"
            "ber.w");
}

struct DTypeCase {
  const char* name;
  unsigned bits;
};

TEST(DTypeTest, EveryDtypeBitSize) {
  const DTypeCase cases[] = {
      {"BOOL", 8},    {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},   {"I8", 8},    {"F8_E5M2", 8},
      {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16}, {"BF16", 16}, {"I32", 32},
      {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},    {"I64", 64}, {"U64", 64},
  };
  ASSERT_EQ(std::size(cases), static_cast<size_t>(kDTypeCount));
  for (const auto& c : cases) {
    const auto d = parse_dtype(c.name);
    ASSERT_TRUE(d.has_value()) << c.name;
    EXPECT_EQ(dtype_bits(*d), c.bits) << c.name;
    EXPECT_EQ(dtype_name(*d), c.name);
  }
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto d = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
}

TEST_F(HeaderTest, EveryDtypeInAHeader) {
  // 8 elements of each dtype take exactly `bits` bytes.
  std::string json = "{";
  uint64_t offset = 0;
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto d = static_cast<DType>(i);
    const uint64_t n = dtype_bits(d);
    json +=
        (i ? "," : "") + entry("t" + std::to_string(100 + i), std::string(dtype_name(d)), "[2,4]", offset, offset + n);
    offset += n;
  }
  const auto h = parse(json + "}", offset);
  ASSERT_EQ(h.tensors.size(), static_cast<size_t>(kDTypeCount));
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto& t = h.tensors[i];
    EXPECT_EQ(t.dtype, static_cast<DType>(i));
    EXPECT_EQ(t.end - t.begin, dtype_bits(t.dtype)) << t.name;
  }
}

TEST(ParseHeaderText, UnpaddedStringViewInput) {
  // The string_view entry point must not read past `json` (no simdjson padding assumed).
  const std::string json = "{" + entry("w", "U16", "[2]", 0, 4) + "}";
  auto* heap = new char[json.size()];
  std::memcpy(heap, json.data(), json.size());
  const auto h = parse_safetensors_header(std::string_view(heap, json.size()), 8 + json.size() + 4, "mem.safetensors");
  delete[] heap;
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.header_bytes, json.size());
  EXPECT_WMAP_ERROR(parse_safetensors_header(json, 8 + json.size() + 5, "mem.safetensors"),
                    ErrorCode::kDataSizeMismatch, "mem.safetensors");
}

TEST(ErrorCodes, NamesAndExitCodes) {
  const std::pair<ErrorCode, int> all[] = {
      {ErrorCode::kInvalidArgument, 2},   {ErrorCode::kNotFound, 2},          {ErrorCode::kIo, 2},
      {ErrorCode::kHeaderTooSmall, 2},    {ErrorCode::kHeaderTooLarge, 2},    {ErrorCode::kInvalidHeaderLength, 2},
      {ErrorCode::kInvalidHeaderUtf8, 2}, {ErrorCode::kInvalidHeaderJson, 2}, {ErrorCode::kInvalidTensorInfo, 2},
      {ErrorCode::kInvalidOffset, 2},     {ErrorCode::kOverflow, 2},          {ErrorCode::kDataSizeMismatch, 2},
      {ErrorCode::kDuplicateTensor, 2},   {ErrorCode::kMalformedInput, 2},    {ErrorCode::kValidation, 1},
      {ErrorCode::kUnsupported, 1},       {ErrorCode::kInternal, 1},
  };
  std::set<std::string_view> names;
  for (const auto& [code, exit] : all) {
    EXPECT_EQ(exit_code_for(code), exit) << error_code_name(code);
    EXPECT_NE(error_code_name(code), "Unknown");
    names.insert(error_code_name(code));
  }
  EXPECT_EQ(names.size(), std::size(all));
}

TEST(ErrorCodes, ErrnoErrorsNameTheFile) {
  EXPECT_WMAP_ERROR(throw_errno("/x/y.safetensors", "open", ENOENT), ErrorCode::kNotFound, "/x/y.safetensors", "open");
  EXPECT_WMAP_ERROR(throw_errno("/x/y.safetensors", "pread", EIO), ErrorCode::kIo, "/x/y.safetensors", "pread");
}

TEST(FileIo, OpenErrorsNameTheFile) {
  TempDir dir;
  EXPECT_WMAP_ERROR(FileSystem::posix().open(dir / "missing.safetensors", IoMode::kPread), ErrorCode::kNotFound,
                    "missing.safetensors");
  EXPECT_WMAP_ERROR(FileSystem::posix().open(dir.path(), IoMode::kMmap), ErrorCode::kIo, dir.path().string());
}

TEST(FileIo, ReadsPastTheEndAreRefused) {
  TempDir dir;
  write_file(dir / "f", "0123456789");
  for (IoMode mode : {IoMode::kPread, IoMode::kMmap}) {
    auto f = FileSystem::posix().open(dir / "f", mode);
    std::string buf(4, '\0');
    f->read(6, std::as_writable_bytes(std::span(buf.data(), buf.size())));
    EXPECT_EQ(buf, "6789");
    EXPECT_WMAP_ERROR(f->read(7, std::as_writable_bytes(std::span(buf.data(), buf.size()))), ErrorCode::kIo,
                      (dir / "f").string(), "offset 7");
    EXPECT_WMAP_ERROR(f->read(std::numeric_limits<uint64_t>::max(), std::as_writable_bytes(std::span(buf.data(), 1))),
                      ErrorCode::kIo, (dir / "f").string());
    if (mode == IoMode::kMmap) {
      auto v = f->view(2, 3);
      ASSERT_EQ(v.size(), 3u);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(v.data()), 3), "234");
      EXPECT_WMAP_ERROR(f->view(8, 3), ErrorCode::kIo, (dir / "f").string());
    } else {
      EXPECT_TRUE(f->view(2, 3).empty());
    }
    f->will_need(0, 10);  // advisory: never throws
    f->release(0, 10);
    buf.assign(4, '\0');
    f->read_random(2, std::as_writable_bytes(std::span(buf.data(), buf.size())));
    EXPECT_EQ(buf, "2345");
    EXPECT_WMAP_ERROR(f->read_random(8, std::as_writable_bytes(std::span(buf.data(), buf.size()))), ErrorCode::kIo,
                      (dir / "f").string(), "offset 8");
  }
}

// A header read is a small read that says nothing about the data behind it: it must not open a
// readahead window (and leave markers in it) that a rank's first data read then trips; under
// rank-striped that pulled megabytes of other ranks' rows into a node's page cache. Measured with
// mincore after evicting the file; skipped where the page cache cannot be evicted (tmpfs).
TEST(FileIo, HeaderReadBringsOnlyTheHeaderPagesIntoThePageCache) {
  TempDir dir;
  const auto p = dir / "big.safetensors";
  const uint64_t data = uint64_t{8} << 20;
  write_file(p, safetensors_bytes("{" + entry("w", "U8", "[" + std::to_string(data) + "]", 0, data) + "}",
                                  std::string(data, '\x11')));
  evict(p);
  if (resident_bytes(p) > 0) GTEST_SKIP() << "the page cache kept " << p << " after POSIX_FADV_DONTNEED (tmpfs?)";
  const SafetensorsHeader h = read_header_file(p);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_LE(resident_bytes(p), (h.data_start() + page - 1) / page * page)
      << "the header read brought data pages in (readahead)";
}

}  // namespace
}  // namespace wmap::test
