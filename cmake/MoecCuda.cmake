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
  # cuDNN (from the toolkit) and its header-only C++ frontend (fetched by
  # scripts/setup.sh from PyPI's nvidia-cudnn-frontend) give the fused
  # attention; without either the backend keeps its CUDA-core attention only.
  find_path(MOEC_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(MOEC_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib64 lib)
  file(GLOB MOEC_CUDNN_FRONTEND_HINTS
       "$ENV{HOME}/.cache/moec/cudnn-frontend-*/include"
       "$ENV{XDG_CACHE_HOME}/moec/cudnn-frontend-*/include")
  find_path(MOEC_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
            HINTS ${MOEC_CUDNN_FRONTEND_HINTS} ENV CUDNN_FRONTEND_HOME
            PATH_SUFFIXES include)
  if(MOEC_CUDNN_INCLUDE_DIR AND MOEC_CUDNN_LIBRARY AND MOEC_CUDNN_FRONTEND_INCLUDE_DIR)
    set(MOEC_CUDNN ON)
    add_library(MoecCudnn INTERFACE)
    target_include_directories(MoecCudnn SYSTEM INTERFACE ${MOEC_CUDNN_INCLUDE_DIR}
                               ${MOEC_CUDNN_FRONTEND_INCLUDE_DIR})
    # The frontend compiles some of its engines at run time (NVRTC).
    target_link_libraries(MoecCudnn INTERFACE ${MOEC_CUDNN_LIBRARY} CUDA::nvrtc)
    target_compile_definitions(MoecCudnn INTERFACE MOERT_HAS_CUDNN=1)
    message(STATUS "MOEC_CUDA: cuDNN fused attention ON (${MOEC_CUDNN_LIBRARY}, "
            "frontend ${MOEC_CUDNN_FRONTEND_INCLUDE_DIR})")
  else()
    set(MOEC_CUDNN OFF)
    message(STATUS "MOEC_CUDA: cuDNN fused attention OFF (cudnn.h: '${MOEC_CUDNN_INCLUDE_DIR}', "
            "libcudnn: '${MOEC_CUDNN_LIBRARY}', cudnn_frontend.h: "
            "'${MOEC_CUDNN_FRONTEND_INCLUDE_DIR}'; scripts/setup.sh fetches the frontend)")
  endif()
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
