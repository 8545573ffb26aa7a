#include "wmap/spec/model_config.h"

#include <simdjson.h>

#include <cmath>
#include <cstdio>

#include "wmap/util/error.h"

namespace wmap {

struct ModelConfig::Impl {
  std::string label;
  std::string text;
  simdjson::dom::parser parser;  // owns the document `root` points into
  simdjson::dom::element root;
};

ModelConfig::ModelConfig() = default;
ModelConfig::~ModelConfig() = default;
ModelConfig::ModelConfig(ModelConfig&&) noexcept = default;
ModelConfig& ModelConfig::operator=(ModelConfig&&) noexcept = default;
ModelConfig::ModelConfig(const ModelConfig&) = default;
ModelConfig& ModelConfig::operator=(const ModelConfig&) = default;

ModelConfig ModelConfig::parse(std::string_view json, const std::string& label) {
  auto impl = std::make_shared<Impl>();
  impl->label = label;
  impl->text = std::string(json);
  if (auto err = impl->parser.parse(impl->text).get(impl->root)) {
    throw Error(ErrorCode::kMalformedInput, label + ": not valid JSON: " + simdjson::error_message(err));
  }
  if (impl->root.type() != simdjson::dom::element_type::OBJECT) {
    throw Error(ErrorCode::kMalformedInput, label + ": not a JSON object");
  }
  ModelConfig cfg;
  cfg.impl_ = std::move(impl);
  return cfg;
}

ModelConfig ModelConfig::load(const std::filesystem::path& file, const FileSystem& fs) {
  return parse(fs.read_whole_file(file, kMaxConfigFileBytes), file.string());
}

const std::string& ModelConfig::label() const { return impl_->label; }
const std::string& ModelConfig::text() const { return impl_->text; }

void ModelConfig::fail(std::string_view path, const std::string& message) const {
  throw Error(ErrorCode::kMalformedInput, impl_->label + ": " + std::string(path) + ": " + message);
}

namespace {

// Walks a dotted path; returns false when a component is absent or the value is null.
bool lookup(const simdjson::dom::element& root, std::string_view path, simdjson::dom::element& out) {
  simdjson::dom::element cur = root;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    const std::string_view key = path.substr(0, dot);
    simdjson::dom::object obj;
    if (cur.get_object().get(obj)) return false;
    if (obj[key].get(cur)) return false;
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  if (cur.is_null()) return false;
  out = cur;
  return true;
}

std::string describe(const simdjson::dom::element& e) { return simdjson::minify(e); }

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

bool ModelConfig::has(std::string_view path) const {
  simdjson::dom::element e;
  return lookup(impl_->root, path, e);
}

std::optional<int64_t> ModelConfig::find_int(std::string_view path) const {
  simdjson::dom::element e;
  if (!lookup(impl_->root, path, e)) return std::nullopt;
  int64_t v;
  if (!e.get_int64().get(v)) return v;
  double d;
  if (!e.get_double().get(d) && std::floor(d) == d && std::abs(d) < 9e15) return static_cast<int64_t>(d);
  fail(path, "expected an integer, found " + describe(e));
}

int64_t ModelConfig::require_int(std::string_view path) const {
  auto v = find_int(path);
  if (!v) fail(path, "required integer field is missing");
  return *v;
}

int64_t ModelConfig::get_int(std::string_view path, int64_t fallback) const {
  return find_int(path).value_or(fallback);
}

uint64_t ModelConfig::require_positive(std::string_view path) const {
  const int64_t v = require_int(path);
  if (v <= 0) fail(path, "expected a positive integer, found " + std::to_string(v));
  return static_cast<uint64_t>(v);
}

uint64_t ModelConfig::get_non_negative(std::string_view path, uint64_t fallback) const {
  const auto v = find_int(path);
  if (!v) return fallback;
  if (*v < 0) fail(path, "expected a non-negative integer, found " + std::to_string(*v));
  return static_cast<uint64_t>(*v);
}

double ModelConfig::require_number(std::string_view path) const {
  simdjson::dom::element e;
  if (!lookup(impl_->root, path, e)) fail(path, "required number field is missing");
  double d;
  if (e.get_double().get(d)) {
    int64_t i;
    if (e.get_int64().get(i)) fail(path, "expected a number, found " + describe(e));
    d = static_cast<double>(i);
  }
  return d;
}

bool ModelConfig::get_bool(std::string_view path, bool fallback) const {
  simdjson::dom::element e;
  if (!lookup(impl_->root, path, e)) return fallback;
  bool b;
  if (e.get_bool().get(b)) fail(path, "expected true or false, found " + describe(e));
  return b;
}

std::string ModelConfig::require_string(std::string_view path) const {
  simdjson::dom::element e;
  if (!lookup(impl_->root, path, e)) fail(path, "required string field is missing");
  std::string_view s;
  if (e.get_string().get(s)) fail(path, "expected a string, found " + describe(e));
  return std::string(s);
}

std::string ModelConfig::get_string(std::string_view path, std::string fallback) const {
  return has(path) ? require_string(path) : fallback;
}

std::vector<int64_t> ModelConfig::get_int_list(std::string_view path) const {
  simdjson::dom::element e;
  std::vector<int64_t> out;
  if (!lookup(impl_->root, path, e)) return out;
  simdjson::dom::array arr;
  if (e.get_array().get(arr)) fail(path, "expected a list of integers, found " + describe(e));
  for (auto v : arr) {
    int64_t i;
    if (v.get_int64().get(i)) fail(path, "expected a list of integers, found " + describe(e));
    out.push_back(i);
  }
  return out;
}

std::vector<std::string> ModelConfig::get_string_list(std::string_view path) const {
  simdjson::dom::element e;
  std::vector<std::string> out;
  if (!lookup(impl_->root, path, e)) return out;
  simdjson::dom::array arr;
  if (e.get_array().get(arr)) fail(path, "expected a list of strings, found " + describe(e));
  for (auto v : arr) {
    std::string_view s;
    if (v.get_string().get(s)) fail(path, "expected a list of strings, found " + describe(e));
    out.emplace_back(s);
  }
  return out;
}

std::vector<std::string> ModelConfig::keys(std::string_view path) const {
  simdjson::dom::element e;
  std::vector<std::string> out;
  if (!lookup(impl_->root, path, e)) return out;
  simdjson::dom::object obj;
  if (e.get_object().get(obj)) fail(path, "expected an object, found " + describe(e));
  for (auto field : obj) out.emplace_back(field.key);
  return out;
}

std::optional<std::string> ModelConfig::json_at(std::string_view path) const {
  simdjson::dom::element e;
  if (!lookup(impl_->root, path, e)) return std::nullopt;
  return describe(e);
}

ModelConfig ModelConfig::with_field(std::string_view key, std::string_view json) const {
  // Rebuilt from the fields (minified): the text stays one JSON object with each key once.
  std::string text = "{";
  simdjson::dom::object obj;
  if (impl_->root.get_object().get(obj)) fail("", "not a JSON object");
  bool first = true;
  for (auto field : obj) {
    if (field.key == key) continue;
    text += (first ? "" : ",") + quoted(field.key) + ":" + describe(field.value);
    first = false;
  }
  text += (first ? "" : ",") + quoted(key) + ":" + std::string(json) + "}";
  return parse(text, impl_->label);
}

std::string ModelConfig::architecture() const {
  simdjson::dom::element e;
  if (!lookup(impl_->root, "architectures", e))
    fail("architectures", "missing: cannot tell which plugin serves this model");
  simdjson::dom::array arr;
  std::string_view s;
  if (e.get_array().get(arr) || arr.size() == 0 || arr.at(0).get_string().get(s)) {
    fail("architectures", "expected a non-empty list of strings, found " + describe(e));
  }
  return std::string(s);
}

}  // namespace wmap
