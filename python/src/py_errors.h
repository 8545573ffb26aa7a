#pragma once
// wmap::Error as Python exceptions: wmap.MalformedInputError (the CLI's exit code 2: bad usage,
// unreadable or malformed input) or wmap.ValidationError (exit code 1), both subclasses of
// wmap.Error, with the C++ message unchanged and `.code` / `.exit_code` attributes; a failed
// load into the caller's tensors also carries `.written` (the destinations it had written). A
// cancelled call (Ctrl-C) is KeyboardInterrupt.

#include <pybind11/pybind11.h>

#include <string>

#include "wmap/util/error.h"

namespace wmap::python {

namespace py = pybind11;

// Creates wmap.Error and its subclasses in `m` and registers the translator.
void register_exceptions(py::module_& m);

[[noreturn]] void throw_error(wmap::ErrorCode code, const std::string& message);

}  // namespace wmap::python
