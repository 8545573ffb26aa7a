// wmap._wmap: the pybind11 extension behind `import wmap` (python/wmap/__init__.py is its front).
//
// It runs the same LoaderSession path as the CLI (`wmap load`, `wmap plan`, `wmap inspect`) and
// hands each loaded parameter out as a wmap.Tensor that owns a std::shared_ptr<DeviceBuffer>:
// `.numpy()` arrays keep the Tensor alive through their base object, and DLPack capsules keep the
// buffer alive through their manager context, so memory lives exactly as long as any view of it.
// The GIL is released for everything that touches files (catalog, plan, load).
//
// Errors: wmap::Error becomes wmap.MalformedInputError (the CLI's exit code 2: bad usage,
// unreadable or malformed input) or wmap.ValidationError (exit code 1), both subclasses of
// wmap.Error, with the C++ message unchanged and `.code` / `.exit_code` attributes.

#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wmap/catalog/catalog.h"
#include "wmap/catalog/shard_digests.h"
#include "wmap/device/device.h"
#include "wmap/device/device_spec.h"
#include "wmap/format/dtype.h"
#include "wmap/util/error.h"
#include "wmap/exec/executor.h"
#include "wmap/exec/expected_params.h"
#include "wmap/plan/load_plan.h"
#include "wmap/loader/loader.h"
#include "wmap/loader/weight_cache.h"
#include "wmap/util/log.h"
#include "wmap/spec/layout.h"
#include "wmap/util/progress.h"
#include "wmap/util/xxh3.h"
#include "wmap/catalog/shard_set.h"

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------------------------------------
// DLPack ABI (https://dmlc.github.io/dlpack/latest/c_api.html). The C structs are a stable ABI;
// they are declared here because Debian 12 ships no DLPack >= 1.1 header (libdlpack-dev is 0.6).
// Legacy (unversioned) capsules use only codes every DLPack consumer knows; the 1.x versioned
// capsule is produced when the consumer asks for it with max_version, and the float8 codes of
// DLPack 1.1 are used only when the consumer's max_version is at least (1, 1).
namespace dl {

enum DeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };
enum TypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
  kDLFloat8_e4m3fn = 10,
  kDLFloat8_e5m2 = 12,
  kDLFloat8_e8m0fnu = 14,  // DLPack 1.1
};

struct Device {
  int32_t device_type;
  int32_t device_id;
};
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // null: compact row-major
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor*);
};
struct PackVersion {
  uint32_t major;
  uint32_t minor;
};
struct ManagedTensorVersioned {
  PackVersion version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned*);
  uint64_t flags;
  Tensor dl_tensor;
};

}  // namespace dl

// ---------------------------------------------------------------------------------------------
// Exceptions.
PyObject* g_error = nullptr;             // wmap.Error
PyObject* g_malformed_error = nullptr;   // wmap.MalformedInputError
PyObject* g_validation_error = nullptr;  // wmap.ValidationError

py::str message_str(const char* what) {
  const std::string s(what);
  PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (u == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(u);
}

void set_python_error(PyObject* cls, const char* what, py::object code, int exit_code) {
  py::object type = py::reinterpret_borrow<py::object>(cls);
  py::object exc = type(message_str(what));
  exc.attr("code") = std::move(code);
  exc.attr("exit_code") = exit_code;
  PyErr_SetObject(cls, exc.ptr());
}

void translate_exception(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const wmap::Error& e) {
    const int rc = wmap::exit_code_for(e.code());
    set_python_error(rc == 2 ? g_malformed_error : g_validation_error, e.what(),
                     py::str(std::string(wmap::error_code_name(e.code()))), rc);
  } catch (const py::error_already_set&) {
    throw;
  } catch (const py::builtin_exception&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;  // MemoryError
  } catch (const std::exception& e) {
    // Not a wmap::Error (e.g. a plugin throwing something else): the CLI reports it with exit 1.
    set_python_error(g_error, e.what(), py::none(), 1);
  }
}

[[noreturn]] void throw_error(wmap::ErrorCode code, const std::string& message) { throw wmap::Error(code, message); }

// ---------------------------------------------------------------------------------------------
// What a load's tensors share: the session (its plugins' library handles) and the device. Each
// Tensor and each DLPack capsule holds it, so the device outlives every buffer it allocated.
// The DLPack device is the device object's own answer (review F1: a second parser of the user's
// string exported `device="cuda"` memory as CPU memory). `read_only`: the buffers are shared
// with the weight cache, so views say they may not be written where the framework can.
struct LoadState {
  std::shared_ptr<const wmap::LoaderSession> session;
  std::unique_ptr<wmap::Device> device;
  std::string device_name;
  dl::Device dl_device{dl::kDLCPU, 0};
  bool read_only = false;
};

dl::Device dl_device_of(const wmap::DeviceSpec& spec) {
  if (spec.is_cuda()) return {dl::kDLCUDA, static_cast<int32_t>(spec.index)};
  return {dl::kDLCPU, 0};
}

constexpr uint64_t kDlpackFlagReadOnly = uint64_t{1} << 0;  // DLPACK_FLAG_BITMASK_READ_ONLY (DLPack 1.0)

