//===- kernels/cuda/CudaBackend.h - The compute backend on one CUDA device -===//
//
// ComputeBackend (kernels/Backend.h) over cuBLAS (kernels/cuda/Gemm.h), the
// flash-style attention kernels (kernels/cuda/Attention.h) and the element-wise
// kernels (kernels/cuda/Elementwise.h): a GEMM's operands are rounded to bf16
// and multiplied with fp32 accumulation into an fp32 result (Megatron's bf16
// mixed precision: bf16 inputs, fp32 sums); an attention block reads bf16 Q,
// K, V and output gradients and merges into fp32 outputs, statistics and
// gradients; RMSNorm, RoPE and SwiGLU take and give bf16 activations, keeping
// rstd and the norm weight's gradient in fp32. Attention shapes the kernels do not
// take (head widths other than cuda::attentionKernelWidths(): 32, 64, 72, 128
// or 256 for keys and values alike, or latent attention's 192 and 128) are
// declined, and the caller's host code runs them.
//
// Activations stay host arrays between operations: each operation copies its
// inputs to the device (through the caching allocator) and its results back.
// That is what lets the one StageModel run on either backend today, with every
// parallel layout, and it is the cost the next step removes (device-resident
// activations): on a GPU the copies, not the kernels, bound the step. Held
// arrays (ComputeBackend::holdArrays: the trainer holds parameters and their
// gradients for a step) move once: a parameter's bf16 copy is made on its
// first use and read in place, and a gradient's share is summed on the device
// in fp32 and added to the host array on release. Resident arrays
// (ComputeBackend::makeResident: the parameters no group sums, their
// gradients and moments) live on the device in fp32 across steps: operands
// read a bf16 copy cast there, sums add into them, AdamW updates them in
// place, and they cross only when the host asks (hostReads, releaseResident).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_CUDABACKEND_H
#define MOERT_KERNELS_CUDA_CUDABACKEND_H

#include "kernels/Backend.h"

#include <memory>

namespace moert::cuda {

/// The backend on device Device (cudaSetDevice). Throws when there is no
/// such device.
std::unique_ptr<ComputeBackend> createCudaBackend(int Device);

/// The device a rank uses: its rank among the ranks of its node (Open MPI's
/// OMPI_COMM_WORLD_LOCAL_RANK, else Slurm's SLURM_LOCALID, else 0) modulo the
/// node's devices, so several ranks may share one GPU.
int deviceForLocalRank();
/// Whether this node runs more ranks (OMPI_COMM_WORLD_LOCAL_SIZE, else
/// SLURM_NTASKS_PER_NODE, else 1) than it has devices, so that some share
/// one (which NCCL refuses).
bool ranksShareDevices();

} // namespace moert::cuda

#endif
