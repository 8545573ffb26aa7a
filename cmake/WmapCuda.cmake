# The CUDA backend (docs/cuda.md). WMAP_CUDA=AUTO builds it when check_language(CUDA) finds nvcc,
# ON requires it, OFF leaves the stub (`--device cuda:N` then says the build has no CUDA).
# Sets WMAP_CUDA_ENABLED.
set(WMAP_CUDA AUTO CACHE STRING "Build the CUDA device: AUTO (when nvcc is found), ON or OFF")
set_property(CACHE WMAP_CUDA PROPERTY STRINGS AUTO ON OFF)
set(WMAP_CUDA_ENABLED OFF)
if(NOT WMAP_CUDA STREQUAL "OFF")
  # CUDA 13 dropped the architecture CMake 3.25 would pick by default, so name one before the
  # compiler is probed: Hopper SASS plus PTX that newer GPUs JIT-compile. Override on the command line.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual" CACHE STRING "CUDA architectures to build for")
  endif()
  # The toolkit's usual place, for machines where nvcc is not on PATH.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(WMAP_CUDA_ENABLED ON)
  elseif(WMAP_CUDA STREQUAL "ON")
    message(FATAL_ERROR "WMAP_CUDA=ON but no CUDA compiler was found: set CUDACXX or CMAKE_CUDA_COMPILER to nvcc")
  endif()
endif()
message(STATUS "wmap: CUDA backend ${WMAP_CUDA_ENABLED} (WMAP_CUDA=${WMAP_CUDA})")
