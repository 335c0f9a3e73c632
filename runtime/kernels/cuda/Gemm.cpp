//===- kernels/cuda/Gemm.cpp ----------------------------------------------===//
#include "kernels/cuda/Gemm.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace moert::cuda {

namespace {
void checkBlas(cublasStatus_t S, const char *Call, const char *File, int Line) {
  if (S == CUBLAS_STATUS_SUCCESS)
    return;
  std::ostringstream OS;
  OS << File << ":" << Line << ": " << Call << " failed: " << cublasGetStatusName(S) << " (" << cublasGetStatusString(S)
     << ")";
  throw std::runtime_error(OS.str());
}
#define MOERT_CUBLAS_CHECK(Call) checkBlas((Call), #Call, __FILE__, __LINE__)

int toInt(int64_t V, const char *What) {
  if (V < 0 || V > INT_MAX)
    throw std::invalid_argument(std::string("GEMM ") + What + " out of cuBLAS's int range");
  return int(V);
}

cudaDataType_t cudaType(OutType T) { return T == OutType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }
size_t elementBytes(OutType T) { return T == OutType::BF16 ? 2 : 4; }
cublasOperation_t op(bool Trans) { return Trans ? CUBLAS_OP_T : CUBLAS_OP_N; }
} // namespace

BlasHandle::BlasHandle(cudaStream_t S) : Stream(S) {
  MOERT_CUBLAS_CHECK(cublasCreate(&Handle));
  MOERT_CUBLAS_CHECK(cublasSetStream(Handle, Stream));
}

BlasHandle::~BlasHandle() {
  for (Side &S : Sides) {
    cublasDestroy(S.Handle);
    cudaEventDestroy(S.Done);
    cudaStreamDestroy(S.Stream);
  }
  if (Fork)
    cudaEventDestroy(Fork);
  if (Handle)
    cublasDestroy(Handle);
}

int BlasHandle::multiprocessors() {
  if (Multiprocessors == 0) {
    int Device = 0;
    MOERT_CUDA_CHECK(cudaGetDevice(&Device));
    MOERT_CUDA_CHECK(cudaDeviceGetAttribute(&Multiprocessors, cudaDevAttrMultiProcessorCount, Device));
  }
  return Multiprocessors;
}

std::vector<BlasHandle::Side> &BlasHandle::sides() {
  if (!Sides.empty())
    return Sides;
  MOERT_CUDA_CHECK(cudaEventCreateWithFlags(&Fork, cudaEventDisableTiming));
  for (int I = 0; I < GroupedGemmStreams; ++I) {
    Side S;
    MOERT_CUDA_CHECK(cudaStreamCreateWithFlags(&S.Stream, cudaStreamNonBlocking));
    MOERT_CUDA_CHECK(cudaEventCreateWithFlags(&S.Done, cudaEventDisableTiming));
    MOERT_CUBLAS_CHECK(cublasCreate(&S.Handle));
    MOERT_CUBLAS_CHECK(cublasSetStream(S.Handle, S.Stream));
    Sides.push_back(S);
  }
  return Sides;
}

void BlasHandle::setStream(cudaStream_t NewStream) {
  Stream = NewStream;
  MOERT_CUBLAS_CHECK(cublasSetStream(Handle, Stream));
}

