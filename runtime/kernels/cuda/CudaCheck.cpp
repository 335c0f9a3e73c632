//===- kernels/cuda/CudaCheck.cpp -----------------------------------------===//
#include "kernels/cuda/CudaCheck.h"

#include <sstream>
#include <stdexcept>

namespace moert::cuda {

void throwCudaError(cudaError_t Error, const char *Call, const char *File, int Line) {
  std::ostringstream OS;
  OS << File << ":" << Line << ": " << Call << " failed: " << cudaGetErrorName(Error) << " ("
     << cudaGetErrorString(Error) << ")";
  throw std::runtime_error(OS.str());
}

int deviceCount() {
  int Count = 0;
  if (cudaGetDeviceCount(&Count) != cudaSuccess) {
    // Clear the sticky "no device"/"no driver" error so later queries start
    // clean.
    (void)cudaGetLastError();
    return 0;
  }
  return Count;
}

std::string deviceDescription(int Index) {
  cudaDeviceProp Prop;
  MOERT_CUDA_CHECK(cudaGetDeviceProperties(&Prop, Index));
  std::ostringstream OS;
  OS.precision(1);
  OS << std::fixed << Prop.name << " (sm_" << Prop.major << Prop.minor << ", "
     << double(Prop.totalGlobalMem) / double(1ull << 30) << " GiB)";
  return OS.str();
}

} // namespace moert::cuda
