#pragma once
// One page of an S3 ListObjectsV2 response (XML from the network: untrusted, fuzzed by
// fuzz/s3_listing_fuzzer.cc). Internal to the io stage.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace wmap::remote {

struct ListedObject {
  uint64_t size = 0;
  std::string etag;
};

// Adds the objects directly under `prefix` (no further '/': CommonPrefixes are folders) to
// `found`, keyed by the name after the prefix, XML entities decoded. Returns the continuation
// token of a truncated page, "" for the last one. Throws kMalformedInput for a response that is
// not a ListBucketResult, an object without a decimal size, or a truncated page without a token.
std::string parse_list_objects_v2(std::string_view xml, const std::string& prefix,
                                  std::map<std::string, ListedObject>& found);

}  // namespace wmap::remote
