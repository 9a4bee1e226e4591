# `cmake --install build --prefix P`: the dtrain command, the layers as static libraries, every
# header (dtrain/dtrain.h is the user API; the rest are what it includes and the implementer's
# contracts), the default corpus under share/dtrain, a CMake package exporting dtrain::dtrain
# and a pkg-config file.
include(CMakePackageConfigHelpers)

set(dtrain_layers dtrain_core dtrain_comm dtrain_model dtrain_optim dtrain_machine dtrain_cost dtrain_schedule dtrain_clock dtrain_plan dtrain_trace
    dtrain_parallel dtrain_data dtrain_checkpoint dtrain_formats dtrain_infer dtrain_calibrate dtrain_engine dtrain_report dtrain_run)
install(TARGETS ${dtrain_layers} dtrain_lib EXPORT dtrainTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS dtrain RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/dtrain/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtrain
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/generated/dtrain/config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtrain)
install(FILES ${PROJECT_SOURCE_DIR}/data/corpus.txt ${PROJECT_SOURCE_DIR}/LICENSE
        DESTINATION ${CMAKE_INSTALL_DATADIR}/dtrain)

set(dtrain_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)
install(EXPORT dtrainTargets NAMESPACE dtrain:: DESTINATION ${dtrain_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dtrainConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/dtrainConfig.cmake
                              INSTALL_DESTINATION ${dtrain_cmake_dir})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtrainConfig.cmake ${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
        DESTINATION ${dtrain_cmake_dir})

# pkg-config: the layers are static, so their dependencies are listed for the link as well.
set(dtrain_pc_requires "openblas nlohmann_json sentencepiece")
set(dtrain_pc_libs "-ldtrain_infer -ldtrain_calibrate -ldtrain_run -ldtrain_report -ldtrain_engine -ldtrain_formats -ldtrain_checkpoint -ldtrain_data -ldtrain_trace -ldtrain_parallel -ldtrain_plan -ldtrain_clock -ldtrain_schedule -ldtrain_cost -ldtrain_machine -ldtrain_optim")
string(APPEND dtrain_pc_libs " -ldtrain_model -ldtrain_comm -ldtrain_core")
if(DTRAIN_HAVE_MPI)
  string(APPEND dtrain_pc_requires " ompi-c")
endif()
# ${CMAKE_DL_LIBS}: core's malloc_library looks jemalloc's mallctl up by name (libc itself on
# glibc 2.34 and later; -ldl still links there).
set(dtrain_pc_extra "-pthread")
foreach(lib ${CMAKE_DL_LIBS})
  string(APPEND dtrain_pc_extra " -l${lib}")
endforeach()
if(DTRAIN_HAVE_DNNL)
  string(APPEND dtrain_pc_extra " -ldnnl -fopenmp")
endif()
# Relocatable: the prefix is found from the .pc file's own place, so `--prefix P` at install
# time (after configuring with another prefix) still gives the right paths.
file(RELATIVE_PATH dtrain_pc_to_prefix /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/dtrain.pc.in ${PROJECT_BINARY_DIR}/dtrain.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dtrain.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
