#pragma once
// Strict parser for one safetensors header, following the format's own reader
// (huggingface/safetensors tensor.rs): length prefix, size limit, UTF-8, JSON object,
// `__metadata__` as a string map, offsets contiguous from 0, byte lengths equal to
// elements x dtype bits / 8, data ending exactly at the end of the file.
// Pure functions over caller-provided bytes; thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wmap/format/dtype.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

class RandomAccessFile;

inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct HeaderTensor {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;  // [] is a scalar (one element)
  uint64_t begin = 0;           // relative to the start of the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // N, the JSON length (the data starts at 8 + N)
  uint64_t data_start() const { return 8 + header_bytes; }
  std::vector<HeaderTensor> tensors;                          // sorted by name
  std::vector<std::pair<std::string, std::string>> metadata;  // `__metadata__`, sorted by key
};

// Parses and validates the JSON `json` (exactly N bytes) of a file of `file_size` bytes.
// `file` only labels error messages. Throws wmap::Error.
SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t file_size, const std::string& file);

// Reads the length prefix and the header of `file` (never allocating more than the validated
// header length) and parses it.
SafetensorsHeader read_safetensors_header(const RandomAccessFile& file);

// Checked element count of a shape; throws kOverflow naming `file` and `tensor`.
uint64_t checked_numel(const std::vector<uint64_t>& shape, const std::string& file, const std::string& tensor);

}  // namespace wmap
WMAP_PUBLIC_END