void gemm(BlasHandle &H, bool TransA, bool TransB, int64_t M, int64_t N, int64_t K, float Alpha, const bf16 *A,
          int64_t LdA, const bf16 *B, int64_t LdB, float Beta, void *C, OutType CType, int64_t LdC) {
  if (M == 0 || N == 0)
    return;
  // Row-major C[M,N] = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T:
  // B goes first, and each stored row-major matrix is its own transpose in
  // column-major, so the op flags carry over unchanged.
  MOERT_CUBLAS_CHECK(cublasGemmEx(H.get(), op(TransB), op(TransA), toInt(N, "N"), toInt(M, "M"), toInt(K, "K"), &Alpha,
                                  B, CUDA_R_16BF, toInt(LdB, "ldb"), A, CUDA_R_16BF, toInt(LdA, "lda"), &Beta, C,
                                  cudaType(CType), toInt(LdC, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

GroupedMode autoGroupedMode(const std::vector<int64_t> &OutputRows, int64_t OutputCols, int Multiprocessors) {
  double Tiles = 0;
  size_t Problems = 0;
  for (int64_t R : OutputRows)
    if (R > 0) {
      Tiles += double((OutputCols + 255) / 256) * double((R + 127) / 128);
      ++Problems;
    }
  if (Problems == 0)
    return GroupedMode::Loop;
  return Tiles / double(Problems) < double(Multiprocessors) ? GroupedMode::Streams : GroupedMode::Loop;
}

void GemmGroup::add(bool TransA, bool TransB, int64_t RM, int64_t RN, int64_t RK, const bf16 *RA, int64_t RLdA,
                    const bf16 *RB, int64_t RLdB, float RBeta, void *RC, int64_t RLdC) {
  // Row-major problem (RA, RB, RC) as the swapped column-major one.
  OpA.push_back(op(TransB));
  OpB.push_back(op(TransA));
  M.push_back(toInt(RN, "N"));
  N.push_back(toInt(RM, "M"));
  K.push_back(toInt(RK, "K"));
  A.push_back(RB);
  LdA.push_back(toInt(RLdB, "ldb"));
  B.push_back(RA);
  LdB.push_back(toInt(RLdA, "lda"));
  C.push_back(RC);
  LdC.push_back(toInt(RLdC, "ldc"));
  Alpha.push_back(1.0f);
  Beta.push_back(RBeta);
  GroupSize.push_back(1);
}

void GemmGroup::run(BlasHandle &H, GroupedMode Mode, OutType CType) {
  size_t G = M.size();
  if (G == 0)
    return;
  if (Mode == GroupedMode::Auto)
    // Row-major outputs: N[g] rows of M[g] (one width for every expert).
    Mode = autoGroupedMode(std::vector<int64_t>(N.begin(), N.end()), M[0], H.multiprocessors());
  if (Mode == GroupedMode::Batched && !H.BatchedFellBack) {
    // The pointer arrays live in device memory (cuBLAS reads them there).
    H.PointerScratch.resize(std::max(H.PointerScratch.size(), 3 * G));
    std::vector<const void *> Ptrs;
    Ptrs.reserve(3 * G);
    Ptrs.insert(Ptrs.end(), A.begin(), A.end());
    Ptrs.insert(Ptrs.end(), B.begin(), B.end());
    Ptrs.insert(Ptrs.end(), C.begin(), C.end());
    MOERT_CUDA_CHECK(cudaMemcpyAsync(H.PointerScratch.data(), Ptrs.data(), Ptrs.size() * sizeof(void *),
                                     cudaMemcpyHostToDevice, H.stream()));
    const void *const *DA = H.PointerScratch.data();
    const void *const *DB = DA + G;
    void *const *DC = const_cast<void *const *>(DA + 2 * G);
    cublasStatus_t S =
        cublasGemmGroupedBatchedEx(H.get(), OpA.data(), OpB.data(), M.data(), N.data(), K.data(), Alpha.data(), DA,
                                   CUDA_R_16BF, LdA.data(), DB, CUDA_R_16BF, LdB.data(), Beta.data(), DC,
                                   cudaType(CType), LdC.data(), int(G), GroupSize.data(), CUBLAS_COMPUTE_32F);
    // No sync needed for the host arrays: a pageable cudaMemcpyAsync has
    // staged its source before returning, and cuBLAS reads the per-group
    // sizes and scalars on the host during the call.
    // Which type combinations the grouped API takes varies by cuBLAS
    // version and GPU, and a refusal comes back as NOT_SUPPORTED or
    // INVALID_VALUE: fall back to the loop, whose cublasGemmEx calls still
    // report a genuinely invalid problem.
    if (S != CUBLAS_STATUS_NOT_SUPPORTED && S != CUBLAS_STATUS_INVALID_VALUE) {
      MOERT_CUBLAS_CHECK(S);
      return;
    }
    H.BatchedFellBack = true;
    std::fprintf(stderr,
                 "moert: cublasGemmGroupedBatchedEx refused this bf16/fp32 "
                 "problem (%s); grouped expert GEMMs fall back to a loop of "
                 "cublasGemmEx\n",
                 cublasGetStatusName(S));
  }
  if (Mode == GroupedMode::Streams && G > 1) {
    // Fork: every side stream starts after the work queued on the
    // handle's stream; join: that stream's later work waits for them all.
    std::vector<BlasHandle::Side> &Sides = H.sides();
    size_t Used = std::min(G, Sides.size());
    MOERT_CUDA_CHECK(cudaEventRecord(H.Fork, H.stream()));
    for (size_t S = 0; S < Used; ++S)
      MOERT_CUDA_CHECK(cudaStreamWaitEvent(Sides[S].Stream, H.Fork, 0));
    for (size_t I = 0; I < G; ++I)
      runOne(Sides[I % Used].Handle, I, CType);
    for (size_t S = 0; S < Used; ++S) {
      MOERT_CUDA_CHECK(cudaEventRecord(Sides[S].Done, Sides[S].Stream));
      MOERT_CUDA_CHECK(cudaStreamWaitEvent(H.stream(), Sides[S].Done, 0));
    }
    return;
  }
  for (size_t I = 0; I < G; ++I)
    runOne(H.get(), I, CType);
}

void GemmGroup::runOne(cublasHandle_t Handle, size_t I, OutType CType) {
  MOERT_CUBLAS_CHECK(cublasGemmEx(Handle, OpA[I], OpB[I], M[I], N[I], K[I], &Alpha[I], A[I], CUDA_R_16BF, LdA[I], B[I],
                                  CUDA_R_16BF, LdB[I], &Beta[I], C[I], cudaType(CType), LdC[I], CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

void groupedGemm(BlasHandle &H, GroupedMode Mode, const std::vector<int64_t> &Rows, int64_t N, int64_t K, const bf16 *X,
                 const bf16 *W, bool TransW, float Beta, void *Y, OutType YType) {
  GemmGroup Call;
  int64_t Begin = 0;
  for (size_t G = 0; G < Rows.size(); ++G) {
    int64_t M = Rows[G];
    if (M > 0)
      Call.add(false, TransW, M, N, K, X + Begin * K, K, W + int64_t(G) * K * N, TransW ? K : N, Beta,
               static_cast<char *>(Y) + size_t(Begin * N) * elementBytes(YType), N);
    Begin += M;
  }
  Call.run(H, Mode, YType);
}

void groupedWeightGradGemm(BlasHandle &H, GroupedMode Mode, const std::vector<int64_t> &Rows, int64_t In, int64_t Out,
                           const bf16 *X, const bf16 *DY, float Beta, float *DW) {
  GemmGroup Call;
  int64_t Begin = 0;
  for (size_t G = 0; G < Rows.size(); ++G) {
    int64_t M = Rows[G];
    if (M > 0)
      Call.add(true, false, In, Out, M, X + Begin * In, In, DY + Begin * Out, Out, Beta, DW + int64_t(G) * In * Out,
               Out);
    Begin += M;
  }
  Call.run(H, Mode, OutType::F32);
}

} // namespace moert::cuda