// How a dtype goes out: numpy type string and DLPack type; sub-byte dtypes go out as raw bytes.
struct Export {
  const char* numpy;  // numpy typestr of one element
  dl::DataType legacy;
  dl::DataType v1_1;  // for a versioned capsule when the consumer knows DLPack >= 1.1
  dl::DataType v1_0;
  bool raw_bytes;  // F4/F6: a flat uint8 array of nbytes
};

Export export_of(wmap::DType t) {
  using wmap::DType;
  auto same = [](const char* np, dl::DataType d) { return Export{np, d, d, d, false}; };
  switch (t) {
    case DType::kBOOL: return {"|b1", {dl::kDLUInt, 8, 1}, {dl::kDLBool, 8, 1}, {dl::kDLBool, 8, 1}, false};
    case DType::kU8: return same("|u1", {dl::kDLUInt, 8, 1});
    case DType::kI8: return same("|i1", {dl::kDLInt, 8, 1});
    case DType::kU16: return same("<u2", {dl::kDLUInt, 16, 1});
    case DType::kI16: return same("<i2", {dl::kDLInt, 16, 1});
    case DType::kU32: return same("<u4", {dl::kDLUInt, 32, 1});
    case DType::kI32: return same("<i4", {dl::kDLInt, 32, 1});
    case DType::kU64: return same("<u8", {dl::kDLUInt, 64, 1});
    case DType::kI64: return same("<i8", {dl::kDLInt, 64, 1});
    case DType::kF16: return same("<f2", {dl::kDLFloat, 16, 1});
    case DType::kF32: return same("<f4", {dl::kDLFloat, 32, 1});
    case DType::kF64: return same("<f8", {dl::kDLFloat, 64, 1});
    case DType::kC64: return same("<c8", {dl::kDLComplex, 64, 1});
    case DType::kBF16: return same("<u2", {dl::kDLBfloat, 16, 1});  // numpy: uint16 bit patterns
    case DType::kF8_E4M3: return {"|u1", {dl::kDLUInt, 8, 1}, {dl::kDLFloat8_e4m3fn, 8, 1}, {dl::kDLUInt, 8, 1}, false};
    case DType::kF8_E5M2: return {"|u1", {dl::kDLUInt, 8, 1}, {dl::kDLFloat8_e5m2, 8, 1}, {dl::kDLUInt, 8, 1}, false};
    case DType::kF8_E8M0:
      return {"|u1", {dl::kDLUInt, 8, 1}, {dl::kDLFloat8_e8m0fnu, 8, 1}, {dl::kDLUInt, 8, 1}, false};
    case DType::kF4:
    case DType::kF6_E2M3:
    case DType::kF6_E3M2: return {"|u1", {dl::kDLUInt, 8, 1}, {dl::kDLUInt, 8, 1}, {dl::kDLUInt, 8, 1}, true};
  }
  throw_error(wmap::ErrorCode::kInternal, "unknown dtype");
}

alignas(64) std::byte g_empty[64];  // the address of zero-byte tensors (never read or written)

// ---------------------------------------------------------------------------------------------
// wmap.Tensor: one loaded parameter. Immutable metadata; the bytes are writable in place, except
// a cached load's (read_only).
class Tensor {
 public:
  Tensor(const wmap::LoadedParam& p, std::shared_ptr<const LoadState> state, std::optional<uint64_t> digest = {})
      : name_(p.name), dtype_(p.dtype), shape_(p.shape), buffer_(p.buffer), state_(std::move(state)), digest_(digest) {}

  // load(digests=True): XXH3-64 of the bytes as loaded, 16 hex digits; None otherwise.
  py::object digest() const { return digest_ ? py::object(py::str(wmap::xxh3_hex(*digest_))) : py::none(); }

  const std::string& name() const { return name_; }
  std::string dtype() const { return std::string(wmap::dtype_name(dtype_)); }
  py::tuple shape() const {
    py::tuple t(shape_.size());
    for (size_t i = 0; i < shape_.size(); ++i) t[i] = shape_[i];
    return t;
  }
  uint64_t nbytes() const { return buffer_ ? buffer_->size() : 0; }
  const std::string& device() const { return state_->device_name; }
  bool on_host() const { return state_->dl_device.device_type == dl::kDLCPU; }
  bool read_only() const { return state_->read_only; }

  // The address of the first byte: host memory, or device memory for a CUDA tensor.
  void* address() const {
    if (nbytes() == 0) return g_empty;
    void* p = buffer_->host_data();
    if (p == nullptr) p = buffer_->device_data();  // a CUDA buffer has only a device address
    if (p == nullptr) {
      throw_error(wmap::ErrorCode::kUnsupported,
                  "'" + name_ + "' on " + device() + ": this build cannot address device memory from Python");
    }
    return p;
  }
  uintptr_t data_ptr() const { return reinterpret_cast<uintptr_t>(address()); }

  // Element shape and byte strides as exported (sub-byte dtypes: one flat byte dimension).
  std::vector<int64_t> export_shape() const {
    if (export_of(dtype_).raw_bytes) return {static_cast<int64_t>(nbytes())};
    std::vector<int64_t> s(shape_.begin(), shape_.end());
    return s;
  }

