# Build options. Feature flags are always defined as 0/1 in the generated config header.
option(DTRAIN_TESTS "Build the GoogleTest suite" ON)
option(DTRAIN_BENCHMARKS "Build the benchmark library used by `dtrain bench`" ON)
option(DTRAIN_WERROR "Treat warnings as errors (scripts and CI turn it on)" OFF)
option(DTRAIN_NATIVE "Compile for this machine's CPU (-march=native)" ON)
set(DTRAIN_WITH_MPI "AUTO" CACHE STRING "Build the OpenMPI backend: ON, OFF or AUTO (if found)")
set(DTRAIN_WITH_DNNL "AUTO" CACHE STRING "Use oneDNN for bf16 GEMM: ON, OFF or AUTO (if found)")
set(DTRAIN_SANITIZE "" CACHE STRING "Sanitizers: empty, 'address,undefined' or 'thread'")

set(DTRAIN_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers)
if(DTRAIN_WERROR)
  list(APPEND DTRAIN_WARNINGS -Werror)
endif()
if(DTRAIN_NATIVE)
  add_compile_options(-march=native)
endif()
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
