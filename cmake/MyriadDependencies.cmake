# Finds every dependency from the system (never vendored) and records MYRIAD_HAVE_<X> flags
# for the configure-time summary. Required: OpenMP, OpenBLAS, spdlog, yaml-cpp, MPI.
# Optional: CUDA toolkit (+ cuBLAS, cuBLASLt, NCCL), Python + pybind11, GoogleTest.

find_package(OpenMP REQUIRED COMPONENTS CXX)

# OpenBLAS: Debian ships a CMake config for the pthread flavour only; find the library and
# header directly so the OpenMP flavour (one thread pool with ours) is used when installed.
find_path(OPENBLAS_INCLUDE_DIR NAMES cblas.h PATH_SUFFIXES openblas openblas-openmp x86_64-linux-gnu/openblas-openmp
          PATHS /usr/include /usr/include/x86_64-linux-gnu/openblas-openmp)
find_library(OPENBLAS_LIBRARY NAMES openblas PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/x86_64-linux-gnu)
if(OPENBLAS_INCLUDE_DIR AND OPENBLAS_LIBRARY)
  set(MYRIAD_HAVE_OPENBLAS ON)
  add_library(myriad_openblas INTERFACE)
  target_include_directories(myriad_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
  target_link_libraries(myriad_openblas INTERFACE ${OPENBLAS_LIBRARY})
else()
  message(FATAL_ERROR "OpenBLAS not found (cblas.h / libopenblas); run scripts/setup.sh")
endif()

find_package(spdlog REQUIRED)
find_package(yaml-cpp REQUIRED)
# MPI (C bindings only): MpiCommunicator, MpiRuntime and the dist tests launched with mpiexec.
find_package(MPI REQUIRED COMPONENTS C)
set(MYRIAD_HAVE_MPI ${MPI_C_FOUND})

find_package(GTest)
set(MYRIAD_HAVE_GTEST ${GTest_FOUND})

# Python + pybind11: pybind11's CMake config is located through the interpreter when it was
# installed with pip.
find_package(Python3 COMPONENTS Interpreter Development.Module)
set(MYRIAD_HAVE_PYTHON OFF)
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

# CUDA: the toolkit in its standard location; NCCL's library sits in the toolkit's lib folder.
set(MYRIAD_HAVE_CUDA OFF)
set(MYRIAD_HAVE_NCCL OFF)
if(MYRIAD_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(MYRIAD_HAVE_CUDA ON)
      find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
      find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR}
                   ${CUDAToolkit_LIBRARY_ROOT}/lib64)
      if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
        set(MYRIAD_HAVE_NCCL ON)
      endif()
    endif()
  endif()
endif()

if(MYRIAD_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag("-march=native" MYRIAD_HAS_MARCH_NATIVE)
endif()