  py::array numpy(py::object self) const {
    if (!on_host()) {
      throw_error(wmap::ErrorCode::kUnsupported,
                  "'" + name_ + "' is on " + device() + ": .numpy() needs host memory (use torch.from_dlpack)");
    }
    const Export ex = export_of(dtype_);
    py::dtype dt(std::string(ex.numpy));
    const auto shape = export_shape();
    std::vector<py::ssize_t> dims(shape.begin(), shape.end());
    std::vector<py::ssize_t> strides(dims.size());
    py::ssize_t stride = dt.itemsize();
    for (size_t i = dims.size(); i-- > 0;) {
      strides[i] = stride;
      stride *= dims[i];
    }
    // `self` is the array's base: the Tensor (and its buffer) lives as long as the array.
    py::array a(dt, dims, strides, address(), self);
    if (read_only()) a.attr("setflags")(py::arg("write") = false);
    return a;
  }

  py::tuple dlpack_device() const { return py::make_tuple(state_->dl_device.device_type, state_->dl_device.device_id); }

  py::object dlpack(py::object stream, py::object max_version, py::object dl_device, py::object copy) const {
    (void)stream;  // the load has completed and synchronised: nothing is pending on any stream
    if (!dl_device.is_none()) {
      auto want = dl_device.cast<std::pair<int32_t, int32_t>>();
      if (want.first != state_->dl_device.device_type || want.second != state_->dl_device.device_id) {
        throw py::buffer_error("wmap.Tensor '" + name_ + "' is on " + device() +
                               "; copying to another device is not supported");
      }
    }
    if (!copy.is_none() && copy.cast<bool>())
      throw py::buffer_error("wmap.Tensor.__dlpack__: copy=True is not supported");
    uint32_t major = 0, minor = 0;
    if (!max_version.is_none()) {
      auto v = max_version.cast<std::pair<uint32_t, uint32_t>>();
      major = v.first, minor = v.second;
    }
    const Export ex = export_of(dtype_);
    auto ctx = std::make_unique<Context>();
    ctx->state = state_;
    ctx->buffer = buffer_;
    ctx->shape = export_shape();
    dl::Tensor t{};
    t.data = address();
    t.device = state_->dl_device;
    t.ndim = static_cast<int32_t>(ctx->shape.size());
    t.shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
    t.strides = nullptr;  // compact row-major
    t.byte_offset = 0;
    if (major >= 1) {
      const bool v11 = minor >= 1 || major > 1;
      t.dtype = v11 ? ex.v1_1 : ex.v1_0;
      ctx->versioned.version = {1, v11 ? 1u : 0u};
      ctx->versioned.manager_ctx = ctx.get();
      ctx->versioned.deleter = [](dl::ManagedTensorVersioned* m) { delete static_cast<Context*>(m->manager_ctx); };
      ctx->versioned.flags = read_only() ? kDlpackFlagReadOnly : 0;  // legacy capsules cannot say it
      ctx->versioned.dl_tensor = t;
      PyObject* cap = PyCapsule_New(&ctx->versioned, "dltensor_versioned", &destroy_versioned_capsule);
      if (cap == nullptr) throw py::error_already_set();
      ctx.release();
      return py::reinterpret_steal<py::object>(cap);
    }
    t.dtype = ex.legacy;
    ctx->legacy.dl_tensor = t;
    ctx->legacy.manager_ctx = ctx.get();
    ctx->legacy.deleter = [](dl::ManagedTensor* m) { delete static_cast<Context*>(m->manager_ctx); };
    PyObject* cap = PyCapsule_New(&ctx->legacy, "dltensor", &destroy_legacy_capsule);
    if (cap == nullptr) throw py::error_already_set();
    ctx.release();
    return py::reinterpret_steal<py::object>(cap);
  }

  std::string repr() const {
    std::string s = "wmap.Tensor('" + name_ + "', " + dtype() + ", [";
    for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
    return s + "], " + device() + ")";
  }

 private:
  // A DLPack export's manager context: owns the buffer (and the device) until the consumer's
  // deleter runs. Holds no Python object, so the deleter may run without the GIL.
  struct Context {
    std::shared_ptr<const LoadState> state;  // declared first: released last
    std::shared_ptr<wmap::DeviceBuffer> buffer;
    std::vector<int64_t> shape;
    dl::ManagedTensor legacy{};
    dl::ManagedTensorVersioned versioned{};
  };
  // A capsule nobody consumed (still named "dltensor"/"dltensor_versioned") frees its tensor.
  static void destroy_legacy_capsule(PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (m != nullptr && m->deleter != nullptr) m->deleter(m);
    }
  }
  static void destroy_versioned_capsule(PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
      auto* m = static_cast<dl::ManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
      if (m != nullptr && m->deleter != nullptr) m->deleter(m);
    }
  }

  std::string name_;
  wmap::DType dtype_;
  std::vector<uint64_t> shape_;
  std::shared_ptr<wmap::DeviceBuffer> buffer_;
  std::shared_ptr<const LoadState> state_;
  std::optional<uint64_t> digest_;
};

// ---------------------------------------------------------------------------------------------
// The keyword arguments of load(), load_into() and plan(), parsed in one place (review F4): the
// layout into the core's LayoutOptions, whose defaults are written there once; an unknown keyword
// is a TypeError listing the known ones; a negative or absurd count names its keyword.
enum class Entry { kLoad, kLoadInto, kPlan };

