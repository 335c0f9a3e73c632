//===- kernels/cuda/CudaCheck.h - CUDA error checks and device queries ----===//
//
// Every CUDA runtime, cuBLAS and NCCL call of the CUDA backend goes through a
// check that turns a failure into a std::runtime_error naming the call, its
// source location and the library's own message: a GPU error surfaces where
// it happened instead of as garbage a few kernels later.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_CUDACHECK_H
#define MOERT_KERNELS_CUDA_CUDACHECK_H

#include <cuda_runtime.h>

#include <string>

namespace moert::cuda {

[[noreturn]] void throwCudaError(cudaError_t Error, const char *Call, const char *File, int Line);

inline void checkCuda(cudaError_t Error, const char *Call, const char *File, int Line) {
  if (Error != cudaSuccess)
    throwCudaError(Error, Call, File, Line);
}

/// Usable CUDA devices: 0 when there is no GPU, no driver, or the driver is
/// too old for this toolkit (never throws, so tests can skip on it).
int deviceCount();
/// "NVIDIA H200 (sm_90, 139.8 GiB)" for device Index.
std::string deviceDescription(int Index);

} // namespace moert::cuda

#define MOERT_CUDA_CHECK(Call) ::moert::cuda::checkCuda((Call), #Call, __FILE__, __LINE__)

/// After a kernel launch: launch-configuration errors are reported at once.
#define MOERT_CUDA_CHECK_LAUNCH() MOERT_CUDA_CHECK(cudaGetLastError())

#endif
