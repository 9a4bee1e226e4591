# dtrain_layer(NAME DIR <dir> [DEPS ...] [EXCLUDE_DIRS ...]): one static library per layer,
# built from the .cc files under DIR (new files are picked up without editing CMake).
function(dtrain_layer name)
  cmake_parse_arguments(ARG "" "DIR" "DEPS;EXCLUDE_DIRS" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS "${ARG_DIR}/*.cc")
  foreach(ex ${ARG_EXCLUDE_DIRS})
    list(FILTER sources EXCLUDE REGEX "${ARG_DIR}/${ex}/")
  endforeach()
  if(NOT sources)  # a layer with headers only: still a library, so layers link uniformly
    set(sources ${PROJECT_BINARY_DIR}/generated/empty_layer.cc)
    file(WRITE ${sources} "// A layer with headers only.\n")
  endif()
  add_library(${name} STATIC ${sources})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
                             $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_options(${name} PRIVATE ${DTRAIN_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# The test binaries' precompiled headers: GoogleTest and the standard headers nearly every test
# file includes, parsed once (by test_core; the other test binaries, whose flags are the same by
# construction, reuse it) instead of once per file, which took about 2 s of each test file's
# compile: the test binaries build about 19% faster. The libraries have none: GCC 12 then reports
# -Warray-bounds false positives from inlined std::string code that it keeps quiet without one.
# -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON turns them off.
set(DTRAIN_PRECOMPILED_TESTS <gtest/gtest.h> <algorithm> <cmath> <cstdint> <functional> <map>
                             <memory> <sstream> <stdexcept> <string> <thread> <vector>)

# dtrain_test_precompiled(TARGET): the test binary TARGET uses test_core's precompiled headers.
function(dtrain_test_precompiled target)
  if(TARGET test_core AND NOT target STREQUAL test_core)
    target_precompile_headers(${target} REUSE_FROM test_core)
  else()
    target_precompile_headers(${target} PRIVATE ${DTRAIN_PRECOMPILED_TESTS})
  endif()
endfunction()

# dtrain_test_suite(NAME DIR <dir> DEPS ...): one GoogleTest binary per tests/ folder.
function(dtrain_test_suite name)
  cmake_parse_arguments(ARG "" "DIR" "DEPS;LABELS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS "${ARG_DIR}/*_test.cc")
  if(NOT sources)
    return()
  endif()
  add_executable(${name} ${sources})
  set_property(GLOBAL APPEND PROPERTY DTRAIN_TEST_BINARIES ${name})
  target_compile_options(${name} PRIVATE ${DTRAIN_WARNINGS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  dtrain_test_precompiled(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}"
                       TIMEOUT 300)
endfunction()