std::string entry_name(Entry e) {
  return e == Entry::kLoad ? "wmap.load()" : e == Entry::kLoadInto ? "wmap.load_into()" : "wmap.plan()";
}

struct Request {
  std::optional<std::filesystem::path> path, catalog, config, plugin_dir, mappings;
  wmap::LayoutOptions layout;
  wmap::PlanOptions plan;          // max_read_gap
  std::vector<std::string> given;  // the keywords the caller gave
  wmap::DeviceSpec device;
  bool quiet = false, cache = false;
  std::vector<std::string> ignore;
  wmap::ExecOptions::Verify verify = wmap::ExecOptions::Verify::kOff;  // verify=True / 'full'
  std::optional<std::filesystem::path> manifest;
  bool digests = false;
};

// What every entry takes (plan() and load() the same), then each one's own.
std::vector<std::string> keywords(Entry e) {
  std::vector<std::string> k = wmap::LayoutOptions::names();
  for (const char* n : {"catalog", "config", "plugin_dir", "mappings", "quiet", "max_read_gap"}) k.push_back(n);
  if (e == Entry::kLoad) k.insert(k.end(), {"device", "cache"});
  if (e == Entry::kLoadInto) k.push_back("ignore");
  if (e != Entry::kPlan) k.insert(k.end(), {"verify", "manifest", "digests"});
  return k;
}

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

std::optional<std::filesystem::path> optional_path_arg(py::handle v) {
  if (v.is_none()) return std::nullopt;
  return v.cast<std::filesystem::path>();
}

// verify=False / True (the shards this rank reads whole) / 'full' (every shard).
wmap::ExecOptions::Verify verify_arg(py::handle v) {
  if (PyBool_Check(v.ptr())) return v.cast<bool>() ? wmap::ExecOptions::Verify::kRead : wmap::ExecOptions::Verify::kOff;
  if (py::isinstance<py::str>(v)) {
    const std::string s = v.cast<std::string>();
    if (s == "full") return wmap::ExecOptions::Verify::kFull;
    if (s == "read") return wmap::ExecOptions::Verify::kRead;
  }
  throw py::value_error("verify must be False, True or 'full', not " + std::string(py::repr(v)));
}

Request parse_request(Entry e, const py::kwargs& kw) {
  const std::vector<std::string> known = keywords(e);
  Request r;
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
      r.ignore = v.cast<std::vector<std::string>>();
    else if (key == "verify")
      r.verify = verify_arg(v);
    else if (key == "manifest")
      r.manifest = optional_path_arg(v);
    else if (key == "digests")
      r.digests = v.cast<bool>();
  }
  return r;
}

// A session and its prepared plan, shared by a wmap.Plan, the loads made from it and (the
// session: its plugins' library handles) every tensor they return.
struct Prepared {
  std::shared_ptr<const wmap::LoaderSession> session;
  std::shared_ptr<const wmap::PreparedLoad> prepared;
};

// wmap.Plan: a validated plan with everything it was made from; wmap.load(plan) and
// wmap.load_into(plan, ...) run exactly it (no second planning, no gap between check and use).
class Plan {
 public:
  explicit Plan(Prepared p) : p_(std::move(p)) {}
  const wmap::LoadPlan& plan() const { return *p_.prepared->plan; }
  const wmap::PreparedLoad& prepared() const { return *p_.prepared; }
  const Prepared& shared() const { return p_; }

 private:
  Prepared p_;
};

// Plans from the request's checkpoint (or saved catalog and config), the GIL released.
Prepared prepare(const Request& r) {
  py::gil_scoped_release nogil;
  wmap::LoaderOptions l;
  l.checkpoint = r.path;
  l.catalog_file = r.catalog;
  l.config_file = r.config;
  l.plugin_dir = r.plugin_dir;
  l.mappings_dir = r.mappings;
  l.layout = wmap::layout_from_options(r.layout);  // as the CLI's
  l.progress = !r.quiet;
  l.plan = r.plan;
  auto session = std::make_shared<wmap::LoaderSession>(l);
  std::shared_ptr<const wmap::PreparedLoad> prepared = session->prepare();
  return {std::move(session), std::move(prepared)};
}

// `source`: a checkpoint path (str or os.PathLike; None with catalog=), or a wmap.Plan, which
// already fixes the checkpoint and the layout.
Prepared resolve(Entry e, py::handle source, Request& r) {
  if (py::isinstance<Plan>(source)) {
    for (const auto& k : r.given) {
      if (k != "quiet" && k != "device" && k != "cache" && k != "ignore" && k != "verify" && k != "manifest" &&
          k != "digests") {
        throw py::type_error(entry_name(e) + ": a wmap.Plan already fixes the checkpoint and the layout; '" + k +
                             "' belongs to wmap.plan()");
      }
    }
    return source.cast<const Plan&>().shared();
  }
  r.path = optional_path_arg(source);
  return prepare(r);
}

// The one JSON form of a layout (Layout::to_json) as a dict.
py::object layout_dict(const wmap::Layout& l) { return py::module_::import("json").attr("loads")(l.to_json()); }

