#pragma once
// wmap.Tensor: one loaded parameter, handed out over the buffer the load filled. It owns a
// std::shared_ptr<DeviceBuffer>: `.numpy()` arrays keep the Tensor alive through their base
// object, and DLPack capsules keep the buffer alive through their manager context, so memory
// lives exactly as long as any view of it. Immutable metadata; the bytes are writable in place,
// except a cached load's (read_only).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlpack_abi.h"
#include "wmap/device/device.h"
#include "wmap/device/device_spec.h"
#include "wmap/exec/executor.h"
#include "wmap/loader/loader.h"

namespace wmap::python {

namespace py = pybind11;

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

// The DLPack device of a device the load opened (its own answer, never a re-parse of a string).
dl::Device dl_device_of(const wmap::DeviceSpec& spec);

class Tensor {
 public:
  Tensor(const wmap::LoadedParam& p, std::shared_ptr<const LoadState> state, std::optional<uint64_t> digest = {})
      : name_(p.name), dtype_(p.dtype), shape_(p.shape), buffer_(p.buffer), state_(std::move(state)), digest_(digest) {}

  // load(digests=True): XXH3-64 of the bytes as loaded, 16 hex digits; None otherwise.
  py::object digest() const;

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
  void* address() const;
  uintptr_t data_ptr() const { return reinterpret_cast<uintptr_t>(address()); }

  // Element shape and byte strides as exported (sub-byte dtypes: one flat byte dimension).
  std::vector<int64_t> export_shape() const;

  py::array numpy(py::object self) const;

  py::tuple dlpack_device() const { return py::make_tuple(state_->dl_device.device_type, state_->dl_device.device_id); }

  py::object dlpack(py::object stream, py::object max_version, py::object dl_device, py::object copy) const;

  std::string repr() const;

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
  static void destroy_legacy_capsule(PyObject* cap);
  static void destroy_versioned_capsule(PyObject* cap);

  std::string name_;
  wmap::DType dtype_;
  std::vector<uint64_t> shape_;
  std::shared_ptr<wmap::DeviceBuffer> buffer_;
  std::shared_ptr<const LoadState> state_;
  std::optional<uint64_t> digest_;
};

}  // namespace wmap::python
