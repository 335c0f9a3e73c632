//===- kernels/cuda/DeltaRule.cu ------------------------------------------===//
//
// Column J of a head's state (HeadDim floats) is held in registers by
// Parts<D> adjacent threads of a block, Span<D> rows each (at most 32, so
// that heads of 128 fit the registers: a whole column of 128 rows took all
// 255 and spilled). A token's read of the column (p = A^T k) and the output
// (o = S^T q) are sums over the column's parts: butterfly shuffles within
// the group, which give each of its threads the same bits. The backward's
// sums over columns (dq_i, dk_i of every row i, dbeta, dg) go through warp
// shuffles between the threads of the same part and then through shared
// memory, the warps in order, so the results are deterministic.
//
// The backward's scratch, per block: the state before each chunk of
// ChunkTokens tokens and the chunk's ChunkTokens + 1 states, each laid out
// [row of a part, thread] so that a warp's threads touch adjacent floats;
// per token of the chunk, the decayed state's read p and the delta u of
// every column; after all blocks, each value head's dq and dk [Rows,
// ValueHeads, HeadDim], summed over the heads of a key group by a second
// kernel.
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

/// How a block of a head D wide holds its state: Parts threads per column,
/// Span rows each, a thread per (column, part), a column's parts adjacent.
template <int D> struct Split {
  static constexpr int Span = D < 32 ? D : 32;
  static constexpr int Parts = D / Span;
  static constexpr int Threads = D * Parts;
  static constexpr int Lanes = Threads < 32 ? Threads : 32;
  static constexpr int Warps = Threads / Lanes;
  static constexpr unsigned Mask = Lanes == 32 ? 0xffffffffu : (1u << Lanes) - 1;
  static_assert(Span * Parts == D && Threads % Lanes == 0, "heads of a width the split does not take");
};

/// X summed over the lanes whose index differs from this one's only in the
/// bits From .. Below - 1 (powers of two): a butterfly, so every lane of a
/// group ends with the same bits.
template <int From, int Below, unsigned Mask> __device__ inline float laneSum(float X) {
#pragma unroll
  for (int Off = Below / 2; Off >= From; Off >>= 1)
    X += __shfl_xor_sync(Mask, X, Off);
  return X;
}

/// Where a thread sits: its column J and part R, the rows it holds begin at
/// Row0.
template <int D> struct Place {
  int T, J, R, Row0, Lane, Warp;
  __device__ Place() : T(threadIdx.x) {
    J = T / Split<D>::Parts;
    R = T % Split<D>::Parts;
    Row0 = R * Split<D>::Span;
    Lane = T % Split<D>::Lanes;
    Warp = T / Split<D>::Lanes;
  }
  /// The sum over the column's parts.
  __device__ float columnTotal(float X) const { return laneSum<1, Split<D>::Parts, Split<D>::Mask>(X); }
  /// The sum over this warp's columns, of this thread's part.
  __device__ float acrossColumns(float X) const { return laneSum<Split<D>::Parts, Split<D>::Lanes, Split<D>::Mask>(X); }
  /// The sum over the warp.
  __device__ float acrossWarp(float X) const { return laneSum<1, Split<D>::Lanes, Split<D>::Mask>(X); }
};

