// wmap._wmap: the pybind11 extension behind `import wmap` (python/wmap/__init__.py is its front).
// The bindings only; the parts live in python/src/: py_tensor (wmap.Tensor and its DLPack
// export), dlpack_import (load_into's destinations), py_keywords (the keyword arguments),
// py_entry_points (load, load_into, plan, inspect; interruptible.h runs them off the calling
// thread so Ctrl-C ends them), py_errors (wmap.Error and its subclasses).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <string>
#include <vector>

#include "py_entry_points.h"
#include "py_errors.h"
#include "py_plan.h"
#include "py_tensor.h"
#include "wmap/exec/expected_params.h"
#include "wmap/loader/weight_cache.h"

namespace py = pybind11;
using wmap::python::Plan;
using wmap::python::Tensor;
using namespace wmap::python;

PYBIND11_MODULE(_wmap, m) {
  m.doc() = "wmap's C++ core: load Hugging Face safetensors checkpoints onto one rank's parameters";

  register_exceptions(m);

  py::class_<Tensor>(m, "Tensor", "One loaded parameter; its memory lives while any view of it does.")
      .def_property_readonly("name", &Tensor::name)
      .def_property_readonly("dtype", &Tensor::dtype, "The safetensors dtype name, e.g. 'BF16'")
      .def_property_readonly("shape", &Tensor::shape)
      .def_property_readonly("ndim", [](const Tensor& t) { return py::len(t.shape()); })
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def_property_readonly("digest", &Tensor::digest,
                             "load(digests=True): XXH3-64 of the bytes as loaded (16 hex digits); else None")
      .def_property_readonly("device", &Tensor::device, "'host' or 'cuda:N'")
      .def_property_readonly("read_only", &Tensor::read_only,
                             "True for a cached load's tensors (shared with the weight cache): numpy views are not\n"
                             "writeable and DLPack 1.x capsules carry the read-only flag")
      .def_property_readonly("data_ptr", &Tensor::data_ptr, "The address of the first byte")
      .def(
          "numpy", [](py::object self) { return self.cast<const Tensor&>().numpy(self); },
          "A zero-copy numpy view (BF16 as uint16 bit patterns, F8 as uint8, F4/F6 as flat bytes)")
      .def(
          "__array__",
          [](py::object self, py::object dtype, py::object) {
            py::object a = self.cast<const Tensor&>().numpy(self);
            return dtype.is_none() ? a : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack__", &Tensor::dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", &Tensor::dlpack_device)
      .def("__repr__", &Tensor::repr);

  py::class_<Plan>(m, "Plan", "A rank's validated load plan (built from headers only)")
      .def_property_readonly("ok", [](const Plan& p) { return p.plan().ok(); })
      .def_property_readonly(
          "problems",
          [](const Plan& p) {
            std::vector<std::string> out;
            for (const auto& x : p.plan().problems()) out.push_back(problem_line(x));
            return out;
          },
          "One line per problem, as `wmap plan` prints them (without the 'wmap: ' prefix)")
      .def_property_readonly(
          "problem_details",
          [](const Plan& p) {
            py::list out;
            for (const auto& x : p.plan().problems()) {
              out.append(py::make_tuple(std::string(wmap::problem_kind_name(x.kind)), x.key, x.message));
            }
            return out;
          },
          "(kind, key, message) per problem")
      .def_property_readonly("warnings", [](const Plan& p) { return p.plan().warnings(); })
      .def_property_readonly("unconsumed", [](const Plan& p) { return p.plan().unconsumed(); })
      .def_property_readonly("coverage", [](const Plan& p) { return p.plan().coverage(); })
      .def_property_readonly(
          "certificate", [](const Plan& p) { return p.plan().certificate(); },
          "The coverage certificate's one-line verdict, as `wmap plan` prints it after 'certificate: '")
      .def_property_readonly(
          "layout", [](const Plan& p) { return layout_dict(p.plan().layout()); },
          "The plan's layout as `wmap plan --json` writes it")
      .def_property_readonly("plan_id", [](const Plan& p) { return p.plan().plan_id(); })
      .def_property_readonly("catalog_id", [](const Plan& p) { return p.plan().catalog_id(); })
      .def_property_readonly("architecture", [](const Plan& p) { return p.prepared().architecture; })
      .def_property_readonly("plugin", [](const Plan& p) { return p.prepared().plugin->name; })
      .def_property_readonly("mapping",
                             [](const Plan& p) -> py::object {
                               if (p.prepared().mapping == nullptr) return py::none();
                               return py::str(p.prepared().mapping->file.string());
                             })
      .def_property_readonly("num_params", [](const Plan& p) { return p.plan().params().size(); })
      .def_property_readonly("bytes_to_load", [](const Plan& p) { return p.plan().bytes_to_load(); })
      .def_property_readonly("bytes_to_read", [](const Plan& p) { return p.plan().bytes_to_read(); })
      .def(
          "to_json", [](const Plan& p) { return p.plan().to_json(); }, "The text `wmap plan --json` prints")
      .def("refresh", &refresh_plan,
           "The same plan over the shards as they are now (refit: headers read again, no tensor data). Raises\n"
           "ValidationError naming the first tensor that moved when the headers changed: plan again then")
      .def(
          "check_against",
          [](const Plan& p, py::object params) {
            if (!py::hasattr(params, "items"))
              throw py::type_error("Plan.check_against: expected a mapping name -> (shape, dtype)");
            std::vector<wmap::ExpectedParam> expected;
            for (const auto& item : params.attr("items")()) {
              const auto kv = item.cast<py::tuple>();
              const auto sd = kv[1].cast<py::tuple>();
              wmap::ExpectedParam e;
              e.name = kv[0].cast<std::string>();
              for (const auto& d : sd[0]) e.shape.push_back(d.cast<uint64_t>());
              e.dtype = py::str(sd[1]);  // "torch.bfloat16", "bfloat16", "BF16"
              expected.push_back(std::move(e));
            }
            std::vector<std::string> out;
            for (const auto& x : wmap::check_expected_params(p.plan(), expected)) out.push_back(problem_line(x));
            return out;
          },
          py::arg("params"),
          "The plan against an engine's parameters, {name: (shape, dtype)} (dtype: a torch dtype or its name): one "
          "line\n"
          "per difference, both directions (as `wmap plan --expect`); empty when they agree")
      .def("__repr__", [](const Plan& p) {
        return "wmap.Plan(" + p.prepared().architecture + ", " + p.plan().layout().to_string() + ", " +
               (p.plan().ok() ? "ok" : std::to_string(p.plan().problems().size()) + " problem(s)") + ")";
      });

  const std::string common_doc =
      "Keywords (every entry): tp_size=1, tp_rank=0, ep_size=1, pp_size=1, pp_rank=0, pp_partition=None (layers per\n"
      "stage, e.g. [3, 2, 2]), mtp_layers=None, target='trtllm' (or 'vllm'),\n"
      "attention_dp=False, gpus_per_node=8, moe_backend=None; catalog=None, config=None (plan offline from a saved "
      "catalog),\n"
      "plugin_dir=None, mappings=None, quiet=False, remote=None (a dict of remote settings over the environment's:\n"
      "s3_endpoint, concurrency, retries, ...). load and load_into also take verify=False (True or 'read': SHA-256 of\n"
      "every shard this rank reads, each verified or the load refused before any read; 'full': every shard;\n"
      "'best-effort': what can be verified, the rest reported), manifest=None (sha256sum file) and digests=False\n"
      "(each parameter's XXH3-64: Tensor.digest, or the report's 'digests'). `source` is a checkpoint path, or a\n"
      "wmap.Plan (which fixes the checkpoint and the layout: it is loaded exactly as planned). Ctrl-C ends a call.";
  m.def("_load", &load,
        ("Loads one rank's parameters, as `wmap load`: validates the plan (an incomplete one raises\n"
         "ValidationError, its problems printed on stderr unless quiet), then loads. Returns\n"
         "({name: wmap.Tensor} in plan order, the load's report); wmap.load wraps them in a LoadResult. The GIL is\n"
         "released while loading.\n"
         "load(source, *, device='host' (or 'cuda', 'cuda:N'), cache=False, ...)\n" +
         common_doc)
            .c_str(),
        py::arg("source"));
  m.def(
      "cache_info",
      [] {
        const auto i = wmap::WeightCache::process().info();
        const auto limits = wmap::WeightCache::limits_from_env();
        py::dict d;
        d["entries"] = i.entries, d["hits"] = i.hits, d["misses"] = i.misses, d["healed"] = i.healed,
        d["evicted"] = i.evicted, d["bypassed"] = i.bypassed;
        d["bytes"] = i.bytes, d["last_healed"] = i.last_healed;
        d["max_entries"] = limits.max_entries;
        d["max_bytes"] =
            limits.max_bytes == UINT64_MAX ? py::object(py::none()) : py::object(py::int_(limits.max_bytes));
        return d;
      },
      "The weight cache's counters: entries, hits, misses, healed (dropped after an in-place change), evicted,\n"
      "bypassed (found but not made with the verification asked for), bytes held, last_healed (the parameters the last "
      "heal found changed), max_entries, max_bytes (None: no limit)");
  m.def(
      "cache_clear", [] { wmap::WeightCache::process().clear(); }, "Drops every weight-cache entry");
  m.def("load_into", &load_into,
        ("Writes one rank's parameters into the caller's tensors (a mapping name -> tensor exporting DLPack:\n"
         "torch, numpy; host or CUDA), as the engine's load_weights would: the tensors are checked against the\n"
         "plan first (every mismatch raised at once as ValidationError, nothing written), never reallocated;\n"
         "calling it again reloads them in place. Returns a report dict. The GIL is released while loading.\n"
         "load_into(source, params, *, ignore=[], ...)\n" +
         common_doc)
            .c_str(),
        py::arg("source"), py::arg("params"));
  m.def("plan", &make_plan,
        ("Builds and validates one rank's load plan from headers only (no tensor data is read). Plan problems\n"
         "are reported in Plan.problems (not raised); unusable input raises wmap.Error. plan(source=None, ...)\n" +
         common_doc)
            .c_str(),
        py::arg("source") = py::none());
  m.def("_inspect_json", &inspect_json, py::arg("path"));
}
