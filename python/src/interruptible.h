#pragma once
// Long calls that Ctrl-C can end (review F5). The work runs on a helper thread, without the GIL;
// the calling thread waits in steps of a tenth of a second and runs Python's signal handlers
// between them. A KeyboardInterrupt cancels the session's work (LoaderSession::cancel: remote
// transfers within a tenth of a second, the executor's workers at their next unit), waits for the
// helper to return, and is raised. The work must not touch Python objects.

#include <pybind11/pybind11.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "wmap/loader/loader.h"

namespace wmap::python {

namespace py = pybind11;

template <class Fn>
auto interruptible(const wmap::LoaderSession& session, Fn&& fn) -> decltype(fn()) {
  using Result = decltype(fn());
  std::optional<Result> result;
  std::exception_ptr error;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread worker([&] {
    try {
      result.emplace(fn());
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  });
  bool interrupted = false;
  for (;;) {
    {
      py::gil_scoped_release nogil;
      std::unique_lock lock(mu);
      if (cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return done; })) break;
    }
    if (!interrupted && PyErr_CheckSignals() != 0) {
      interrupted = true;  // the exception stays set until the helper has returned
      session.cancel();
    }
  }
  {
    py::gil_scoped_release nogil;
    worker.join();
  }
  if (interrupted) {
    session.clear_cancel();
    throw py::error_already_set();
  }
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

}  // namespace wmap::python
