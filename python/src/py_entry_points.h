#pragma once
// The module's entry points: wmap.load, wmap.load_into, wmap.plan (and Plan.refresh), and
// wmap.inspect's JSON. Each runs the same LoaderSession path as the CLI (`wmap load`, `wmap plan`,
// `wmap inspect`); catalogs, plans and loads run off the calling thread with the GIL released,
// and Ctrl-C ends them (interruptible.h).

#include <pybind11/pybind11.h>

#include <filesystem>
#include <string>

#include "py_plan.h"

namespace wmap::python {

namespace py = pybind11;

// (params, report): {name: wmap.Tensor} in plan order and what the load did ("verified",
// "verification", "cache", bytes, seconds, ...); wmap/__init__.py makes them a LoadResult.
py::tuple load(py::object source, py::kwargs kw);
py::dict load_into(py::object source, py::object params, py::kwargs kw);
Plan make_plan(py::object source, py::kwargs kw);
Plan refresh_plan(const Plan& plan);
std::string inspect_json(const std::filesystem::path& path);

// The one JSON form of a layout (Layout::to_json) as a dict.
py::object layout_dict(const wmap::Layout& l);
// A plan problem as the CLI prints it, without "wmap: ".
std::string problem_line(const wmap::PlanProblem& p);

}  // namespace wmap::python