// The CLI's plan report (LoadPlan::report): problems, warnings, verdict on stderr.
void report_plan(const wmap::LoadPlan& plan) {
  const std::string text = plan.report(false);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

std::string problem_line(const wmap::PlanProblem& p) {
  return std::string(wmap::problem_kind_name(p.kind)) + ": " + p.message;
}

wmap::ExecOptions front_end_exec(const Request& r, const wmap::PreparedLoad& prepared) {
  wmap::ExecOptions exec;  // I/O path chosen per checkpoint, as the CLI's default `--io auto`
  exec.read_workers = wmap::worker_count_from_env("WMAP_READ_WORKERS");
  exec.load_workers = wmap::worker_count_from_env("WMAP_LOAD_WORKERS");
  exec.digests = r.digests;
  exec.verify = r.verify;
  if (r.verify != wmap::ExecOptions::Verify::kOff) {
    exec.expected_sha256 = wmap::expected_digests(*prepared.catalog, r.manifest.value_or(std::filesystem::path()),
                                                  r.catalog.value_or(std::filesystem::path()));
  }
  return exec;
}

// A verified load's shards that did not match, one line each on stderr, and a count (as `wmap load`).
void report_verification(const wmap::LoadStats& s, bool quiet) {
  if (quiet || s.verification.empty()) return;
  size_t ok = 0;
  std::string lines;
  for (const auto& c : s.verification) {
    if (c.status == wmap::ShardCheck::Status::kMatch) {
      ++ok;
    } else {
      lines += "wmap: verify: " + c.line() + "\n";
    }
  }
  lines += "wmap: verify: " + std::to_string(ok) + " of " + std::to_string(s.verification.size()) +
           " shards match their expected SHA-256\n";
  std::fwrite(lines.data(), 1, lines.size(), stderr);
}

py::list verification_list(const wmap::LoadStats& s) {
  py::module_ json = py::module_::import("json");
  py::list out;
  for (const auto& c : s.verification) out.append(json.attr("loads")(c.json()));
  return out;
}

// wmap.load: the CLI's `wmap load`, returning the rank's parameters in plan order.
py::dict load(py::object source, py::kwargs kw) {
  Request r = parse_request(Entry::kLoad, kw);
  const Prepared p = resolve(Entry::kLoad, source, r);
  auto state = std::make_shared<LoadState>();
  state->session = p.session;
  wmap::LoadedModel model;
  {
    py::gil_scoped_release nogil;
    if (!r.quiet) report_plan(*p.prepared->plan);
    state->device = wmap::make_device(r.device);
    state->device_name = state->device->name();
    state->dl_device = dl_device_of(state->device->spec());
    wmap::ExecOptions exec = front_end_exec(r, *p.prepared);
    wmap::Progress bar("load", p.prepared->plan->bytes_to_load(), !r.quiet, wmap::Progress::kBytes);
    exec.progress = [&bar](uint64_t done, uint64_t) { bar.update(done); };
    // As `wmap load`: an I/O error while reading tensor data is a load failure, not unusable input.
    model = wmap::run_as_load_failure([&] { return p.session->load(*p.prepared, *state->device, exec, r.cache); });
    state->device->synchronize();
    bar.finish();
    state->read_only = model.stats.cache == "hit" || model.stats.cache == "miss";  // shared with the cache
    report_verification(model.stats, r.quiet);
  }
  std::shared_ptr<const LoadState> shared = state;
  py::dict out;
  for (size_t i = 0; i < model.params.size(); ++i) {
    const auto& param = model.params[i];
    const std::optional<uint64_t> digest = i < model.digests.size() ? std::optional(model.digests[i]) : std::nullopt;
    out[py::str(param.name)] = py::cast(Tensor(param, shared, digest));
  }
  return out;
}

// wmap.load_into: a caller's tensor as a destination, through its DLPack export. The capsule is
// held, not consumed (never renamed "used_dltensor"), so its producer keeps the memory alive
// while we write and frees it as usual once the capsule is dropped.
struct ImportedDestination {
  py::object capsule;
  wmap::Destination dest;
};

// The caller's DLPack dtype as ours, when there is one (float8 codes: DLPack 1.1).
std::optional<wmap::DType> dtype_of(const dl::DataType& t) {
  using wmap::DType;
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case dl::kDLFloat:
      return t.bits == 16   ? std::optional(DType::kF16)
             : t.bits == 32 ? std::optional(DType::kF32)
             : t.bits == 64 ? std::optional(DType::kF64)
                            : std::nullopt;
    case dl::kDLBfloat: return t.bits == 16 ? std::optional(DType::kBF16) : std::nullopt;
    case dl::kDLFloat8_e4m3fn: return DType::kF8_E4M3;
    case dl::kDLFloat8_e5m2: return DType::kF8_E5M2;
    case dl::kDLUInt:
      return t.bits == 8    ? std::optional(DType::kU8)
             : t.bits == 16 ? std::optional(DType::kU16)
             : t.bits == 32 ? std::optional(DType::kU32)
             : t.bits == 64 ? std::optional(DType::kU64)
                            : std::nullopt;
    case dl::kDLInt:
      return t.bits == 8    ? std::optional(DType::kI8)
             : t.bits == 16 ? std::optional(DType::kI16)
             : t.bits == 32 ? std::optional(DType::kI32)
             : t.bits == 64 ? std::optional(DType::kI64)
                            : std::nullopt;
    case dl::kDLBool: return DType::kBOOL;
    default: return std::nullopt;
  }
}

