#include "wmap/format/safetensors_header.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "wmap/util/error.h"
#include "wmap/io/file_io.h"
#include "wmap/format/tensor_record.h"

namespace wmap {
namespace {

std::string squote(std::string_view s) { return "'" + std::string(s) + "'"; }

[[noreturn]] void fail(ErrorCode code, const std::string& file, const std::string& msg) {
  throw Error(code, file + ": " + msg);
}

HeaderTensor parse_tensor(std::string_view name, simdjson::dom::element value, const std::string& file) {
  simdjson::dom::object obj;
  if (value.get_object().get(obj)) {
    fail(ErrorCode::kInvalidHeaderJson, file, "tensor " + squote(name) + ": entry is not a JSON object");
  }
  HeaderTensor t;
  t.name = std::string(name);
  bool has_dtype = false, has_shape = false, has_offsets = false;
  for (auto field : obj) {
    const std::string_view key = field.key;
    if (key == "dtype") {
      std::string_view d;
      if (field.value.get_string().get(d)) {
        fail(ErrorCode::kInvalidHeaderJson, file, "tensor " + squote(name) + ": dtype is not a string");
      }
      auto dtype = parse_dtype(d);
      if (!dtype) fail(ErrorCode::kInvalidTensorInfo, file, "tensor " + squote(name) + ": unknown dtype " + squote(d));
      t.dtype = *dtype;
      has_dtype = true;
    } else if (key == "shape") {
      simdjson::dom::array arr;
      if (field.value.get_array().get(arr)) {
        fail(ErrorCode::kInvalidHeaderJson, file, "tensor " + squote(name) + ": shape is not an array");
      }
      t.shape.reserve(arr.size());
      for (auto dim : arr) {
        uint64_t v;
        if (dim.get_uint64().get(v)) {
          fail(ErrorCode::kInvalidHeaderJson, file,
               "tensor " + squote(name) + ": shape holds " + simdjson::minify(dim) + ", not a non-negative integer");
        }
        t.shape.push_back(v);
      }
      has_shape = true;
    } else if (key == "data_offsets") {
      simdjson::dom::array arr;
      if (field.value.get_array().get(arr) || arr.size() != 2) {
        fail(ErrorCode::kInvalidHeaderJson, file,
             "tensor " + squote(name) + ": data_offsets is not an array of two integers");
      }
      std::array<uint64_t, 2> v{};
      size_t i = 0;
      for (auto off : arr) {
        if (off.get_uint64().get(v[i])) {
          fail(ErrorCode::kInvalidHeaderJson, file,
               "tensor " + squote(name) + ": data_offsets holds " + simdjson::minify(off) +
                   ", not a non-negative integer");
        }
        ++i;
      }
      t.begin = v[0];
      t.end = v[1];
      has_offsets = true;
    }
    // Unknown keys are ignored, as the reference reader does.
  }
  if (!has_dtype || !has_shape || !has_offsets) {
    fail(ErrorCode::kInvalidHeaderJson, file,
         "tensor " + squote(name) + ": missing " +
             (!has_dtype   ? "dtype"
              : !has_shape ? "shape"
                           : "data_offsets"));
  }
  return t;
}

}  // namespace

uint64_t checked_numel(const std::vector<uint64_t>& shape, const std::string& file, const std::string& tensor) {
  const auto n = wmap::checked_numel(shape);
  if (!n) {
    fail(ErrorCode::kOverflow, file,
         "tensor " + squote(tensor) + ": shape " + shape_text(shape) + " has more than 2^64 elements");
  }
  return *n;
}

namespace {

// `__metadata__`: an object of strings, sorted by key into header.metadata.
void read_metadata(simdjson::dom::element value, const std::string& file, SafetensorsHeader& header) {
  simdjson::dom::object meta;
  if (value.get_object().get(meta))
    fail(ErrorCode::kInvalidHeaderJson, file, "__metadata__ is not a JSON object of strings");
  for (auto m : meta) {
    std::string_view v;
    if (m.value.get_string().get(v)) {
      fail(ErrorCode::kInvalidHeaderJson, file,
           "__metadata__ value of " + squote(m.key) + " is " + simdjson::minify(m.value) + ", not a string");
    }
    header.metadata.emplace_back(std::string(m.key), std::string(v));
  }
  std::sort(header.metadata.begin(), header.metadata.end());
}

// One tensor's byte length: its dtype x shape, whole bytes, equal to its data_offsets span.
void check_tensor_bytes(const HeaderTensor& t, const std::string& file) {
  const uint64_t numel = checked_numel(t.shape, file, t.name);
  const auto nbits = checked_nbits(t.dtype, t.shape);
  if (!nbits) {
    fail(ErrorCode::kOverflow, file,
         "tensor " + squote(t.name) + ": " + std::to_string(numel) + " elements of " +
             std::string(dtype_name(t.dtype)) + " overflow 64 bits");
  }
  const uint64_t bits = *nbits;
  if (bits % 8 != 0) {
    fail(ErrorCode::kInvalidTensorInfo, file,
         "tensor " + squote(t.name) + ": " + std::to_string(numel) + " elements of " +
             std::string(dtype_name(t.dtype)) + " are " + std::to_string(bits) + " bits, not a whole number of bytes");
  }
  if (t.end - t.begin != bits / 8) {
    fail(ErrorCode::kInvalidTensorInfo, file,
         "tensor " + squote(t.name) + ": " + std::string(dtype_name(t.dtype)) + " " + shape_text(t.shape) + " needs " +
             std::to_string(bits / 8) + " bytes but data_offsets [" + std::to_string(t.begin) + ", " +
             std::to_string(t.end) + "] span " + std::to_string(t.end - t.begin));
  }
}

// Offsets: sorted by (begin, end), contiguous from 0, each span equal to its byte length, and
// the data ending exactly at the end of the file.
void check_offsets(const SafetensorsHeader& header, uint64_t file_size, const std::string& file) {
  std::vector<const HeaderTensor*> by_offset;
  by_offset.reserve(header.tensors.size());
  for (const auto& t : header.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const HeaderTensor* a, const HeaderTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected = 0;
  for (const HeaderTensor* t : by_offset) {
    if (t->begin != expected || t->end < t->begin) {
      std::string why = t->end < t->begin ? "end precedes begin"
                        : t->begin < expected
                            ? "overlaps the previous tensor, which ends at " + std::to_string(expected)
                            : "leaves a gap after byte " + std::to_string(expected);
      fail(ErrorCode::kInvalidOffset, file,
           "tensor " + squote(t->name) + ": data_offsets [" + std::to_string(t->begin) + ", " + std::to_string(t->end) +
               "] " + why + " (expected to start at " + std::to_string(expected) + ")");
    }
    check_tensor_bytes(*t, file);
    expected = t->end;
  }
  const uint64_t data_end = expected + header.data_start();
  if (data_end < expected || data_end != file_size) {
    fail(ErrorCode::kDataSizeMismatch, file,
         "data section ends at byte " + std::to_string(data_end) + " but the file is " + std::to_string(file_size) +
             " bytes (" + (data_end > file_size ? "truncated" : "trailing bytes") + ")");
  }
}

// Tensors sorted by name, each named once.
void sort_by_name(SafetensorsHeader& header, const std::string& file) {
  auto by_name = [](const HeaderTensor& a, const HeaderTensor& b) { return a.name < b.name; };
  if (!std::is_sorted(header.tensors.begin(), header.tensors.end(), by_name)) {
    std::sort(header.tensors.begin(), header.tensors.end(), by_name);
  }
  for (size_t i = 1; i < header.tensors.size(); ++i) {
    if (header.tensors[i].name == header.tensors[i - 1].name) {
      fail(ErrorCode::kDuplicateTensor, file,
           "tensor " + squote(header.tensors[i].name) + " appears twice in the header");
    }
  }
}

// `padded`: json.data() is followed by at least SIMDJSON_PADDING readable bytes, so simdjson
// can parse in place without copying the header.
SafetensorsHeader parse_header_impl(std::string_view json, bool padded, uint64_t file_size, const std::string& file) {
  SafetensorsHeader header;
  header.header_bytes = json.size();
  // One parser per thread: it keeps its buffers between headers.
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(json.data(), json.size(), !padded).get(root)) {
    // simdjson validates UTF-8 while parsing, so no separate pass is needed.
    if (err == simdjson::UTF8_ERROR) {
      fail(ErrorCode::kInvalidHeaderUtf8, file,
           "header (" + std::to_string(json.size()) + " bytes at offset 8) is not valid UTF-8");
    }
    fail(ErrorCode::kInvalidHeaderJson, file, std::string("header is not valid JSON: ") + simdjson::error_message(err));
  }
  simdjson::dom::object obj;
  if (root.get_object().get(obj)) fail(ErrorCode::kInvalidHeaderJson, file, "header is not a JSON object");

  bool seen_metadata = false;
  header.tensors.reserve(obj.size());  // one allocation: growth by doubling faulted in 3x the pages
  for (auto field : obj) {
    const std::string_view key = field.key;
    if (key == "__metadata__") {
      if (seen_metadata) fail(ErrorCode::kDuplicateTensor, file, "__metadata__ appears twice in the header");
      seen_metadata = true;
      read_metadata(field.value, file, header);
      continue;
    }
    header.tensors.push_back(parse_tensor(key, field.value, file));
  }
  check_offsets(header, file_size, file);
  sort_by_name(header, file);
  return header;
}
}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t file_size, const std::string& file) {
  return parse_header_impl(json, false, file_size, file);
}

