# Finds every dependency from the system (never vendored) and records MYRIAD_HAVE_<X> flags
# for the configure-time summary. Required: OpenMP, OpenBLAS, spdlog, yaml-cpp, MPI.
# Optional: CUDA toolkit (+ cuBLAS, cuBLASLt, NCCL), Python + pybind11, GoogleTest.
#
# MYRIAD_GPU_ONLY (the GPU check's reduced build, scripts/gpu_check.sh): only what core, ops,
# the CUDA backend, its tests and the GPU benchmarks need — OpenMP, OpenBLAS, spdlog + fmt used
# header-only (no compiled library to carry), GoogleTest from an installed package or built from
# its source (MYRIAD_GTEST_SOURCE_DIR); no MPI, yaml-cpp, ICU, nlohmann-json or Python.

find_package(OpenMP REQUIRED COMPONENTS CXX)

# OpenBLAS: Debian ships a CMake config for the pthread flavour only; find the library and
# header directly so the OpenMP flavour (one thread pool with ours) is used when installed.
# The search uses CMake's own prefixes (CMAKE_PREFIX_PATH, OpenBLAS_ROOT, the system's, with
# CMAKE_LIBRARY_ARCHITECTURE's multiarch folders); the suffixes are where distributions put the
# OpenMP flavour (Debian: <arch>/openblas-openmp).
find_path(OPENBLAS_INCLUDE_DIR NAMES cblas.h HINTS ENV OpenBLAS_HOME
          PATH_SUFFIXES openblas-openmp ${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp openblas include)
find_library(OPENBLAS_LIBRARY NAMES openblas HINTS ENV OpenBLAS_HOME
             PATH_SUFFIXES openblas-openmp ${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp lib)
if(OPENBLAS_INCLUDE_DIR AND OPENBLAS_LIBRARY)
  set(MYRIAD_HAVE_OPENBLAS ON)
  add_library(myriad_openblas INTERFACE)
  target_include_directories(myriad_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
  target_link_libraries(myriad_openblas INTERFACE ${OPENBLAS_LIBRARY})
else()
  message(FATAL_ERROR "OpenBLAS not found (cblas.h / libopenblas); run scripts/setup.sh")
endif()

# myriad_spdlog: the logging dependency of myriad_core. The full build links the compiled
# spdlog; the GPU-only build includes spdlog and fmt as headers (nothing to load at run time).
add_library(myriad_spdlog INTERFACE)
if(MYRIAD_GPU_ONLY)
  find_path(MYRIAD_SPDLOG_INCLUDE_DIR spdlog/spdlog.h)
  find_path(MYRIAD_FMT_INCLUDE_DIR fmt/format.h)
  if(NOT MYRIAD_SPDLOG_INCLUDE_DIR OR NOT MYRIAD_FMT_INCLUDE_DIR)
    message(FATAL_ERROR "spdlog/fmt headers not found (spdlog/spdlog.h, fmt/format.h): add their prefix to "
                        "CMAKE_PREFIX_PATH (scripts/pack_gpu_deps.sh packs one)")
  endif()
  find_package(Threads REQUIRED)
  target_include_directories(myriad_spdlog INTERFACE ${MYRIAD_SPDLOG_INCLUDE_DIR} ${MYRIAD_FMT_INCLUDE_DIR})
  target_compile_definitions(myriad_spdlog INTERFACE SPDLOG_FMT_EXTERNAL FMT_HEADER_ONLY)
  target_link_libraries(myriad_spdlog INTERFACE Threads::Threads)
else()
  find_package(spdlog REQUIRED)
  target_link_libraries(myriad_spdlog INTERFACE spdlog::spdlog)
endif()

set(MYRIAD_HAVE_MPI OFF)
if(NOT MYRIAD_GPU_ONLY)
  find_package(yaml-cpp REQUIRED)
  # MPI (C bindings only): MpiCommunicator, MpiRuntime and the dist tests launched with mpiexec.
  find_package(MPI REQUIRED COMPONENTS C)
  set(MYRIAD_HAVE_MPI ${MPI_C_FOUND})
endif()

find_package(GTest)
set(MYRIAD_HAVE_GTEST ${GTest_FOUND})
if(NOT GTest_FOUND AND MYRIAD_GTEST_SOURCE_DIR)
  # GoogleTest from its source tree (Debian's /usr/src/googletest, carried to the GPU machine).
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory(${MYRIAD_GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  add_library(GTest::gtest ALIAS gtest)
  add_library(GTest::gtest_main ALIAS gtest_main)
  set(MYRIAD_HAVE_GTEST ON)
endif()

# Python + pybind11: pybind11's CMake config is located through the interpreter when it was
# installed with pip.
set(MYRIAD_HAVE_PYTHON OFF)
if(NOT MYRIAD_GPU_ONLY)
  find_package(Python3 COMPONENTS Interpreter Development.Module)
endif()
if(Python3_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -m pybind11 --cmakedir
                  OUTPUT_VARIABLE MYRIAD_PYBIND11_DIR OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(MYRIAD_PYBIND11_DIR)
    set(pybind11_DIR ${MYRIAD_PYBIND11_DIR})
  endif()
  set(PYBIND11_FINDPYTHON ON)
  set(Python_EXECUTABLE ${Python3_EXECUTABLE})
  find_package(pybind11 CONFIG QUIET)
  if(pybind11_FOUND)
    set(MYRIAD_HAVE_PYTHON ON)
  endif()
endif()

# CUDA: nvcc from CMAKE_CUDA_COMPILER / $CUDACXX, else found on the PATH or under $CUDA_HOME,
# $CUDA_PATH or CUDAToolkit_ROOT (then NVIDIA's default prefix, /usr/local/cuda, as the last hint);
# the toolkit's libraries through CMake's FindCUDAToolkit. NCCL's library may sit in the
# toolkit's lib folder. The architectures to build for: CMAKE_CUDA_ARCHITECTURES (or $CUDAARCHS)
# as the user gave them, recorded before enable_language(CUDA) fills in the compiler's default
# (kernels/CMakeLists.txt turns them into -gencode flags).
set(MYRIAD_HAVE_CUDA OFF)
set(MYRIAD_HAVE_NCCL OFF)
if(MYRIAD_ENABLE_CUDA)
  # A value CMake itself chose on an earlier configure (recorded below) is not the user's.
  if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL
                                          "${MYRIAD_CMAKE_CHOSEN_CUDA_ARCHITECTURES}")
    set(MYRIAD_USER_CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
  elseif(DEFINED ENV{CUDAARCHS})
    set(MYRIAD_USER_CUDA_ARCHITECTURES "$ENV{CUDAARCHS}")
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(MYRIAD_NVCC nvcc HINTS ENV CUDA_HOME ENV CUDA_PATH ${CUDAToolkit_ROOT} PATH_SUFFIXES bin
                 PATHS /usr/local/cuda/bin)
    if(MYRIAD_NVCC)
      set(CMAKE_CUDA_COMPILER ${MYRIAD_NVCC})
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    if(NOT DEFINED MYRIAD_USER_CUDA_ARCHITECTURES)
      set(MYRIAD_CMAKE_CHOSEN_CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}" CACHE INTERNAL
          "the architectures enable_language(CUDA) chose when the user gave none")
    endif()
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(MYRIAD_HAVE_CUDA ON)
      # MYRIAD_NCCL_ROOT / $NCCL_HOME: an NCCL outside the toolkit, e.g. the nvidia-nccl wheel's
      # folder (which ships only libnccl.so.2, hence the second name).
      set(MYRIAD_NCCL_ROOT "$ENV{NCCL_HOME}" CACHE PATH "NCCL install folder when not in the CUDA toolkit")
      find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${MYRIAD_NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS}
                ${CUDAToolkit_LIBRARY_ROOT}/include)
      find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${MYRIAD_NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_ROOT}/lib
                   ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64)
      if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
        set(MYRIAD_HAVE_NCCL ON)
      endif()
      # cuDNN (the toolkit's, or MYRIAD_CUDNN_ROOT / $CUDNN_HOME, e.g. the nvidia-cudnn wheel's
      # folder) and the header-only cuDNN frontend (MYRIAD_CUDNN_FRONTEND_ROOT / $CUDNN_FRONTEND_HOME;
      # scripts/setup.sh puts the pinned release's headers in /usr/local/lib/myriad-deps;
      # scripts/pack_gpu_deps.sh carries them as .gpu-deps/cudnn-frontend): the fused attention of
      # src/cuda/cudnn (cuda/cudnn_attention.h). Optional: without them the backend runs its own kernels.
      set(MYRIAD_CUDNN_ROOT "$ENV{CUDNN_HOME}" CACHE PATH "cuDNN install folder when not in the CUDA toolkit")
      set(MYRIAD_CUDNN_FRONTEND_ROOT "$ENV{CUDNN_FRONTEND_HOME}" CACHE PATH "cuDNN frontend folder (include/)")
      find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${MYRIAD_CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
      find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${MYRIAD_CUDNN_ROOT}/lib ${MYRIAD_CUDNN_ROOT}/lib64
                   ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64)
      find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${MYRIAD_CUDNN_FRONTEND_ROOT}/include
                ${PROJECT_SOURCE_DIR}/.gpu-deps/cudnn-frontend/include /usr/local/lib/myriad-deps/cudnn-frontend/include)
      set(MYRIAD_HAVE_CUDNN OFF)
      if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY AND CUDNN_FRONTEND_INCLUDE_DIR)
        set(MYRIAD_HAVE_CUDNN ON)
      endif()
    endif()
  endif()
endif()

if(MYRIAD_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag("-march=native" MYRIAD_HAS_MARCH_NATIVE)
  check_cxx_compiler_flag("-mprefer-vector-width=512" MYRIAD_HAS_PREFER_VECTOR_WIDTH_512)
endif()
