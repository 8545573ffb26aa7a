#pragma once
// What a spec builder may ask of the checkpoint while it builds: key presence, a key's dtype and
// (CheckpointExtent) the sizes it proves. Part of the plugin ABI (wmap/abi/plugin_api.h includes
// it; hashed into the build id); declared in the spec stage so the core's own spec builders
// (spec::linear_quant) can ask it too.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "wmap/format/dtype.h"
#include "wmap/spec/config_bounds.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// Answers "is this canonical key in the checkpoint?" while a spec is built, and what the
// checkpoint proves about sizes (CheckpointExtent: read config sizes through ConfigBounds).
class KeyProbe : public CheckpointExtent {
 public:
  virtual bool contains(std::string_view canonical_key) const = 0;
  // The dtype the checkpoint stores the tensor in; nullopt when it has no such key.
  virtual std::optional<DType> dtype_of(std::string_view canonical_key) const = 0;
  // The tensor's stored shape (a per-tensor FP8 scale is [] in ModelOpt exports, [1] in
  // compressed-tensors ones); nullopt when it has no such key.
  virtual std::optional<std::vector<uint64_t>> shape_of(std::string_view canonical_key) const = 0;
};

}  // namespace wmap
WMAP_PUBLIC_END
