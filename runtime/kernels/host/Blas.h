//===- kernels/host/Blas.h - The model's GEMM entry point ------------------===//
//
// Every matrix product of the model goes through gemm() here, which runs on
// this thread's compute backend (kernels/Backend.h): OpenBLAS (cblas) on the
// host backend, never hand-written loops; cuBLAS on the CUDA backend.
// Matrices are row-major; op(A) is M x K, op(B) is K x N.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_HOST_BLAS_H
#define MOERT_KERNELS_HOST_BLAS_H

#include <cstdint>

namespace moert {

class ComputeBackend;
struct GemmArgs;

/// C = Alpha * op(A) * op(B) + Beta * C, row-major, leading dimensions = row widths.
void gemm(bool TransA, bool TransB, int64_t M, int64_t N, int64_t K, float Alpha, const float *A, const float *B,
          float Beta, float *C);

/// Same with explicit leading dimensions (strided sub-blocks, e.g. one head).
void gemmStrided(bool TransA, bool TransB, int64_t M, int64_t N, int64_t K, float Alpha, const float *A, int64_t LdA,
                 const float *B, int64_t LdB, float Beta, float *C, int64_t LdC);

/// The one timed entry: G on Backend (the two above run on this thread's).
void gemmOn(ComputeBackend &Backend, const GemmArgs &G);

/// Pins BLAS to one thread per rank (ranks usually outnumber cores).
void setBlasThreads(int Threads);

/// Seconds spent inside gemm() by this process (on any backend), for the
/// runtime's time split.
double blasSeconds();

} // namespace moert

#endif
