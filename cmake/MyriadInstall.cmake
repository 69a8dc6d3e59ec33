# Install rules and the CMake package. `cmake --install <build> --prefix P` puts the public
# headers (P/include/myriad), the static library of every layer, the command-line tools and
# P/lib/cmake/myriad (myriadConfig.cmake, its version file, the exported targets), so that a C++
# program does
#   find_package(myriad 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE myriad::train)     # or myriad::core, myriad::ops, ...
# Targets: myriad::core, ops, nn, distributed, optim, parallel, cuda (with the CUDA backend), config, data,
# train (full build); myriad::openblas and myriad::spdlog stand for those two dependencies. The
# other dependencies are found again by myriadConfig.cmake from the system (the packages this
# build used), never bundled. examples/find_package builds against an installed tree (scripts/test.sh).
# Install components: "development" (all of the above) and "python" (what a `pip install .` wheel
# holds: the extension, python/CMakeLists.txt, and myriad-data as a command of the environment).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MYRIAD_EXPORTED_LIBRARIES myriad_core myriad_ops myriad_nn myriad_distributed myriad_optim myriad_parallel)
if(MYRIAD_HAVE_CUDA)
  list(APPEND MYRIAD_EXPORTED_LIBRARIES myriad_cuda)
endif()
if(NOT MYRIAD_GPU_ONLY)
  list(APPEND MYRIAD_EXPORTED_LIBRARIES myriad_config myriad_data myriad_train)
endif()
foreach(target IN LISTS MYRIAD_EXPORTED_LIBRARIES ITEMS myriad_openblas myriad_spdlog)
  string(REGEX REPLACE "^myriad_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

set(MYRIAD_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/myriad)
install(TARGETS ${MYRIAD_EXPORTED_LIBRARIES} myriad_openblas myriad_spdlog
        EXPORT myriadTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/myriad DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT development)
install(EXPORT myriadTargets NAMESPACE myriad:: DESTINATION ${MYRIAD_CMAKE_PACKAGE_DIR} COMPONENT development)
if(NOT MYRIAD_GPU_ONLY)
  install(TARGETS myriad-data myriad-serve myriad_tokenize RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT development)
  # A wheel's scripts folder (scikit-build-core sets it; install rules only, so the build is the same).
  if(SKBUILD_SCRIPTS_DIR)
    install(TARGETS myriad-data myriad-serve RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR} COMPONENT python)
  endif()
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/myriadConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/myriadConfig.cmake
                              INSTALL_DESTINATION ${MYRIAD_CMAKE_PACKAGE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/myriadConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/myriadConfig.cmake ${PROJECT_BINARY_DIR}/myriadConfigVersion.cmake
        DESTINATION ${MYRIAD_CMAKE_PACKAGE_DIR} COMPONENT development)
