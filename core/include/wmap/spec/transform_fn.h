#pragma once
// The signature of a named in-place transform (ParamSpec pieces name them; built-ins and plugins
// register them; the executor runs them). Its own header so the executor needs no plugin ABI.

#include <cstddef>
#include <functional>
#include <span>
#include <string>

#include "wmap/format/dtype.h"
#include "wmap/util/export.h"

WMAP_PUBLIC_BEGIN
namespace wmap {

// An in-place transform over one piece's bytes (its padding included), e.g. a scale inversion.
// `dtype` is the parameter's; `key` names the source for error messages; `shape` is the piece's
// output extents (PlannedPiece::out_shape(): after perm and padding, in the source's addressable
// elements), so a transform that rearranges a matrix (a block-scale swizzle) or widens elements
// into padding reserved for them knows its geometry.
using TransformFn = std::function<void(std::span<std::byte> data, DType dtype, const std::string& key,
                                       std::span<const uint64_t> shape)>;

}  // namespace wmap
WMAP_PUBLIC_END
