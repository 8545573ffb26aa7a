// Fuzzes the safetensors header reader with the input as a whole file: the length prefix checks
// of read_safetensors_header (padded, in-place parse) and parse_safetensors_header on the same
// bytes (unpadded, copying parse). Any exception other than wmap::Error is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "wmap/util/error.h"
#include "wmap/io/file_io.h"
#include "memory_file.h"
#include "wmap/format/safetensors_header.h"

using wmap::fuzz::MemoryFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MemoryFile file(data, size, "fuzz.safetensors");
  try {
    wmap::read_safetensors_header(file);
  } catch (const wmap::Error&) {
  }
  if (size < 8) return 0;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > size - 8) return 0;
  try {
    wmap::parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(data) + 8, n), size, "fuzz");
  } catch (const wmap::Error&) {
  }
  return 0;
}
