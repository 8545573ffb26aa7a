// _wmap_fake_cuda: a test-only extension that puts the checking fake CUDA runtime
// (tests/device/fake_cuda_seam.h) behind libwmap's CUDA device for this process
// (cuda::set_process_runtime), so the Python module's CUDA path (device="cuda", DLPack export) is
// tested on machines without a GPU. Never installed.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "cuda_seam.h"
#include "fake_cuda_seam.h"

namespace py = pybind11;

namespace {
std::shared_ptr<wmap::test::FakeCudaRuntime> g_fake;
}  // namespace

PYBIND11_MODULE(_wmap_fake_cuda, m) {
  m.def(
      "install",
      [](int devices) {
        wmap::test::FakeCudaRuntime::Options o;
        o.devices = devices;
        g_fake = std::make_shared<wmap::test::FakeCudaRuntime>(o);
        wmap::cuda::set_process_runtime(g_fake);
      },
      py::arg("devices") = 1);
  m.def("uninstall", [] { wmap::cuda::set_process_runtime(nullptr); });
  m.def("violations", [] { return g_fake ? g_fake->violations() : std::vector<std::string>{}; });
  m.def("async_copies", [] { return g_fake ? g_fake->counts().async_copies : 0; });
}
