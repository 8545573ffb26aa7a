#pragma once
// wmap.load_into's destinations: a caller's tensor taken through its DLPack export.

#include <pybind11/pybind11.h>

#include <string>

#include "wmap/exec/destinations.h"

namespace wmap::python {

namespace py = pybind11;

// The capsule is held, not consumed (never renamed "used_dltensor"), so its producer keeps the
// memory alive while we write and frees it as usual once the capsule is dropped.
struct ImportedDestination {
  py::object capsule;
  wmap::Destination dest;
};

// params[name] as a destination: a TypeError when it exports no DLPack, the device named when
// load_into cannot write it.
ImportedDestination import_destination(const std::string& name, const py::handle& obj);

}  // namespace wmap::python
