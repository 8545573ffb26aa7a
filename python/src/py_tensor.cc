#include "py_tensor.h"

#include "py_errors.h"
#include "wmap/format/dtype.h"
#include "wmap/util/xxh3.h"

namespace wmap::python {
namespace {

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

}  // namespace

dl::Device dl_device_of(const wmap::DeviceSpec& spec) {
  if (spec.is_cuda()) return {dl::kDLCUDA, static_cast<int32_t>(spec.index)};
  return {dl::kDLCPU, 0};
}

py::object Tensor::digest() const { return digest_ ? py::object(py::str(wmap::xxh3_hex(*digest_))) : py::none(); }

void* Tensor::address() const {
  if (nbytes() == 0) return g_empty;
  void* p = buffer_->host_data();
  if (p == nullptr) p = buffer_->device_data();  // a CUDA buffer has only a device address
  if (p == nullptr) {
    throw_error(wmap::ErrorCode::kUnsupported,
                "'" + name_ + "' on " + device() + ": this build cannot address device memory from Python");
  }
  return p;
}

std::vector<int64_t> Tensor::export_shape() const {
  if (export_of(dtype_).raw_bytes) return {static_cast<int64_t>(nbytes())};
  std::vector<int64_t> s(shape_.begin(), shape_.end());
  return s;
}

py::array Tensor::numpy(py::object self) const {
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

py::object Tensor::dlpack(py::object stream, py::object max_version, py::object dl_device, py::object copy) const {
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

std::string Tensor::repr() const {
  std::string s = "wmap.Tensor('" + name_ + "', " + dtype() + ", [";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + "], " + device() + ")";
}

void Tensor::destroy_legacy_capsule(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) {
    auto* m = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (m != nullptr && m->deleter != nullptr) m->deleter(m);
  }
}

void Tensor::destroy_versioned_capsule(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    auto* m = static_cast<dl::ManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
    if (m != nullptr && m->deleter != nullptr) m->deleter(m);
  }
}

}  // namespace wmap::python