/// One token's step on a thread's rows of column J (model/GatedDeltaRule.cpp's
/// step): St <- exp(g) St, P = the decayed column's read of k, U = beta (v -
/// P), St += k U. Kt points at the thread's first row.
template <int D>
__device__ inline void step(const Place<D> &At, float (&St)[Split<D>::Span], const float *Kt, float Vj, float G,
                            float Beta, float &P, float &U) {
  constexpr int Span = Split<D>::Span;
  const float Decay = expf(G);
#pragma unroll
  for (int I = 0; I < Span; ++I)
    St[I] *= Decay;
  P = 0.f;
#pragma unroll
  for (int I = 0; I < Span; ++I)
    P += Kt[I] * St[I];
  P = At.columnTotal(P);
  U = Beta * (Vj - P);
#pragma unroll
  for (int I = 0; I < Span; ++I)
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
__global__ void __launch_bounds__(Split<D>::Threads)
    forwardKernel(DeltaRuleShape S, const float *Q, const float *K, const float *V, const float *G, const float *Beta,
                  float *O) {
  constexpr int Span = Split<D>::Span;
  const Place<D> At;
  const int64_t H = blockIdx.x, Seq = blockIdx.y;
  const HeadView Hv(S, H, D);
  const float Scale = 1.0f / sqrtf(float(D));
  float St[Span];
#pragma unroll
  for (int I = 0; I < Span; ++I)
    St[I] = 0.f;
  for (int64_t T = 0; T < S.SeqLen; ++T) {
    const int64_t Row = Seq * S.SeqLen + T, Vo = Row * Hv.VStride + H * D + At.J;
    const int64_t Qk = Row * Hv.QkStride + Hv.KeyHead * D + At.Row0;
    float P, U;
    step<D>(At, St, K + Qk, V[Vo], G[Row * Hv.GStride + H], Beta[Row * Hv.GStride + H], P, U);
    float Ot = 0.f;
#pragma unroll
    for (int I = 0; I < Span; ++I)
      Ot += Q[Qk + I] * St[I];
    Ot = At.columnTotal(Ot);
    if (At.R == 0)
      O[Vo] = Ot * Scale;
  }
}

template <int D>
__global__ void __launch_bounds__(Split<D>::Threads)
    backwardKernel(DeltaRuleShape S, const float *Q, const float *K, const float *V, const float *G, const float *Beta,
                   const float *DO, float *PartQ, float *PartK, float *DV, float *DG, float *DBeta, float *Scratch) {
  using Sp = Split<D>;
  constexpr int Span = Sp::Span, Threads = Sp::Threads, Warps = Sp::Warps;
  constexpr int64_t Square = int64_t(D) * D;
  __shared__ float SumQ[Warps][D], SumK[Warps][D], SumB[Warps], SumG[Warps];
  const Place<D> At;
  const int64_t H = blockIdx.x, Seq = blockIdx.y, Chunks = chunksOf(S.SeqLen);
  const HeadView Hv(S, H, D);
  const float Scale = 1.0f / sqrtf(float(D));
  // A state in scratch: this thread's row I at [I * Threads + T].
  float *Checkpoints = Scratch + (Seq * S.ValueHeads + H) * blockScratch(S.SeqLen, D) + At.T; // [Chunks][D][D]
  float *States = Checkpoints + Chunks * Square;                                              // [ChunkTokens + 1][D][D]
  float *Reads = States - At.T + (ChunkTokens + 1) * Square;                                  // [ChunkTokens][D]
  float *Deltas = Reads + ChunkTokens * D;                                                    // [ChunkTokens][D]
  struct TokenInputs {
    const float *Kt, *Qt; // the thread's first row
    float Vj, Gt, Bt;
    int64_t Row;
  };
  auto Inputs = [&](int64_t T) {
    TokenInputs In;
    In.Row = Seq * S.SeqLen + T;
    const int64_t Qk = In.Row * Hv.QkStride + Hv.KeyHead * D + At.Row0;
    In.Kt = K + Qk;
    In.Qt = Q + Qk;
    In.Vj = V[In.Row * Hv.VStride + H * D + At.J];
    In.Gt = G[In.Row * Hv.GStride + H];
    In.Bt = Beta[In.Row * Hv.GStride + H];
    return In;
  };

  // The state before each chunk.
  float St[Span];
#pragma unroll
  for (int I = 0; I < Span; ++I)
    St[I] = 0.f;
  for (int64_t T = 0; T < S.SeqLen; ++T) {
    if (T % ChunkTokens == 0)
#pragma unroll
      for (int I = 0; I < Span; ++I)
        Checkpoints[(T / ChunkTokens) * Square + I * Threads] = St[I];
    const TokenInputs In = Inputs(T);
    float P, U;
    step<D>(At, St, In.Kt, In.Vj, In.Gt, In.Bt, P, U);
  }

  float DS[Span]; // the thread's rows of column J of the gradient of the state after the token
#pragma unroll
  for (int I = 0; I < Span; ++I)
    DS[I] = 0.f;
  for (int64_t C = Chunks; C-- > 0;) {
    const int64_t First = C * ChunkTokens, Last = First + ChunkTokens < S.SeqLen ? First + ChunkTokens : S.SeqLen;
#pragma unroll
    for (int I = 0; I < Span; ++I)
      States[I * Threads] = St[I] = Checkpoints[C * Square + I * Threads];
    for (int64_t T = First; T < Last; ++T) {
      const TokenInputs In = Inputs(T);
      float P, U;
      step<D>(At, St, In.Kt, In.Vj, In.Gt, In.Bt, P, U);
      if (At.R == 0) {
        Reads[(T - First) * D + At.J] = P;
        Deltas[(T - First) * D + At.J] = U;
      }
#pragma unroll
      for (int I = 0; I < Span; ++I)
        States[(T - First + 1) * Square + I * Threads] = St[I];
    }
    __syncthreads(); // a column's p and u are read by all its parts
    for (int64_t T = Last; T-- > First;) {
      const TokenInputs In = Inputs(T);
      const float *Before = States + (T - First) * Square, *After = Before + Square;
      const float Pj = Reads[(T - First) * D + At.J], Uj = Deltas[(T - First) * D + At.J];
      const float DOj = DO[In.Row * Hv.VStride + H * D + At.J], Decay = expf(In.Gt);
      // o = Scale S_t^T q, and S_t = A_t + k u^T: dq, the state's gradient
      // and u's.
      float DU = 0.f;
#pragma unroll
      for (int I = 0; I < Span; ++I) {
        DS[I] += Scale * In.Qt[I] * DOj;
        const float Dq = At.acrossColumns(After[I * Threads] * DOj);
        if (At.Lane < Sp::Parts) // the warp's first column
          SumQ[At.Warp][At.Row0 + I] = Dq;
        DU += DS[I] * In.Kt[I];
      }
      DU = At.columnTotal(DU);
      // u = beta (v - p), p = A_t^T k, A_t = exp(g) S_{t-1}.
      const float Db = At.acrossWarp(At.R == 0 ? DU * (In.Vj - Pj) : 0.f);
      if (At.R == 0)
        DV[In.Row * Hv.VStride + H * D + At.J] = In.Bt * DU;
      const float DP = -In.Bt * DU;
      float Dg = 0.f;
#pragma unroll
      for (int I = 0; I < Span; ++I) {
        const float A = Decay * Before[I * Threads], Dd = DS[I] + In.Kt[I] * DP;
        const float Dk = At.acrossColumns(DS[I] * Uj + A * DP);
        if (At.Lane < Sp::Parts)
          SumK[At.Warp][At.Row0 + I] = Dk;
        Dg += Dd * A;
        DS[I] = Decay * Dd;
      }
      Dg = At.acrossWarp(Dg);
      if (At.Lane == 0) {
        SumB[At.Warp] = Db;
        SumG[At.Warp] = Dg;
      }
      __syncthreads();
      if (At.T < D) { // row T of dq and dk
        float Dq = 0.f, Dk = 0.f;
        for (int W = 0; W < Warps; ++W) {
          Dq += SumQ[W][At.T];
          Dk += SumK[W][At.T];
        }
        const int64_t Part = (In.Row * S.ValueHeads + H) * D + At.T;
        PartQ[Part] = Scale * Dq;
        PartK[Part] = Dk;
      }
      if (At.T == 0) {
        float Bs = 0.f, Gs = 0.f;
        for (int W = 0; W < Warps; ++W) {
          Bs += SumB[W];
          Gs += SumG[W];
        }
        DBeta[In.Row * Hv.GStride + H] = Bs;
        DG[In.Row * Hv.GStride + H] = Gs;
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
    constexpr int Width = decltype(D)::value;
    forwardKernel<Width><<<dim3(unsigned(S.ValueHeads), unsigned(S.Sequences)), Split<Width>::Threads, 0, Stream>>>(
        S, Q, K, V, G, Beta, O);
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
    constexpr int Width = decltype(D)::value;
    backwardKernel<Width><<<dim3(unsigned(S.ValueHeads), unsigned(S.Sequences)), Split<Width>::Threads, 0, Stream>>>(
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
