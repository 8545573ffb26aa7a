#include "dlpack_import.h"

#include <optional>

#include "dlpack_abi.h"
#include "py_errors.h"

namespace wmap::python {
namespace {

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

}  // namespace

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

}  // namespace wmap::python
