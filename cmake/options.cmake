# Build options. Feature flags are always defined as 0/1 in the generated config header.
# Tests and benchmarks are dtrain's own: a project that adds dtrain with add_subdirectory or
# FetchContent builds neither unless it asks.
option(DTRAIN_TESTS "Build the GoogleTest suite" ${PROJECT_IS_TOP_LEVEL})
option(DTRAIN_BENCHMARKS "Build the benchmark library used by `dtrain bench`" ${PROJECT_IS_TOP_LEVEL})
set(DTRAIN_PYTHON "AUTO" CACHE STRING
    "Build the Python module (pybind11): ON, OFF or AUTO (if pybind11 and Python are found)")
option(DTRAIN_WERROR "Treat warnings as errors (scripts and CI turn it on)" OFF)
# Portable by default: the baseline x86-64 build runs on any machine of the distribution's
# architecture, and the hot loops pick AVX2/AVX-512 at run time (core/cpu_dispatch.h); OpenBLAS
# and oneDNN dispatch their own kernels. DTRAIN_NATIVE=ON compiles everything for this machine.
option(DTRAIN_NATIVE "Compile for this machine's CPU (-march=native): faster here, may crash elsewhere" OFF)
set(DTRAIN_WITH_MPI "AUTO" CACHE STRING "Build the OpenMPI backend: ON, OFF or AUTO (if found)")
set(DTRAIN_WITH_DNNL "AUTO" CACHE STRING "Use oneDNN for bf16 GEMM: ON, OFF or AUTO (if found)")
# The `dtrain` executable's malloc (the libraries and the Python module keep their process's):
# jemalloc keeps freed memory for reuse, so the engine's per-micro-batch buffers (activations,
# pipeline messages, ZB-H1's weight-gradient stashes, bf16 ZeRO's reduce pieces) do not fault in
# fresh pages every step. AUTO: jemalloc when found, except under sanitizers (which bring their
# own malloc).
set(DTRAIN_ALLOCATOR "AUTO" CACHE STRING "The dtrain executable's malloc: jemalloc, system or AUTO")
set(DTRAIN_SANITIZE "" CACHE STRING "Sanitizers: empty, 'address,undefined' or 'thread'")

set(DTRAIN_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers)
if(DTRAIN_WERROR)
  list(APPEND DTRAIN_WARNINGS -Werror)
endif()
if(DTRAIN_NATIVE)
  add_compile_options(-march=native)
  add_compile_definitions(DTRAIN_NATIVE_BUILD=1)
endif()
# Position-independent code: the static layers link into the Python module (a shared object)
# as well as into the executable.
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
if(DTRAIN_SANITIZE)
  # -fno-sanitize-recover: undefined behaviour aborts the test instead of printing and going on;
  # -g1: line numbers in reports at little build cost; -O1 (after Release's -O3, so it wins):
  # the level the sanitizers recommend, and instrumented -O3 builds are far slower to compile.
  add_compile_options(-fsanitize=${DTRAIN_SANITIZE} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer -g1 -O1)
  add_link_options(-fsanitize=${DTRAIN_SANITIZE} -fno-sanitize-recover=all)
endif()
# libFuzzer targets under fuzz/ (scripts/fuzz): clang only, each target built with
# -fsanitize=fuzzer,address,undefined; the library layers get the sanitizer flags too.
option(DTRAIN_FUZZ "Build the libFuzzer targets under fuzz/ (needs clang)" OFF)
if(DTRAIN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DTRAIN_FUZZ needs clang (CMAKE_CXX_COMPILER=clang++), not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(DTRAIN_SANITIZE)
    message(FATAL_ERROR "DTRAIN_FUZZ brings its own sanitizers; leave DTRAIN_SANITIZE empty")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer -g1 -O1)
  add_link_options(-fsanitize=address,undefined)
endif()
