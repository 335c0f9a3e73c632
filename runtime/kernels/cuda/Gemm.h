//===- kernels/cuda/Gemm.h - BF16 GEMMs and grouped expert GEMMs (cuBLAS) -===//
//
// The CUDA backend's matrix products, with the CPU backend's conventions
// (kernels/host/Blas.h): row-major, op(A) is M x K, op(B) is K x N, weights
// [in, out]. Inputs are bf16, accumulation is fp32 (CUBLAS_COMPUTE_32F), and
// the output is bf16 (activations) or fp32 (gradient accumulators, logits).
// cuBLAS is column-major: a row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T, i.e. with the operands swapped.
//
// Grouped expert GEMMs run one problem per local expert over that expert's
// rows (the TokenDispatcher's expert-major order): as cublasGemmEx calls on
// the handle's stream (Loop), spread over side streams that fork from and
// join back into it (Streams, as Transformer Engine runs per-expert cuBLAS
// GEMMs on Hopper: transformer_engine/pytorch/csrc/extensions/gemm.cpp), or
// as one cublasGemmGroupedBatchedEx call (Batched). Batched falls back to
// Loop, once and with a note on stderr, when this cuBLAS refuses the type
// combination. Auto takes Streams when the mean expert's output has fewer
// 128 x 256 tiles than the GPU has multiprocessors (one GEMM cannot fill the
// GPU), else Loop. On an H200 (docs/benchmarks.md, four runs) Batched took
// 2.3-3.0x the time of one dense GEMM of the same size; Streams beat Loop by
// 4-8% where experts are small and lost 2-20% where they are large (8
// experts, 4096 x 14336). Experts with no rows are skipped (their weight gradients are left
// unchanged, scaled by Beta).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_GEMM_H
#define MOERT_KERNELS_CUDA_GEMM_H

#include "kernels/cuda/DeviceBuffer.h"

#include <cublas_v2.h>

#include <cstdint>
#include <vector>

namespace moert::cuda {

enum class OutType { BF16, F32 };
enum class GroupedMode { Loop, Streams, Batched, Auto };

/// How many side streams GroupedMode::Streams spreads the experts over.
inline constexpr int GroupedGemmStreams = 4;

/// What GroupedMode::Auto runs for problems whose outputs are OutputRows[g]
/// x OutputCols (empty problems skipped), on a GPU of this many
/// multiprocessors: Streams when the mean output has fewer 128 x 256 tiles (a
/// typical Hopper cuBLAS tile) than the GPU has multiprocessors, else Loop.
GroupedMode autoGroupedMode(const std::vector<int64_t> &OutputRows, int64_t OutputCols, int Multiprocessors);

/// A cuBLAS handle bound to a stream, with the device scratch the grouped
/// calls need for their pointer arrays.
class BlasHandle {
public:
  explicit BlasHandle(cudaStream_t Stream = nullptr);
  ~BlasHandle();
  BlasHandle(const BlasHandle &) = delete;
  BlasHandle &operator=(const BlasHandle &) = delete;

  void setStream(cudaStream_t NewStream);
  cudaStream_t stream() const { return Stream; }
  cublasHandle_t get() const { return Handle; }
  /// True once a Batched call fell back to Loop.
  bool batchedUnsupported() const { return BatchedFellBack; }

private:
  friend class GemmGroup;
  /// A side stream with its own cuBLAS handle (and so its own workspace).
  struct Side {
    cudaStream_t Stream = nullptr;
    cublasHandle_t Handle = nullptr;
    cudaEvent_t Done = nullptr;
  };
  /// The side streams of GroupedMode::Streams, made on first use.
  std::vector<Side> &sides();
  /// The device's multiprocessor count, read on first use.
  int multiprocessors();

  cublasHandle_t Handle = nullptr;
  cudaStream_t Stream = nullptr;
  DeviceBuffer<const void *> PointerScratch;
  bool BatchedFellBack = false;
  std::vector<Side> Sides;
  cudaEvent_t Fork = nullptr;
  int Multiprocessors = 0;
};

/// C = Alpha * op(A) * op(B) + Beta * C with explicit leading dimensions
/// (row widths of the stored matrices).
void gemm(BlasHandle &H, bool TransA, bool TransB, int64_t M, int64_t N, int64_t K, float Alpha, const bf16 *A,
          int64_t LdA, const bf16 *B, int64_t LdB, float Beta, void *C, OutType CType, int64_t LdC);

/// Dense leading dimensions.
inline void gemm(BlasHandle &H, bool TransA, bool TransB, int64_t M, int64_t N, int64_t K, float Alpha, const bf16 *A,
                 const bf16 *B, float Beta, void *C, OutType CType) {
  gemm(H, TransA, TransB, M, N, K, Alpha, A, TransA ? M : K, B, TransB ? K : N, Beta, C, CType, N);
}

/// Independent products run as one grouped call: C_i = op(A_i) op(B_i) +
/// Beta_i C_i, row-major with explicit leading dimensions, the outputs of
/// one type and disjoint (the problems may run at once). GroupedMode says
/// how (the file comment); groupedGemm and groupedWeightGradGemm below are
/// built on it, and the CUDA backend groups its experts' products with it.
class GemmGroup {
public:
  void add(bool TransA, bool TransB, int64_t M, int64_t N, int64_t K, const bf16 *A, int64_t LdA, const bf16 *B,
           int64_t LdB, float Beta, void *C, int64_t LdC);
  void run(BlasHandle &H, GroupedMode Mode, OutType CType);
  size_t size() const { return M.size(); }

private:
  void runOne(cublasHandle_t Handle, size_t I, OutType CType);

  // Per problem, in cuBLAS's (column-major) terms.
  std::vector<cublasOperation_t> OpA, OpB;
  std::vector<int> M, N, K, LdA, LdB, LdC, GroupSize;
  std::vector<float> Alpha, Beta;
  std::vector<const void *> A, B;
  std::vector<void *> C;
};

/// Expert forward / data gradient: for each group g, the Rows[g] rows of X
/// starting after the previous groups' rows, Y_g = X_g op(W_g) + Beta Y_g.
/// W holds the groups' matrices back to back, each stored [K, N] (TransW
/// false) or [N, K] (TransW true, the data gradient dX = dY W^T). X is
/// [sum Rows, K], Y [sum Rows, N].
void groupedGemm(BlasHandle &H, GroupedMode Mode, const std::vector<int64_t> &Rows, int64_t N, int64_t K, const bf16 *X,
                 const bf16 *W, bool TransW, float Beta, void *Y, OutType YType);

/// Expert weight gradient: DW_g = X_g^T DY_g + Beta DW_g, X [sum Rows, In],
/// DY [sum Rows, Out], DW [groups, In, Out] fp32.
void groupedWeightGradGemm(BlasHandle &H, GroupedMode Mode, const std::vector<int64_t> &Rows, int64_t In, int64_t Out,
                           const bf16 *X, const bf16 *DY, float Beta, float *DW);

} // namespace moert::cuda

#endif
