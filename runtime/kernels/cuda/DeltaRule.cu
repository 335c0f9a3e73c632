//===- kernels/cuda/DeltaRule.cu ------------------------------------------===//
//
// Thread J of a block owns column J of its head's state (HeadDim floats in
// registers) and, in the backward, column J of the state's gradient. A
// column's recurrence reads the token's k, q (broadcast from global memory)
// and its own v, g, beta; the backward's sums over columns (dq_i, dk_i of
// every row i, dbeta, dg) go through warp shuffles and then through shared
// memory, the warps in order.
//
// The backward's scratch, per block: the state before each chunk of
// ChunkTokens tokens, the chunk's ChunkTokens + 1 states, and per token of
// the chunk the decayed state's read p and the delta u of every column, all
// laid out [.., row, column] so that a warp's threads touch adjacent floats;
// after all blocks, each value head's dq and dk [Rows, ValueHeads, HeadDim],
// summed over the heads of a key group by a second kernel.
//
//===----------------------------------------------------------------------===//
#include "kernels/cuda/DeltaRule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

namespace moert::cuda {

namespace {

/// Tokens between the states the backward keeps, as the host's backward
/// (model/GatedDeltaRule.cpp).
constexpr int ChunkTokens = 64;

/// The head widths the kernels are built for, declared once.
using HeadDims =
    std::tuple<std::integral_constant<int, 8>, std::integral_constant<int, 16>, std::integral_constant<int, 32>,
               std::integral_constant<int, 64>, std::integral_constant<int, 128>>;

/// Calls Launch(std::integral_constant<int, D>) for the instance of HeadDims
/// that is HeadDim.
template <typename F> void forHeadDim(int64_t HeadDim, F &&Launch) {
  bool Launched = false;
  std::apply([&](auto... D) { ((!Launched && HeadDim == D.value ? (Launch(D), Launched = true) : false), ...); },
             HeadDims{});
  if (!Launched)
    throw std::invalid_argument("gated delta rule: no kernel for heads " + std::to_string(HeadDim) + " wide");
}

__host__ __device__ inline int64_t chunksOf(int64_t SeqLen) { return (SeqLen + ChunkTokens - 1) / ChunkTokens; }

/// Floats of one block's scratch.
__host__ __device__ inline int64_t blockScratch(int64_t SeqLen, int64_t D) {
  return (chunksOf(SeqLen) + ChunkTokens + 1) * D * D + 2 * ChunkTokens * D;
}

/// X summed over the Lanes threads of the warp (Lanes a power of two).
template <int Lanes> __device__ inline float warpSum(float X) {
  constexpr unsigned Mask = Lanes == 32 ? 0xffffffffu : (1u << Lanes) - 1;
#pragma unroll
  for (int Off = Lanes / 2; Off > 0; Off >>= 1)
    X += __shfl_xor_sync(Mask, X, Off);
  return X;
}

/// One token's step on column J (model/GatedDeltaRule.cpp's step): St <-
/// exp(g) St, P = the decayed column's read of k, U = beta (v - P), St += k U.
template <int D>
__device__ inline void step(float (&St)[D], const float *Kt, float Vj, float G, float Beta, float &P, float &U) {
  const float Decay = expf(G);
#pragma unroll
  for (int I = 0; I < D; ++I)
    St[I] *= Decay;
  P = 0.f;
#pragma unroll
  for (int I = 0; I < D; ++I)
    P += Kt[I] * St[I];
  U = Beta * (Vj - P);
#pragma unroll
  for (int I = 0; I < D; ++I)
    St[I] += Kt[I] * U;
}

/// Where a block's head reads its inputs.
struct HeadView {
  int64_t QkStride, VStride, GStride, KeyHead;
  __device__ HeadView(const DeltaRuleShape &S, int64_t H, int D)
      : QkStride(S.KeyHeads * D), VStride(S.ValueHeads * D), GStride(S.ValueHeads),
        KeyHead(H / (S.ValueHeads / S.KeyHeads)) {}
};

template <int D>
__global__ void __launch_bounds__(D) forwardKernel(DeltaRuleShape S, const float *Q, const float *K, const float *V,
                                                   const float *G, const float *Beta, float *O) {
  const int J = threadIdx.x;
  const int64_t H = blockIdx.x, Seq = blockIdx.y;
  const HeadView Hv(S, H, D);
  const float Scale = 1.0f / sqrtf(float(D));
  float St[D];
#pragma unroll
  for (int I = 0; I < D; ++I)
    St[I] = 0.f;
  for (int64_t T = 0; T < S.SeqLen; ++T) {
    const int64_t Row = Seq * S.SeqLen + T, At = Row * Hv.VStride + H * D + J;
    const float *Qt = Q + Row * Hv.QkStride + Hv.KeyHead * D, *Kt = K + Row * Hv.QkStride + Hv.KeyHead * D;
    float P, U;
    step<D>(St, Kt, V[At], G[Row * Hv.GStride + H], Beta[Row * Hv.GStride + H], P, U);
    float Ot = 0.f;
#pragma unroll
    for (int I = 0; I < D; ++I)
      Ot += Qt[I] * St[I];
    O[At] = Ot * Scale;
  }
}

template <int D>
__global__ void __launch_bounds__(D)
    backwardKernel(DeltaRuleShape S, const float *Q, const float *K, const float *V, const float *G, const float *Beta,
                   const float *DO, float *PartQ, float *PartK, float *DV, float *DG, float *DBeta, float *Scratch) {
  constexpr int Warps = (D + 31) / 32, Lanes = D < 32 ? D : 32;
  constexpr int64_t Square = int64_t(D) * D;
  __shared__ float SumQ[Warps][D], SumK[Warps][D], SumB[Warps], SumG[Warps];
  const int J = threadIdx.x, Warp = J / 32, Lane = J % 32;
  const int64_t H = blockIdx.x, Seq = blockIdx.y, Chunks = chunksOf(S.SeqLen);
  const HeadView Hv(S, H, D);
  const float Scale = 1.0f / sqrtf(float(D));
  float *Checkpoints = Scratch + (Seq * S.ValueHeads + H) * blockScratch(S.SeqLen, D); // [Chunks][D][D]
  float *States = Checkpoints + Chunks * Square;                                       // [ChunkTokens + 1][D][D]
  float *Reads = States + (ChunkTokens + 1) * Square;                                  // [ChunkTokens][D]
  float *Deltas = Reads + ChunkTokens * D;                                             // [ChunkTokens][D]
  auto Inputs = [&](int64_t T, const float *&Kt, float &Vj, float &Gt, float &Bt) {
    const int64_t Row = Seq * S.SeqLen + T;
    Kt = K + Row * Hv.QkStride + Hv.KeyHead * D;
    Vj = V[Row * Hv.VStride + H * D + J];
    Gt = G[Row * Hv.GStride + H];
    Bt = Beta[Row * Hv.GStride + H];
  };

  // The state before each chunk.
  float St[D];
#pragma unroll
  for (int I = 0; I < D; ++I)
    St[I] = 0.f;
  for (int64_t T = 0; T < S.SeqLen; ++T) {
    if (T % ChunkTokens == 0)
      for (int I = 0; I < D; ++I)
        Checkpoints[(T / ChunkTokens) * Square + I * D + J] = St[I];
    const float *Kt;
    float Vj, Gt, Bt, P, U;
    Inputs(T, Kt, Vj, Gt, Bt);
    step<D>(St, Kt, Vj, Gt, Bt, P, U);
  }

  float DS[D]; // column J of the gradient of the state after the token
#pragma unroll
  for (int I = 0; I < D; ++I)
    DS[I] = 0.f;
  for (int64_t C = Chunks; C-- > 0;) {
    const int64_t First = C * ChunkTokens, Last = First + ChunkTokens < S.SeqLen ? First + ChunkTokens : S.SeqLen;
    for (int I = 0; I < D; ++I)
      States[I * D + J] = St[I] = Checkpoints[C * Square + I * D + J];
    for (int64_t T = First; T < Last; ++T) {
      const float *Kt;
      float Vj, Gt, Bt;
      Inputs(T, Kt, Vj, Gt, Bt);
      step<D>(St, Kt, Vj, Gt, Bt, Reads[(T - First) * D + J], Deltas[(T - First) * D + J]);
      for (int I = 0; I < D; ++I)
        States[(T - First + 1) * Square + I * D + J] = St[I];
    }
    for (int64_t T = Last; T-- > First;) {
      const int64_t Row = Seq * S.SeqLen + T;
      const float *Kt, *Qt = Q + Row * Hv.QkStride + Hv.KeyHead * D;
      float Vj, Gt, Bt;
      Inputs(T, Kt, Vj, Gt, Bt);
      const float *Before = States + (T - First) * Square, *After = Before + Square;
      const float Pj = Reads[(T - First) * D + J], Uj = Deltas[(T - First) * D + J];
      const float DOj = DO[Row * Hv.VStride + H * D + J], Decay = expf(Gt);
      // o = Scale S_t^T q, and S_t = A_t + k u^T: dq, the state's gradient
      // and u's.
      float DU = 0.f;
      for (int I = 0; I < D; ++I) {
        DS[I] += Scale * Qt[I] * DOj;
        const float Dq = warpSum<Lanes>(After[I * D + J] * DOj);
        if (Lane == 0)
          SumQ[Warp][I] = Dq;
        DU += DS[I] * Kt[I];
      }
      // u = beta (v - p), p = A_t^T k, A_t = exp(g) S_{t-1}.
      const float Db = warpSum<Lanes>(DU * (Vj - Pj));
      DV[Row * Hv.VStride + H * D + J] = Bt * DU;
      const float DP = -Bt * DU;
      float Dg = 0.f;
      for (int I = 0; I < D; ++I) {
        const float A = Decay * Before[I * D + J], Dd = DS[I] + Kt[I] * DP;
        const float Dk = warpSum<Lanes>(DS[I] * Uj + A * DP);
        if (Lane == 0)
          SumK[Warp][I] = Dk;
        Dg += Dd * A;
        DS[I] = Decay * Dd;
      }
      Dg = warpSum<Lanes>(Dg);
      if (Lane == 0) {
        SumB[Warp] = Db;
        SumG[Warp] = Dg;
      }
      __syncthreads();
      float Dq = 0.f, Dk = 0.f;
      for (int W = 0; W < Warps; ++W) {
        Dq += SumQ[W][J];
        Dk += SumK[W][J];
      }
      const int64_t Part = (Row * S.ValueHeads + H) * D + J;
      PartQ[Part] = Scale * Dq;
      PartK[Part] = Dk;
      if (J == 0) {
        float Bs = 0.f, Gs = 0.f;
        for (int W = 0; W < Warps; ++W) {
          Bs += SumB[W];
          Gs += SumG[W];
        }
        DBeta[Row * Hv.GStride + H] = Bs;
        DG[Row * Hv.GStride + H] = Gs;
      }
      __syncthreads(); // the sums are read before the next token writes them
    }
  }
}

/// Out [Rows, KeyHeads, D] = each key head's value heads' Part [Rows,
/// ValueHeads, D] summed in head order.
__global__ void sumGroupsKernel(int64_t Rows, int64_t KeyHeads, int64_t ValueHeads, int64_t D, const float *Part,
                                float *Out) {
  const int64_t Group = ValueHeads / KeyHeads, Count = Rows * KeyHeads * D;
  for (int64_t X = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; X < Count; X += int64_t(gridDim.x) * blockDim.x) {
    const int64_t Row = X / (KeyHeads * D), Kh = X / D % KeyHeads, I = X % D;
    float Sum = 0.f;
    for (int64_t G = 0; G < Group; ++G)
      Sum += Part[(Row * ValueHeads + Kh * Group + G) * D + I];
    Out[X] = Sum;
  }
}

void checkShape(const DeltaRuleShape &S) {
  if (S.Sequences < 0 || S.SeqLen < 0 || S.KeyHeads < 1 || S.ValueHeads < S.KeyHeads || S.ValueHeads % S.KeyHeads)
    throw std::invalid_argument("gated delta rule: value heads must be a positive multiple of key heads");
  if (S.Sequences > 65535)
    throw std::invalid_argument("gated delta rule: at most 65535 sequences a call");
  forHeadDim(S.HeadDim, [](auto) {}); // throws, naming the width, if no kernel takes it
}

} // namespace

const std::vector<int64_t> &deltaRuleHeadDims() {
  static const std::vector<int64_t> Dims =
      std::apply([](auto... D) { return std::vector<int64_t>{int64_t(D.value)...}; }, HeadDims{});
  return Dims;
}

bool deltaRuleKernelTakes(const DeltaRuleShape &S) {
  try {
    checkShape(S);
    return true;
  } catch (const std::invalid_argument &) {
    return false;
  }
}

void gatedDeltaRuleForward(const DeltaRuleShape &S, const float *Q, const float *K, const float *V, const float *G,
                           const float *Beta, float *O, cudaStream_t Stream) {
  checkShape(S);
  if (S.Sequences == 0 || S.SeqLen == 0)
    return;
  forHeadDim(S.HeadDim, [&](auto D) {
    forwardKernel<decltype(D)::value>
        <<<dim3(unsigned(S.ValueHeads), unsigned(S.Sequences)), D.value, 0, Stream>>>(S, Q, K, V, G, Beta, O);
    MOERT_CUDA_CHECK_LAUNCH();
  });
}

int64_t deltaRuleScratch(const DeltaRuleShape &S) {
  const int64_t Rows = S.Sequences * S.SeqLen;
  return S.Sequences * S.ValueHeads * blockScratch(S.SeqLen, S.HeadDim) + 2 * Rows * S.ValueHeads * S.HeadDim;
}

void gatedDeltaRuleBackward(const DeltaRuleShape &S, const float *Q, const float *K, const float *V, const float *G,
                            const float *Beta, const float *DO, float *DQ, float *DK, float *DV, float *DG,
                            float *DBeta, float *Scratch, cudaStream_t Stream) {
  checkShape(S);
  const int64_t Rows = S.Sequences * S.SeqLen;
  if (Rows == 0)
    return;
  float *PartQ = Scratch + S.Sequences * S.ValueHeads * blockScratch(S.SeqLen, S.HeadDim);
  float *PartK = PartQ + Rows * S.ValueHeads * S.HeadDim;
  forHeadDim(S.HeadDim, [&](auto D) {
    backwardKernel<decltype(D)::value><<<dim3(unsigned(S.ValueHeads), unsigned(S.Sequences)), D.value, 0, Stream>>>(
        S, Q, K, V, G, Beta, DO, PartQ, PartK, DV, DG, DBeta, Scratch);
    MOERT_CUDA_CHECK_LAUNCH();
  });
  const int64_t Count = Rows * S.KeyHeads * S.HeadDim;
  const unsigned Blocks = unsigned(std::min<int64_t>((Count + 255) / 256, 4096));
  sumGroupsKernel<<<Blocks, 256, 0, Stream>>>(Rows, S.KeyHeads, S.ValueHeads, S.HeadDim, PartQ, DQ);
  MOERT_CUDA_CHECK_LAUNCH();
  sumGroupsKernel<<<Blocks, 256, 0, Stream>>>(Rows, S.KeyHeads, S.ValueHeads, S.HeadDim, PartK, DK);
  MOERT_CUDA_CHECK_LAUNCH();
}

} // namespace moert::cuda
