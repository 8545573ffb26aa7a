// S3 ListObjectsV2 pages (XML from the network) through the listing parser: any input either
// parses into names directly under the prefix, each without '/', or is refused with wmap::Error.
// Anything else (another exception, a crash, a name with a '/') aborts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "s3_listing.h"
#include "wmap/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view xml(reinterpret_cast<const char*>(data), size);
  std::map<std::string, wmap::remote::ListedObject> found;
  try {
    const std::string token = wmap::remote::parse_list_objects_v2(xml, "models/llama/", found);
    (void)token;
  } catch (const wmap::Error&) {
    return 0;
  }
  for (const auto& [name, object] : found) {
    if (name.empty() || name.find('/') != std::string::npos) std::abort();
  }
  return 0;
}
