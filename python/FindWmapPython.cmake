# Finds what the Python module needs: a Python 3 interpreter with its headers and pybind11
# (Debian's `pybind11-dev` / `python3-pybind11`). Sets WMAP_PYTHON_DEPS_FOUND; never fails the
# configure: without pybind11 the module is simply not built.
#
# The interpreter defaults to Debian's /usr/bin/python3 (the one pybind11, numpy and torch are
# installed for, and the one the other test suites use) rather than whatever `python3` comes
# first on PATH; pass -DPython3_EXECUTABLE=... to choose another.
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python interpreter the module is built for")
endif()
find_package(Python3 3.8 QUIET COMPONENTS Interpreter Development.Module)
set(WMAP_PYTHON_DEPS_FOUND OFF)
if(Python3_FOUND)
  # pybind11 uses the Python3 found above (its "new" FindPython mode).
  find_package(pybind11 2.6 CONFIG QUIET)
  if(pybind11_FOUND)
    set(WMAP_PYTHON_DEPS_FOUND ON)
  endif()
endif()
if(NOT WMAP_PYTHON_DEPS_FOUND)
  message(STATUS "wmap: Python module not built (needs Python 3 headers and pybind11: apt-get install pybind11-dev python3-pybind11)")
endif()
