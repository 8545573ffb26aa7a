#include "py_keywords.h"

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <algorithm>

#include "py_errors.h"
#include "wmap/util/env.h"

namespace wmap::python {

std::string entry_name(Entry e) {
  return e == Entry::kLoad ? "wmap.load()" : e == Entry::kLoadInto ? "wmap.load_into()" : "wmap.plan()";
}

bool allowed_with_a_plan(const std::string& k) {
  return k == "quiet" || k == "device" || k == "cache" || k == "ignore" || k == "atomic" || k == "verify" ||
         k == "manifest" || k == "digests";
}

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

uint32_t count_arg(const std::string& name, py::handle v) {
  if (PyBool_Check(v.ptr()) || !PyLong_Check(v.ptr())) {
    throw py::type_error(name + " must be an int, not " + std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0 || n < 0 || n > static_cast<long long>(UINT32_MAX)) {
    throw_error(wmap::ErrorCode::kInvalidArgument,
                name + " " + std::string(py::str(v)) + ": expected a non-negative integer (at most 4294967295)");
  }
  return static_cast<uint32_t>(n);
}

uint64_t bytes_arg(const std::string& name, py::handle v) {
  if (PyBool_Check(v.ptr()) || !PyLong_Check(v.ptr())) {
    throw py::type_error(name + " must be an int, not " + std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0 || n < 0) {
    throw_error(wmap::ErrorCode::kInvalidArgument,
                name + " " + std::string(py::str(v)) + ": expected a non-negative number of bytes");
  }
  return static_cast<uint64_t>(n);
}

std::optional<uint32_t> optional_count_arg(const std::string& name, py::handle v) {
  if (v.is_none()) return std::nullopt;
  return count_arg(name, v);
}

// pp_partition=[3, 2, 2], "3,2,2" (VLLM_PP_LAYER_PARTITION's form) or None (the target's split).
std::vector<uint32_t> partition_arg(const std::string& name, py::handle v) {
  if (v.is_none()) return {};
  if (py::isinstance<py::str>(v)) return wmap::parse_pp_partition(v.cast<std::string>(), name);
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) {
    throw py::type_error(name + " must be a list of layer counts, a string like '3,2,2' or None, not " +
                         std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  std::vector<uint32_t> out;
  for (py::handle item : v) out.push_back(count_arg(name + " entry", item));
  return out;
}

std::optional<std::filesystem::path> optional_path_arg(py::handle v) {
  if (v.is_none()) return std::nullopt;
  return v.cast<std::filesystem::path>();
}

// verify=False / True ('read': the shards this rank reads, each verified or the load refused) /
// 'full' (every shard) / 'best-effort' (what can be verified, the rest reported).
wmap::ExecOptions::Verify verify_arg(py::handle v) {
  if (PyBool_Check(v.ptr())) return v.cast<bool>() ? wmap::ExecOptions::Verify::kRead : wmap::ExecOptions::Verify::kOff;
  if (py::isinstance<py::str>(v)) {
    if (auto m = wmap::parse_verify_mode(v.cast<std::string>()); m && *m != wmap::ExecOptions::Verify::kOff) return *m;
  }
  throw py::value_error("verify must be False, True, 'read', 'full' or 'best-effort', not " + std::string(py::repr(v)));
}

// remote={'s3_endpoint': 'http://minio:9000', 'concurrency': 32, 's3_no_sign': True, ...}.
void remote_arg(py::handle v, wmap::RemoteOptions& o) {
  if (v.is_none()) return;
  if (!py::isinstance<py::dict>(v)) {
    throw py::type_error("remote must be a dict of settings (" + joined(wmap::RemoteOptions::names()) + "), not " +
                         std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  for (const auto& item : v.cast<py::dict>()) {
    const std::string name = py::str(item.first);
    const py::handle value = item.second;
    std::string text;
    if (PyBool_Check(value.ptr())) {
      text = value.cast<bool>() ? "true" : "false";
    } else if (py::isinstance<py::str>(value) || py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) {
      text = py::str(value);
    } else {
      throw py::type_error("remote['" + name + "'] must be a str, int, float or bool");
    }
    o.set(name, text);
  }
}

}  // namespace

// What every entry takes (plan() and load() the same), then each one's own.
std::vector<std::string> keywords(Entry e) {
  std::vector<std::string> k = wmap::LayoutOptions::names();
  for (const char* n : {"catalog", "config", "plugin_dir", "mappings", "quiet", "max_read_gap", "remote"})
    k.push_back(n);
  if (e == Entry::kLoad) k.insert(k.end(), {"device", "cache"});
  if (e == Entry::kLoadInto) k.insert(k.end(), {"ignore", "atomic"});
  if (e != Entry::kPlan) k.insert(k.end(), {"verify", "manifest", "digests"});
  return k;
}

Request parse_request(Entry e, const py::kwargs& kw) {
  const std::vector<std::string> known = keywords(e);
  Request r;
  r.remote = wmap::RemoteOptions::from_environment();  // at each call: a changed variable counts
  r.into.atomic_max_bytes = wmap::env_bytes("WMAP_ATOMIC_MAX_BYTES", "the most bytes an atomic load_into stages");
  for (const auto& item : kw) {
    const std::string key = py::str(item.first);
    const py::handle v = item.second;
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      throw py::type_error(entry_name(e) + " got an unexpected keyword argument '" + key +
                           "' (known: " + joined(known) + ")");
    }
    r.given.push_back(key);
    if (key == "tp_size")
      r.layout.tp_size = count_arg(key, v);
    else if (key == "tp_rank")
      r.layout.tp_rank = optional_count_arg(key, v);
    else if (key == "ep_size")
      r.layout.ep_size = count_arg(key, v);
    else if (key == "pp_size")
      r.layout.pp_size = count_arg(key, v);
    else if (key == "pp_rank")
      r.layout.pp_rank = optional_count_arg(key, v);
    else if (key == "pp_partition")
      r.layout.pp_partition = partition_arg(key, v);
    else if (key == "mtp_layers")
      r.layout.mtp_layers = optional_count_arg(key, v);
    else if (key == "target")
      r.layout.target = v.cast<std::string>();
    else if (key == "attention_dp")
      r.layout.attention_dp = v.cast<bool>();
    else if (key == "gpus_per_node")
      r.layout.gpus_per_node = optional_count_arg(key, v);
    else if (key == "moe_backend")
      r.layout.moe_backend = v.is_none() ? std::string() : v.cast<std::string>();
    else if (key == "catalog")
      r.catalog = optional_path_arg(v);
    else if (key == "config")
      r.config = optional_path_arg(v);
    else if (key == "plugin_dir")
      r.plugin_dir = optional_path_arg(v);
    else if (key == "mappings")
      r.mappings = optional_path_arg(v);
    else if (key == "quiet")
      r.quiet = v.cast<bool>();
    else if (key == "max_read_gap")
      r.plan.max_read_gap = bytes_arg(key, v);
    else if (key == "cache")
      r.cache = v.cast<bool>();
    else if (key == "device")
      r.device = wmap::DeviceSpec::parse(v.cast<std::string>());
    else if (key == "ignore")
      r.into.ignore = v.cast<std::vector<std::string>>();
    else if (key == "atomic")
      r.into.atomic = v.cast<bool>();
    else if (key == "verify")
      r.verify = verify_arg(v);
    else if (key == "manifest")
      r.manifest = optional_path_arg(v);
    else if (key == "digests")
      r.digests = v.cast<bool>();
    else if (key == "remote")
      remote_arg(v, r.remote);
  }
  return r;
}

}  // namespace wmap::python
