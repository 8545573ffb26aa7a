// Fuzzes the model.safetensors.index.json parser. Any exception other than wmap::Error is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "wmap/util/error.h"
#include "wmap/catalog/shard_set.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> shards;
  try {
    wmap::parse_shard_index(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.index.json", shards);
  } catch (const wmap::Error&) {
  }
  return 0;
}
