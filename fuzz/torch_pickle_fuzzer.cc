// Fuzzes the restricted pickle interpreter of PyTorch checkpoints (parse_torch_pickle) with the
// input as a data.pkl, and the zip + catalog path (read_torch_checkpoint) with the input as a
// whole .bin file. Any exception other than wmap::Error, any crash or leak is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "wmap/util/error.h"
#include "wmap/io/file_io.h"
#include "memory_file.h"
#include "wmap/format/torch_checkpoint.h"

using wmap::fuzz::MemoryFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto tensors = wmap::parse_torch_pickle(std::as_bytes(std::span<const uint8_t>(data, size)), "fuzz.pkl");
    for (const auto& t : tensors) (void)wmap::torch_is_contiguous(t.shape, t.strides);
  } catch (const wmap::Error&) {
  }
  MemoryFile file(data, size, "fuzz.bin");
  try {
    wmap::read_torch_checkpoint(file, "fuzz.bin");
  } catch (const wmap::Error&) {
  }
  return 0;
}
