#pragma once
// Writes a safetensors file: header padded with spaces to a multiple of 8 bytes, tensors laid
// out in the order given. Used by `wmap synth`, `wmap load --dump` and tests.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "wmap/format/dtype.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  uint64_t nbytes = 0;
  // Fills `dst` (nbytes) with the data; called once, in file order.
  std::function<void(std::span<std::byte> dst)> fill;
};

// Builds the header JSON (padded) for the given tensors; offsets follow the vector order.
std::string make_safetensors_header(const std::vector<TensorToWrite>& tensors,
                                    const std::vector<std::pair<std::string, std::string>>& metadata);

// Writes the file; throws kIo naming the file (ENOSPC included). Returns bytes written.
uint64_t write_safetensors(const std::filesystem::path& file, const std::vector<TensorToWrite>& tensors,
                           const std::vector<std::pair<std::string, std::string>>& metadata = {});

}  // namespace wmap
WMAP_PUBLIC_END
