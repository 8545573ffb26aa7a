// Fuzzes Catalog::parse_json. A catalog that parses must survive a round trip through to_json
// with the same content id. Any exception other than wmap::Error is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "wmap/catalog/catalog.h"
#include "wmap/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  wmap::Catalog cat;
  try {
    cat = wmap::Catalog::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.catalog.json");
  } catch (const wmap::Error&) {
    return 0;
  }
  const wmap::Catalog again = wmap::Catalog::parse_json(cat.to_json(true), "round trip");
  if (again.content_id() != cat.content_id()) std::abort();
  return 0;
}
