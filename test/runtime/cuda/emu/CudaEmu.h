//===- emu/CudaEmu.h - Run the CUDA kernels on the CPU, for checking
//-------===//
//
// A test-only emulation of the small part of CUDA the backend's kernels use,
// so that the GPU tests can run on a machine without a GPU: every kernel
// source is compiled by the host compiler (rewrite_cu.py turns each
// kernel<<<grid, block, ...>>>(args) into emu::launch), blocks run one after
// another, and the threads of a block run as fibers (CudaEmu.cpp) scheduled
// round-robin until each waits at a barrier, so __syncthreads,
// __syncwarp and warp shuffles are real barriers. Shared memory is a static
// array per kernel (one block at a time). Device memory is host memory;
// CudaEmu.cpp provides the CUDA runtime and cuBLAS entry points the backend
// calls (GEMMs as plain loops with fp32 accumulation).
//
// It checks the kernels' arithmetic, indexing, masking and synchronisation
// logic against the CPU references; it says nothing about speed, and races
// that only a real GPU's scheduling exposes can still hide.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_TEST_CUDA_EMU_CUDAEMU_H
#define MOERT_TEST_CUDA_EMU_CUDAEMU_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <unordered_map>

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)

namespace moert::emu {
extern thread_local uint3 ThreadIdx, BlockIdx;
extern thread_local dim3 BlockDim, GridDim;
void syncThreads();
void syncWarp(unsigned Mask);
float shflXor(float V, int Offset);
double shflXor(double V, int Offset);
float atomicAddFloat(float *Address, float Value);
/// Runs Body for every thread of every block (1-D blocks; grid up to 3-D).
void launch(dim3 Grid, dim3 Block, const std::function<void()> &Body);
/// The emulated device's memory: cudaMalloc fails with
/// cudaErrorMemoryAllocation past Limit bytes live (tests lower it).
struct DeviceMemory {
  std::unordered_map<void *, size_t> Live;
  size_t LiveBytes = 0;
  size_t Limit = SIZE_MAX;
};
DeviceMemory &deviceMemory();
} // namespace moert::emu

#define threadIdx ::moert::emu::ThreadIdx
#define blockIdx ::moert::emu::BlockIdx
#define blockDim ::moert::emu::BlockDim
#define gridDim ::moert::emu::GridDim

inline void __syncthreads() { moert::emu::syncThreads(); }
inline void __syncwarp(unsigned Mask = 0xffffffffu) { moert::emu::syncWarp(Mask); }
inline float __shfl_xor_sync(unsigned, float V, int Offset) { return moert::emu::shflXor(V, Offset); }
inline double __shfl_xor_sync(unsigned, double V, int Offset) { return moert::emu::shflXor(V, Offset); }
inline float __expf(float X) { return std::exp(X); }
inline float rsqrtf(float X) { return 1.0f / std::sqrt(X); }
// Rounded-once fp32 arithmetic: the host's without -mfma is already that.
inline float __fadd_rn(float A, float B) { return A + B; }
inline float __fsub_rn(float A, float B) { return A - B; }
inline float __fmul_rn(float A, float B) { return A * B; }
inline float __fdiv_rn(float A, float B) { return A / B; }
inline float __fsqrt_rn(float X) { return std::sqrt(X); }
inline float atomicAdd(float *Address, float Value) { return moert::emu::atomicAddFloat(Address, Value); }
// The threads of a block are fibers that switch only at barriers, so an
// integer update between two barriers is already atomic.
inline int atomicAdd(int *Address, int Value) {
  int Old = *Address;
  *Address += Value;
  return Old;
}
using std::max;
using std::min;

#endif
