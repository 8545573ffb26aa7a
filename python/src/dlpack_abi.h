#pragma once
// DLPack ABI (https://dmlc.github.io/dlpack/latest/c_api.html). The C structs are a stable ABI;
// they are declared here because Debian 12 ships no DLPack >= 1.1 header (libdlpack-dev is 0.6).
// Legacy (unversioned) capsules use only codes every DLPack consumer knows; the 1.x versioned
// capsule is produced when the consumer asks for it with max_version, and the float8 codes of
// DLPack 1.1 are used only when the consumer's max_version is at least (1, 1).

#include <cstdint>

namespace wmap::python {
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

}  // namespace wmap::python