SafetensorsHeader read_safetensors_header(const RandomAccessFile& file) {
  const uint64_t size = file.size();
  if (size < 8) {
    fail(ErrorCode::kHeaderTooSmall, file.path(),
         "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  std::array<std::byte, 8> prefix;
  file.read_random(0, prefix);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(prefix[i]);
  if (n > kMaxHeaderBytes) {
    fail(ErrorCode::kHeaderTooLarge, file.path(),
         "header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (n + 8 > size) {
    fail(ErrorCode::kInvalidHeaderLength, file.path(),
         "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) + " bytes)");
  }
  // One buffer per thread, reused from shard to shard: a fresh ~100 KiB buffer per header was
  // an mmap, 25 first-touch page faults and a munmap each time (13k faults for 400 shards).
  thread_local std::unique_ptr<char[]> buffer;
  thread_local size_t capacity = 0;
  const size_t need = static_cast<size_t>(n) + simdjson::SIMDJSON_PADDING;
  if (need > capacity) {
    capacity = std::max(need, std::min<size_t>(2 * capacity, kMaxHeaderBytes + simdjson::SIMDJSON_PADDING));
    buffer.reset();
    buffer = std::make_unique_for_overwrite<char[]>(capacity);
  }
  file.read_random(8, std::as_writable_bytes(std::span(buffer.get(), static_cast<size_t>(n))));
  std::memset(buffer.get() + n, 0, simdjson::SIMDJSON_PADDING);
  if (capacity > (64u << 20)) {
    // A pathological 100 MB header is not kept for the rest of the thread's life.
    SafetensorsHeader header = parse_header_impl(std::string_view(buffer.get(), n), true, size, file.path());
    buffer.reset();
    capacity = 0;
    return header;
  }
  return parse_header_impl(std::string_view(buffer.get(), n), true, size, file.path());
}

}  // namespace wmap
