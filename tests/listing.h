#pragma once
// Parses the JSON listing printed by `wmap inspect --json` and by tests/python/st_reference.py
// (the same shape), so the two can be compared field by field.

#include <simdjson.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_util.h"

namespace wmap::test {

struct ListedShard {
  std::string file;
  uint64_t size = 0, header_bytes = 0, tensors = 0;
  bool operator==(const ListedShard&) const = default;
};

struct ListedTensor {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  std::string file;
  uint64_t offset = 0, nbytes = 0;
  std::string sha256;  // only from the reference with --digest
  bool same_layout(const ListedTensor& o) const {
    return name == o.name && dtype == o.dtype && shape == o.shape && file == o.file && offset == o.offset &&
           nbytes == o.nbytes;
  }
};

struct Listing {
  std::vector<ListedShard> shards;
  std::vector<ListedTensor> tensors;
};

inline std::string describe(const ListedTensor& t) {
  std::string s = t.name + " " + t.dtype + " [";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s + "] " + t.file + " @" + std::to_string(t.offset) + " +" + std::to_string(t.nbytes);
}

// Throws std::runtime_error when `json` does not have the listing's shape.
inline Listing parse_listing(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element root = parser.parse(padded).value();
  Listing out;
  const simdjson::dom::array s_list =
      root["shards"].get_array().value();  // named: value() on a temporary result dangles in a range-for
  for (simdjson::dom::object s : s_list) {
    ListedShard r;
    r.file = std::string(s["file"].get_string().value());
    r.size = s["size"].get_uint64().value();
    r.header_bytes = s["header_bytes"].get_uint64().value();
    r.tensors = s["tensors"].get_uint64().value();
    out.shards.push_back(r);
  }
  const simdjson::dom::array t_list = root["tensors"].get_array().value();
  for (simdjson::dom::object t : t_list) {
    ListedTensor r;
    r.name = std::string(t["name"].get_string().value());
    r.dtype = std::string(t["dtype"].get_string().value());
    const simdjson::dom::array d_list = t["shape"].get_array().value();
    for (auto d : d_list) r.shape.push_back(d.get_uint64().value());
    r.file = std::string(t["file"].get_string().value());
    r.offset = t["offset"].get_uint64().value();
    r.nbytes = t["nbytes"].get_uint64().value();
    std::string_view digest;
    if (!t["sha256"].get_string().get(digest)) r.sha256 = std::string(digest);
    out.tensors.push_back(std::move(r));
  }
  return out;
}

// Runs the independent Python reader on `paths` (files or directories).
inline CommandResult run_reference(const std::vector<std::string>& paths, bool digest) {
  std::string cmd = shell_quote(python()) + " " + shell_quote((source_dir() / "tests/python/st_reference.py").string());
  if (digest) cmd += " --digest";
  for (const auto& p : paths) cmd += " " + shell_quote(p);
  return run_command(cmd);
}

}  // namespace wmap::test