ImportedDestination import_destination(const std::string& name, const py::handle& obj) {
  if (!py::hasattr(obj, "__dlpack__")) {
    throw py::type_error("wmap.load_into: params['" + name + "'] is a " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))) +
                         ", which does not export DLPack (__dlpack__): pass torch tensors or numpy arrays");
  }
  ImportedDestination out;
  // torch refuses to export a tensor that requires grad; its detached view shares the storage.
  py::object exportable = py::reinterpret_borrow<py::object>(obj);
  if (py::hasattr(obj, "requires_grad") && py::hasattr(obj, "detach") && obj.attr("requires_grad").cast<bool>()) {
    exportable = obj.attr("detach")();
  }
  out.capsule = exportable.attr("__dlpack__")();
  auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(out.capsule.ptr(), "dltensor"));
  if (m == nullptr) throw py::error_already_set();
  const dl::Tensor& t = m->dl_tensor;
  wmap::Destination& d = out.dest;
  d.name = name;
  d.data = static_cast<std::byte*>(t.data) + t.byte_offset;
  d.element_bytes = (uint32_t{t.dtype.bits} * t.dtype.lanes + 7) / 8;
  d.dtype = dtype_of(t.dtype);
  uint64_t elements = 1;
  for (int32_t i = 0; i < t.ndim; ++i) {
    d.shape.push_back(static_cast<uint64_t>(t.shape[i]));
    elements *= static_cast<uint64_t>(t.shape[i]);
  }
  d.bytes = elements * d.element_bytes;
  if (t.strides != nullptr) {  // contiguous: the compact row-major strides (size-1 dims may have any)
    int64_t expected = 1;
    for (int32_t i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expected) d.contiguous = false;
      expected *= t.shape[i];
    }
  }
  if (t.device.device_type == dl::kDLCPU || t.device.device_type == dl::kDLCUDAHost) {
    d.device = "host";
  } else if (t.device.device_type == dl::kDLCUDA) {
    d.device = "cuda:" + std::to_string(t.device.device_id);
  } else {
    throw_error(wmap::ErrorCode::kInvalidArgument, "wmap.load_into: params['" + name + "'] is on DLPack device type " +
                                                       std::to_string(t.device.device_type) +
                                                       ": load_into writes host or CUDA memory");
  }
  return out;
}

// wmap.load_into: the plan's parameters written into the caller's tensors (DESIGN.md "Loading
// into an engine's own buffers"); again with the same tensors: a reload in place (refit).
py::dict load_into(py::object source, py::object params, py::kwargs kw) {
  if (!py::hasattr(params, "items"))
    throw py::type_error(
        "wmap.load_into: params must be a mapping name -> tensor (e.g. dict(model.named_parameters()))");
  Request r = parse_request(Entry::kLoadInto, kw);
  std::vector<ImportedDestination> imported;
  for (const auto& item : params.attr("items")()) {
    const auto kv = item.cast<py::tuple>();
    imported.push_back(import_destination(kv[0].cast<std::string>(), kv[1]));
  }
  std::vector<wmap::Destination> dests;
  for (const auto& i : imported) dests.push_back(i.dest);
  const Prepared p = resolve(Entry::kLoadInto, source, r);
  wmap::DestinationOptions opts;
  opts.ignore = r.ignore;
  wmap::LoadIntoReport report;
  {
    py::gil_scoped_release nogil;
    if (!r.quiet) report_plan(*p.prepared->plan);
    std::unique_ptr<wmap::Device> device;
    const std::string dev = dests.empty() ? "host" : dests.front().device;
    try {
      device = wmap::make_device(dev);
    } catch (const wmap::Error& e) {
      throw wmap::Error(e.code(), "wmap.load_into: params['" + dests.front().name + "'] is on " + dev +
                                      ", which this process cannot write: " + e.what());
    }
    report = wmap::run_as_load_failure(
        [&] { return p.session->load_into(*p.prepared, *device, dests, front_end_exec(r, *p.prepared), opts); });
    report_verification(report.stats, r.quiet);
  }
  py::dict out;
  out["params"] = report.params;
  out["bytes"] = report.stats.bytes_loaded;
  out["bytes_read"] = report.stats.bytes_read;
  out["reads"] = report.stats.reads;
  if (!report.stats.verification.empty()) {
    out["verification"] = verification_list(report.stats);
    out["verify_extra_bytes"] = report.stats.verify_extra_bytes;
  }
  if (r.digests) {
    py::dict d;
    for (const auto& [name, digest] : report.digests) d[py::str(name)] = wmap::xxh3_hex(digest);
    out["digests"] = d;
  }
  out["seconds"] = report.stats.seconds;
  out["gbps"] =
      report.stats.seconds > 0 ? static_cast<double>(report.stats.bytes_loaded) / report.stats.seconds / 1e9 : 0.0;
  out["device"] = report.device;
  out["io_path"] = report.stats.io_path;
  out["layout"] = layout_dict(p.prepared->plan->layout());
  out["plan_id"] = p.prepared->plan->plan_id();
  out["engine_owned"] = report.engine_owned;
  out["ignored"] = report.ignored;
  out["unfilled"] = report.unfilled;
  return out;
}

