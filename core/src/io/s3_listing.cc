#include "s3_listing.h"

#include <charconv>

#include "wmap/util/error.h"

namespace wmap::remote {
namespace {

std::string unescape_xml(std::string_view s) {
  static constexpr std::pair<std::string_view, char> kEntities[] = {
      {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    bool matched = false;
    if (s[i] == '&') {
      for (const auto& [ent, ch] : kEntities) {
        if (s.substr(i, ent.size()) == ent) {
          out += ch;
          i += ent.size() - 1;
          matched = true;
          break;
        }
      }
    }
    if (!matched) out += s[i];
  }
  return out;
}

// The text of the first <name>...</name> starting in [from, to); "" when there is none.
std::string tag(std::string_view xml, std::string_view name, size_t from = 0, size_t to = std::string_view::npos) {
  const std::string open = "<" + std::string(name) + ">", close = "</" + std::string(name) + ">";
  const auto b = xml.find(open, from);
  if (b == std::string_view::npos || b >= to) return {};
  const auto e = xml.find(close, b + open.size());
  if (e == std::string_view::npos || e > to) return {};
  return unescape_xml(xml.substr(b + open.size(), e - b - open.size()));
}

}  // namespace

std::string parse_list_objects_v2(std::string_view xml, const std::string& prefix,
                                  std::map<std::string, ListedObject>& found) {
  if (xml.find("<ListBucketResult") == std::string_view::npos)
    throw Error(ErrorCode::kMalformedInput, "ListObjectsV2: the response is not a ListBucketResult");
  for (size_t pos = 0; (pos = xml.find("<Contents>", pos)) != std::string_view::npos;) {
    const size_t end = xml.find("</Contents>", pos);
    if (end == std::string_view::npos) throw Error(ErrorCode::kMalformedInput, "ListObjectsV2: an unclosed <Contents>");
    const std::string key = tag(xml, "Key", pos, end), size = tag(xml, "Size", pos, end);
    ListedObject o;
    const auto [p, ec] = std::from_chars(size.data(), size.data() + size.size(), o.size);
    if (size.empty() || ec != std::errc() || p != size.data() + size.size())
      throw Error(ErrorCode::kMalformedInput, "ListObjectsV2: object '" + key + "' has size '" + size + "'");
    o.etag = tag(xml, "ETag", pos, end);
    if (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0 &&
        key.find('/', prefix.size()) == std::string::npos)
      found[key.substr(prefix.size())] = std::move(o);
    pos = end;
  }
  if (tag(xml, "IsTruncated") != "true") return {};
  std::string token = tag(xml, "NextContinuationToken");
  if (token.empty())
    throw Error(ErrorCode::kMalformedInput, "ListObjectsV2: a truncated page without NextContinuationToken");
  return token;
}

}  // namespace wmap::remote
