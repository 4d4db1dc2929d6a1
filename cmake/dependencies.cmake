# Finds troupe's third-party libraries and exposes them as imported targets.
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(doctest REQUIRED)
find_package(CLI11 CONFIG REQUIRED)  # Debian's libcli11-dev: the troupe command line

# CAF 0.17 ships no CMake config: build imported targets from its headers and libraries.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(caf::core UNKNOWN IMPORTED)
set_target_properties(caf::core PROPERTIES IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}" INTERFACE_LINK_LIBRARIES Threads::Threads)
add_library(caf::io UNKNOWN IMPORTED)
set_target_properties(caf::io PROPERTIES IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
  INTERFACE_LINK_LIBRARIES caf::core)

# OpenBLAS (Debian's libopenblas-dev puts cblas.h on the default include path).
find_library(OPENBLAS_LIBRARY NAMES openblas REQUIRED)
find_path(CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES x86_64-linux-gnu/openblas-pthread REQUIRED)
add_library(troupe::blas UNKNOWN IMPORTED)
set_target_properties(troupe::blas PROPERTIES IMPORTED_LOCATION "${OPENBLAS_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${CBLAS_INCLUDE_DIR}")

# CUDA is optional: on when nvcc is found (AUTO) and never required for the CPU build.
set(TROUPE_HAVE_CUDA OFF)
if(NOT TROUPE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)   # "native" fails on machines without a GPU
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(TROUPE_HAVE_CUDA ON)
  elseif(TROUPE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TROUPE_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "troupe: CUDA backend ${TROUPE_HAVE_CUDA}")

# UCX (Debian's libucx-dev): the UCP library for the ucx transport, found through pkg-config.
find_package(PkgConfig REQUIRED)
pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
add_library(troupe::ucx ALIAS PkgConfig::UCX)

# SentencePiece (Debian's libsentencepiece-dev): the tokenizer a text or JSON-lines
# data source loads or trains (actors/data/tokenizer.cpp), found through pkg-config.
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
add_library(troupe::sentencepiece ALIAS PkgConfig::SENTENCEPIECE)

# Google Highway (Debian's libhwy-dev): the CPU kernels are written once and compiled
# for every SIMD target; the best one the processor supports is chosen at run time.
pkg_check_modules(HWY REQUIRED IMPORTED_TARGET libhwy)
add_library(troupe::hwy ALIAS PkgConfig::HWY)
