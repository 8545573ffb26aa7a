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

// An in-place transform over one piece's bytes, e.g. a scale inversion. `key` names the source
// for error messages.
using TransformFn = std::function<void(std::span<std::byte> data, DType dtype, const std::string& key)>;

}  // namespace wmap
WMAP_PUBLIC_END
