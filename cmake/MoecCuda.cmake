# MOEC_CUDA: the runtime's CUDA backend (NCCL communicator, CUDA kernels, GPU
# tests and benchmarks). On by default when nvcc and NCCL are both found; the
# CPU-only build does not need either. Included from the top-level
# CMakeLists.txt because enable_language(CUDA) must run in a directory that
# encloses every target linking CUDA code (runtime/, test/, bench/).
#
# Architectures: CMAKE_CUDA_ARCHITECTURES defaults to 90 (H100/H200), which
# keeps nvcc builds short; add others with e.g.
#   -DCMAKE_CUDA_ARCHITECTURES="80;90"     (A100 and H100/H200)
#   -DCMAKE_CUDA_ARCHITECTURES=native      (whatever GPU the build machine has)
include(CheckLanguage)

find_program(MOEC_NVCC nvcc PATHS /usr/local/cuda/bin)
find_path(MOEC_NCCL_INCLUDE_DIR nccl.h
          HINTS ${MOEC_NCCL_ROOT} ENV NCCL_HOME /usr/local/cuda
          PATH_SUFFIXES include)
find_library(MOEC_NCCL_LIBRARY nccl
             HINTS ${MOEC_NCCL_ROOT} ENV NCCL_HOME /usr/local/cuda
             PATH_SUFFIXES lib64 lib)
# Sanitizer and fuzzing builds instrument host code only; they leave the CUDA
# backend off unless asked for.
if(MOEC_NVCC AND MOEC_NCCL_INCLUDE_DIR AND MOEC_NCCL_LIBRARY
   AND NOT MOEC_SANITIZE AND NOT MOEC_FUZZ)
  set(MOEC_CUDA_DEFAULT ON)
else()
  set(MOEC_CUDA_DEFAULT OFF)
endif()
option(MOEC_CUDA "Build the runtime's CUDA backend (needs nvcc and NCCL)"
       ${MOEC_CUDA_DEFAULT})

if(MOEC_CUDA)
  if(NOT MOEC_NVCC OR NOT MOEC_NCCL_INCLUDE_DIR OR NOT MOEC_NCCL_LIBRARY)
    message(FATAL_ERROR "MOEC_CUDA=ON needs nvcc (found: '${MOEC_NVCC}') and "
            "NCCL (nccl.h: '${MOEC_NCCL_INCLUDE_DIR}', libnccl: "
            "'${MOEC_NCCL_LIBRARY}'); set MOEC_NCCL_ROOT or configure with "
            "-DMOEC_CUDA=OFF")
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${MOEC_NVCC})
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  add_library(MoecNccl INTERFACE)
  target_include_directories(MoecNccl SYSTEM INTERFACE ${MOEC_NCCL_INCLUDE_DIR})
  target_link_libraries(MoecNccl INTERFACE ${MOEC_NCCL_LIBRARY})
  message(STATUS "MOEC_CUDA: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
          "architectures ${CMAKE_CUDA_ARCHITECTURES}, NCCL ${MOEC_NCCL_LIBRARY})")
else()
  message(STATUS "MOEC_CUDA: CUDA backend OFF (nvcc: '${MOEC_NVCC}', NCCL: "
          "'${MOEC_NCCL_LIBRARY}'); the CPU runtime is built alone")
endif()

# nvcc rejects the host compiler's warning flags that the top level adds to
# every target (-Wall, ...): keep a target's directory-level options for C++
# sources only, and pass the warnings to the host compiler of .cu files.
function(moec_cuda_target_flags target)
  get_target_property(Opts ${target} COMPILE_OPTIONS)
  if(NOT Opts)
    return()
  endif()
  set(Fixed)
  foreach(Opt ${Opts})
    list(APPEND Fixed "$<$<COMPILE_LANGUAGE:CXX,C>:${Opt}>")
  endforeach()
  list(APPEND Fixed "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wno-unused-parameter>")
  set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${Fixed}")
endfunction()
