#include "py_errors.h"

#include <pybind11/stl.h>

#include "wmap/exec/executor.h"

namespace wmap::python {
namespace {

PyObject* g_error = nullptr;             // wmap.Error
PyObject* g_malformed_error = nullptr;   // wmap.MalformedInputError
PyObject* g_validation_error = nullptr;  // wmap.ValidationError

py::str message_str(const char* what) {
  const std::string s(what);
  PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (u == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(u);
}

py::object make_error(PyObject* cls, const char* what, py::object code, int exit_code) {
  py::object type = py::reinterpret_borrow<py::object>(cls);
  py::object exc = type(message_str(what));
  exc.attr("code") = std::move(code);
  exc.attr("exit_code") = exit_code;
  return exc;
}

void translate_exception(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const wmap::Error& e) {
    if (e.code() == wmap::ErrorCode::kCancelled) {
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
      return;
    }
    const int rc = wmap::exit_code_for(e.code());
    PyObject* cls = rc == 2 ? g_malformed_error : g_validation_error;
    py::object exc = make_error(cls, e.what(), py::str(std::string(wmap::error_code_name(e.code()))), rc);
    if (const auto* partial = dynamic_cast<const wmap::PartialWriteError*>(&e)) {
      exc.attr("written") = py::cast(partial->written());
    }
    PyErr_SetObject(cls, exc.ptr());
  } catch (const py::error_already_set&) {
    throw;
  } catch (const py::builtin_exception&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;  // MemoryError
  } catch (const std::exception& e) {
    // Not a wmap::Error (e.g. a plugin throwing something else): the CLI reports it with exit 1.
    PyErr_SetObject(g_error, make_error(g_error, e.what(), py::none(), 1).ptr());
  }
}

PyObject* new_exception(py::module_& m, const char* name, PyObject* base, const char* doc) {
  const std::string qualified = std::string("wmap.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(cls));
  return cls;
}

}  // namespace

[[noreturn]] void throw_error(wmap::ErrorCode code, const std::string& message) { throw wmap::Error(code, message); }

void register_exceptions(py::module_& m) {
  g_error = new_exception(m, "Error", PyExc_Exception,
                          "A wmap failure; str(e) is the C++ message unchanged. Attributes: code (the wmap "
                          "error code name, e.g. 'NotFound'), exit_code (what the CLI would exit with); after a "
                          "failed load_into, written (the destinations it had written).");
  g_malformed_error = new_exception(m, "MalformedInputError", g_error,
                                    "Bad arguments or unreadable/malformed input (the CLI's exit code 2).");
  g_validation_error = new_exception(m, "ValidationError", g_error,
                                     "A well-formed input that fails validation or loading (the CLI's exit code 1).");
  py::register_exception_translator(&translate_exception);
}

}  // namespace wmap::python
