# Every dependency comes from a Debian package that scripts/setup installs.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)  # libopenblas-dev
find_package(CLI11 CONFIG REQUIRED)                             # libcli11-dev
find_package(nlohmann_json 3.10 REQUIRED)                       # nlohmann-json3-dev
# Subword tokenizers (`dtrain tokenize`, `dtrain sample --tokenizer`); linked PRIVATE into the
# train layer, kept out of its public headers.
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)  # libsentencepiece-dev
if(DTRAIN_TESTS)
  find_package(GTest REQUIRED)                                  # libgtest-dev
endif()

# dtrain calls MPI's C API from C++ code, so it asks for MPI's CXX component: the component of the
# language that includes mpi.h. The C component would need C enabled in every project that
# links dtrain (FindMPI compiles a C test program for it), which a C++ consumer has no reason
# to do. MPI_CXX_SKIP_MPICXX keeps the deprecated MPI-2 C++ bindings out.
set(DTRAIN_HAVE_MPI 0)
if(NOT DTRAIN_WITH_MPI STREQUAL "OFF")
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Leave out the MPI-2 C++ bindings (dtrain uses the C API)")
  if(DTRAIN_WITH_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS CXX)                   # libopenmpi-dev
  else()
    find_package(MPI QUIET COMPONENTS CXX)
  endif()
  if(MPI_CXX_FOUND)
    set(DTRAIN_HAVE_MPI 1)
  endif()
endif()
message(STATUS "dtrain: MPI backend ${DTRAIN_HAVE_MPI}")

# oneDNN (libdnnl-dev): bf16 matrix products with AVX512-BF16 / AMX kernels, what PyTorch uses
# on CPU; OpenBLAS 0.3.21 has no sbgemm. Without it, --precision bf16 rounds the operands to bf16
# and multiplies them with cblas_sgemm (the same products, at fp32 speed).
set(DTRAIN_HAVE_DNNL 0)
if(NOT DTRAIN_WITH_DNNL STREQUAL "OFF")
  if(DTRAIN_WITH_DNNL STREQUAL "ON")
    find_package(dnnl CONFIG REQUIRED)
  else()
    find_package(dnnl CONFIG QUIET)
  endif()
  if(dnnl_FOUND)
    set(DTRAIN_HAVE_DNNL 1)
    # oneDNN's CPU threads are OpenMP's: each rank thread sets its own OpenMP thread count.
    find_package(OpenMP REQUIRED COMPONENTS CXX)
  endif()
endif()
message(STATUS "dtrain: oneDNN bf16 GEMM ${DTRAIN_HAVE_DNNL}")

# jemalloc (libjemalloc-dev) for the `dtrain` executable (options.cmake's DTRAIN_ALLOCATOR).
set(DTRAIN_HAVE_JEMALLOC 0)
if(DTRAIN_ALLOCATOR STREQUAL "jemalloc")
  if(DTRAIN_SANITIZE OR DTRAIN_FUZZ)
    message(FATAL_ERROR "DTRAIN_ALLOCATOR=jemalloc cannot serve a sanitized build: the sanitizers "
                        "replace malloc themselves (use system or AUTO)")
  endif()
  pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)
  set(DTRAIN_HAVE_JEMALLOC 1)
elseif(DTRAIN_ALLOCATOR STREQUAL "AUTO")
  if(NOT DTRAIN_SANITIZE AND NOT DTRAIN_FUZZ)
    pkg_check_modules(JEMALLOC QUIET IMPORTED_TARGET jemalloc)
    if(JEMALLOC_FOUND)
      set(DTRAIN_HAVE_JEMALLOC 1)
    endif()
  endif()
elseif(NOT DTRAIN_ALLOCATOR STREQUAL "system")
  message(FATAL_ERROR "DTRAIN_ALLOCATOR must be jemalloc, system or AUTO (got '${DTRAIN_ALLOCATOR}')")
endif()
message(STATUS "dtrain: jemalloc for the dtrain executable ${DTRAIN_HAVE_JEMALLOC}")