// wmap.plan: a rank's validated plan from headers only.
Plan make_plan(py::object source, py::kwargs kw) {
  Request r = parse_request(Entry::kPlan, kw);
  if (py::isinstance<Plan>(source)) throw py::type_error("wmap.plan(): already a wmap.Plan");
  return Plan(resolve(Entry::kPlan, source, r));
}

// wmap.inspect: the text of `wmap inspect --json`.
std::string inspect_json(const std::filesystem::path& path) {
  py::gil_scoped_release nogil;
  wmap::ShardSet set = wmap::discover_shards(path);
  for (const auto& w : set.warnings) wmap::log_warn(w);
  return wmap::Catalog::build(set).to_json(true);
}

PyObject* new_exception(py::module_& m, const char* name, PyObject* base, const char* doc) {
  const std::string qualified = std::string("wmap.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(cls));
  return cls;
}

}  // namespace

PYBIND11_MODULE(_wmap, m) {
  m.doc() = "wmap's C++ core: load Hugging Face safetensors checkpoints onto one rank's parameters";

  g_error = new_exception(m, "Error", PyExc_Exception,
                          "A wmap failure; str(e) is the C++ message unchanged. Attributes: code (the wmap "
                          "error code name, e.g. 'NotFound'), exit_code (what the CLI would exit with).");
  g_malformed_error = new_exception(m, "MalformedInputError", g_error,
                                    "Bad arguments or unreadable/malformed input (the CLI's exit code 2).");
  g_validation_error = new_exception(m, "ValidationError", g_error,
                                     "A well-formed input that fails validation or loading (the CLI's exit code 1).");
  py::register_exception_translator(&translate_exception);

  py::class_<Tensor>(m, "Tensor", "One loaded parameter; its memory lives while any view of it does.")
      .def_property_readonly("name", &Tensor::name)
      .def_property_readonly("dtype", &Tensor::dtype, "The safetensors dtype name, e.g. 'BF16'")
      .def_property_readonly("shape", &Tensor::shape)
      .def_property_readonly("ndim", [](const Tensor& t) { return py::len(t.shape()); })
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("digest", &Tensor::digest,
                             "load(digests=True): XXH3-64 of the bytes as loaded (16 hex digits); else None")
      .def_property_readonly("device", &Tensor::device, "'host' or 'cuda:N'")
      .def_property_readonly("read_only", &Tensor::read_only,
                             "True for a cached load's tensors (shared with the weight cache): numpy views are not\n"
                             "writeable and DLPack 1.x capsules carry the read-only flag")
      .def_property_readonly("data_ptr", &Tensor::data_ptr, "The address of the first byte")
      .def(
          "numpy", [](py::object self) { return self.cast<const Tensor&>().numpy(self); },
          "A zero-copy numpy view (BF16 as uint16 bit patterns, F8 as uint8, F4/F6 as flat bytes)")
      .def(
          "__array__",
          [](py::object self, py::object dtype, py::object) {
            py::object a = self.cast<const Tensor&>().numpy(self);
            return dtype.is_none() ? a : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack__", &Tensor::dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", &Tensor::dlpack_device)
      .def("__repr__", &Tensor::repr);

  py::class_<Plan>(m, "Plan", "A rank's validated load plan (built from headers only)")
      .def_property_readonly("ok", [](const Plan& p) { return p.plan().ok(); })
      .def_property_readonly(
          "problems",
          [](const Plan& p) {
            std::vector<std::string> out;
            for (const auto& x : p.plan().problems()) out.push_back(problem_line(x));
            return out;
          },
          "One line per problem, as `wmap plan` prints them (without the 'wmap: ' prefix)")
      .def_property_readonly(
          "problem_details",
          [](const Plan& p) {
            py::list out;
            for (const auto& x : p.plan().problems()) {
              out.append(py::make_tuple(std::string(wmap::problem_kind_name(x.kind)), x.key, x.message));
            }
            return out;
          },
          "(kind, key, message) per problem")
      .def_property_readonly("warnings", [](const Plan& p) { return p.plan().warnings(); })
      .def_property_readonly("unconsumed", [](const Plan& p) { return p.plan().unconsumed(); })
      .def_property_readonly("coverage", [](const Plan& p) { return p.plan().coverage(); })
      .def_property_readonly(
          "certificate", [](const Plan& p) { return p.plan().certificate(); },
          "The coverage certificate's one-line verdict, as `wmap plan` prints it after 'certificate: '")
      .def_property_readonly(
          "layout", [](const Plan& p) { return layout_dict(p.plan().layout()); },
          "The plan's layout as `wmap plan --json` writes it")
      .def_property_readonly("plan_id", [](const Plan& p) { return p.plan().plan_id(); })
      .def_property_readonly("catalog_id", [](const Plan& p) { return p.plan().catalog_id(); })
      .def_property_readonly("architecture", [](const Plan& p) { return p.prepared().architecture; })
      .def_property_readonly("plugin", [](const Plan& p) { return p.prepared().plugin->name; })
      .def_property_readonly("mapping",
                             [](const Plan& p) -> py::object {
                               if (p.prepared().mapping == nullptr) return py::none();
                               return py::str(p.prepared().mapping->file.string());
                             })
      .def_property_readonly("num_params", [](const Plan& p) { return p.plan().params().size(); })
      .def_property_readonly("bytes_to_load", [](const Plan& p) { return p.plan().bytes_to_load(); })
      .def_property_readonly("bytes_to_read", [](const Plan& p) { return p.plan().bytes_to_read(); })
      .def(
          "to_json", [](const Plan& p) { return p.plan().to_json(); }, "The text `wmap plan --json` prints")
      .def(
          "check_against",
          [](const Plan& p, py::object params) {
            if (!py::hasattr(params, "items"))
              throw py::type_error("Plan.check_against: expected a mapping name -> (shape, dtype)");
            std::vector<wmap::ExpectedParam> expected;
            for (const auto& item : params.attr("items")()) {
              const auto kv = item.cast<py::tuple>();
              const auto sd = kv[1].cast<py::tuple>();
              wmap::ExpectedParam e;
              e.name = kv[0].cast<std::string>();
              for (const auto& d : sd[0]) e.shape.push_back(d.cast<uint64_t>());
              e.dtype = py::str(sd[1]);  // "torch.bfloat16", "bfloat16", "BF16"
              expected.push_back(std::move(e));
            }
            std::vector<std::string> out;
            for (const auto& x : wmap::check_expected_params(p.plan(), expected)) out.push_back(problem_line(x));
            return out;
          },
          py::arg("params"),
          "The plan against an engine's parameters, {name: (shape, dtype)} (dtype: a torch dtype or its name): one "
          "line\n"
          "per difference, both directions (as `wmap plan --expect`); empty when they agree")
      .def("__repr__", [](const Plan& p) {
        return "wmap.Plan(" + p.prepared().architecture + ", " + p.plan().layout().to_string() + ", " +
               (p.plan().ok() ? "ok" : std::to_string(p.plan().problems().size()) + " problem(s)") + ")";
      });

  const std::string common_doc =
      "Keywords (every entry): tp_size=1, tp_rank=0, ep_size=1, mtp_layers=None, target='trtllm' (or 'vllm'),\n"
      "attention_dp=False, gpus_per_node=8, moe_backend=None; catalog=None, config=None (plan offline from a saved "
      "catalog),\n"
      "plugin_dir=None, mappings=None, quiet=False. load and load_into also take verify=False (True: SHA-256 of the\n"
      "shards this rank reads whole, from the bytes as read; 'full': every shard), manifest=None (sha256sum file)\n"
      "and digests=False (each parameter's XXH3-64: Tensor.digest, or the report's 'digests'). `source` is a "
      "checkpoint path, or a wmap.Plan (which fixes\n"
      "the checkpoint and the layout: it is loaded exactly as planned).";
  m.def("load", &load,
        ("Loads one rank's parameters, as `wmap load`: validates the plan (an incomplete one raises\n"
         "ValidationError, its problems printed on stderr unless quiet), then loads. Returns\n"
         "{name: wmap.Tensor} in plan order. The GIL is released while loading.\n"
         "load(source, *, device='host' (or 'cuda', 'cuda:N'), cache=False, ...)\n" +
         common_doc)
            .c_str(),
        py::arg("source"));
  m.def(
      "cache_info",
      [] {
        const auto i = wmap::WeightCache::process().info();
        const auto limits = wmap::WeightCache::limits_from_env();
        py::dict d;
        d["entries"] = i.entries, d["hits"] = i.hits, d["misses"] = i.misses, d["healed"] = i.healed,
        d["evicted"] = i.evicted;
        d["bytes"] = i.bytes, d["last_healed"] = i.last_healed;
        d["max_entries"] = limits.max_entries;
        d["max_bytes"] =
            limits.max_bytes == UINT64_MAX ? py::object(py::none()) : py::object(py::int_(limits.max_bytes));
        return d;
      },
      "The weight cache's counters: entries, hits, misses, healed (dropped after an in-place change), evicted,\n"
      "bytes held, last_healed (the parameters the last heal found changed), max_entries, max_bytes (None: no limit)");
  m.def(
      "cache_clear", [] { wmap::WeightCache::process().clear(); }, "Drops every weight-cache entry");
  m.def("load_into", &load_into,
        ("Writes one rank's parameters into the caller's tensors (a mapping name -> tensor exporting DLPack:\n"
         "torch, numpy; host or CUDA), as the engine's load_weights would: the tensors are checked against the\n"
         "plan first (every mismatch raised at once as ValidationError, nothing written), never reallocated;\n"
         "calling it again reloads them in place. Returns a report dict. The GIL is released while loading.\n"
         "load_into(source, params, *, ignore=[], ...)\n" +
         common_doc)
            .c_str(),
        py::arg("source"), py::arg("params"));
  m.def("plan", &make_plan,
        ("Builds and validates one rank's load plan from headers only (no tensor data is read). Plan problems\n"
         "are reported in Plan.problems (not raised); unusable input raises wmap.Error. plan(source=None, ...)\n" +
         common_doc)
            .c_str(),
        py::arg("source") = py::none());
  m.def("_inspect_json", &inspect_json, py::arg("path"));
}
