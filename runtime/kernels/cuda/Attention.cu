//===- kernels/cuda/Attention.cu ------------------------------------------===//
//
// Thread layout. Forward: a block of 128 threads owns 64 query rows of one
// (batch, query head), two threads per row; each thread keeps the running max
// m, denominator l and half of the row's output (dimensions interleaved, so
// the two threads of a row read adjacent bf16 values of V). Keys come in tiles
// of 32 through shared memory; a tile wholly after the block's last query
// position is skipped (half the tiles of a causal square).
//
// Backward: dK/dV blocks own 32 keys of one (batch, KV head), four threads per
// key, and sweep every query tile of every query head of the group; dQ blocks
// own 32 query rows, four threads per row, and sweep the key tiles. Both
// recompute P = exp(S - Lse) and dP = dO V^T; dS = P (dP - Delta).
//
// Heads wider than 128 (latent attention's 192-wide queries and keys) halve
// the rows of a block (32 forward, 16 backward, so four and eight threads a
// row) to keep the tiles within the 48 KiB of static shared memory.
//
// Shared-memory rows are padded by two bf16 (one 32-bit bank) so threads
// reading the same column of different rows hit different banks.
//
//===----------------------------------------------------------------------===//
#include "kernels/cuda/Attention.h"

#include "kernels/cuda/DeviceMath.cuh"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>

namespace moert::cuda {

namespace {

constexpr int FwdKeys = 32, FwdThreads = 128, BwdThreads = 128;

/// What a block keeps in shared memory: the forward's Rows query rows and a
/// tile of FwdKeys keys; the backward's Tile rows of each operand (the
/// key/value kernel's, a superset of the query kernel's).
template <int DK, int DV, int Rows> struct ForwardTiles {
  bf16 Qs[Rows][DK + 2];
  bf16 Ks[FwdKeys][DK + 2];
  bf16 Vs[FwdKeys][DV + 2];
  float Ss[Rows][FwdKeys + 1];
  int32_t QPosS[Rows], KPosS[FwdKeys];
};
template <int DK, int DV, int Tile> struct BackwardKvTiles {
  bf16 Ks[Tile][DK + 2], Vs[Tile][DV + 2];
  bf16 Qs[Tile][DK + 2], DOs[Tile][DV + 2];
  float Ps[Tile][Tile + 1], DSs[Tile][Tile + 1];
  float LseS[Tile], DeltaS[Tile];
  int32_t QPosS[Tile], KPosS[Tile];
};
template <int DK, int DV, int Tile> struct BackwardQTiles {
  bf16 Qs[Tile][DK + 2], DOs[Tile][DV + 2];
  bf16 Ks[Tile][DK + 2], Vs[Tile][DV + 2];
  float DSs[Tile][Tile + 1];
  int32_t QPosS[Tile], KPosS[Tile];
};

/// A kernel's static shared memory may not pass 48 KiB.
constexpr size_t StaticSharedBytes = 48 * 1024;

/// A kernel instance's head widths (queries and keys DK, values DV) and the
/// largest tiles that fit: wide heads take fewer rows a block.
template <int DKArg, int DVArg> struct Widths {
  static constexpr int DK = DKArg, DV = DVArg;
  static constexpr int FwdRows = sizeof(ForwardTiles<DK, DV, 64>) <= StaticSharedBytes   ? 64
                                 : sizeof(ForwardTiles<DK, DV, 32>) <= StaticSharedBytes ? 32
                                                                                         : 16;
  static constexpr int FwdTpr = FwdThreads / FwdRows; // threads per query row
  static constexpr int BwdTile = sizeof(BackwardKvTiles<DK, DV, 32>) <= StaticSharedBytes ? 32 : 16;
  static constexpr int BwdTpr = BwdThreads / BwdTile; // threads per row (or key)
  using Forward = ForwardTiles<DK, DV, FwdRows>;
  using BackwardKv = BackwardKvTiles<DK, DV, BwdTile>;
  using BackwardQ = BackwardQTiles<DK, DV, BwdTile>;
  static_assert(sizeof(Forward) <= StaticSharedBytes && sizeof(BackwardKv) <= StaticSharedBytes &&
                    sizeof(BackwardQ) <= StaticSharedBytes,
                "heads too wide for the tiles");
  static_assert(DK % FwdTpr == 0 && DV % FwdTpr == 0 && DK % BwdTpr == 0 && DV % BwdTpr == 0);
};

/// The widths the kernels are built for, declared once.
using KernelWidths =
    std::tuple<Widths<32, 32>, Widths<64, 64>, Widths<72, 72>, Widths<128, 128>, Widths<192, 128>, Widths<256, 256>>;

/// Calls Launch(W) with the instance W of KernelWidths for these widths.
template <typename F> void forWidths(int64_t HeadDim, int64_t VHeadDim, F &&Launch) {
  bool Launched = false;
  std::apply(
      [&](auto... W) {
        ((!Launched && HeadDim == W.DK && VHeadDim == W.DV ? (Launch(W), Launched = true) : false), ...);
      },
      KernelWidths{});
  if (!Launched)
    throw std::invalid_argument("attention: no kernel for heads " + std::to_string(HeadDim) + " wide with values " +
                                std::to_string(VHeadDim) + " wide");
}

/// min(Tile, Remaining) for the last, partial tile.
__device__ inline int64_t tileRows(int64_t Tile, int64_t Remaining) { return Tile < Remaining ? Tile : Remaining; }

/// Copies Rows x D bf16 values (row stride Stride elements in global memory)
/// into shared rows of D + 2; rows past Valid are zero.
template <int D> __device__ void loadTile(bf16 (*Dst)[D + 2], const bf16 *Src, int64_t Stride, int Rows, int Valid) {
  for (int E = threadIdx.x; E < Rows * D; E += blockDim.x) {
    int R = E / D, C = E % D;
    Dst[R][C] = R < Valid ? Src[int64_t(R) * Stride + C] : __float2bfloat16(0.f);
  }
}

template <typename W>
__global__ void __launch_bounds__(FwdThreads)
    forwardKernel(DeviceAttentionShape S, const bf16 *Q, const int32_t *QPos, const bf16 *K, const bf16 *V,
                  const int32_t *KPos, float *Out, float *Lse) {
  constexpr int DK = W::DK, DV = W::DV, FwdRows = W::FwdRows, FwdTpr = W::FwdTpr;
  constexpr int Dpt = DV / FwdTpr;
  __shared__ typename W::Forward Tiles;
  auto &Qs = Tiles.Qs;
  auto &Ks = Tiles.Ks;
  auto &Vs = Tiles.Vs;
  auto &Ss = Tiles.Ss;
  auto &QPosS = Tiles.QPosS;
  auto &KPosS = Tiles.KPosS;

  const int64_t Q0 = int64_t(blockIdx.x) * FwdRows;
  const int H = blockIdx.y, B = blockIdx.z;
  const int G = H / int(S.QHeads / S.KvHeads);
  const int QValid = int(tileRows(FwdRows, S.QTokens - Q0));
  const int64_t QStride = S.QHeads * DK, KStride = S.KvHeads * DK, VStride = S.KvHeads * DV;

  const bf16 *QBase = Q + ((int64_t(B) * S.QTokens + Q0) * S.QHeads + H) * DK;
  loadTile<DK>(Qs, QBase, QStride, FwdRows, QValid);
  for (int I = threadIdx.x; I < FwdRows; I += blockDim.x)
    QPosS[I] = I < QValid ? QPos[Q0 + I] : INT_MIN;
  __syncthreads();
  int QMax = INT_MIN;
  for (int I = 0; I < QValid; ++I)
    QMax = max(QMax, QPosS[I]);

  const int Row = threadIdx.x / FwdTpr, Part = threadIdx.x % FwdTpr;
  const bool RowValid = Row < QValid;
  const int MyQPos = QPosS[Row];
  float M = -INFINITY, L = 0.f;
  float O[Dpt];
#pragma unroll
  for (int I = 0; I < Dpt; ++I)
    O[I] = 0.f;

  constexpr int KeysPerThread = FwdKeys / FwdTpr;
  for (int64_t K0 = 0; K0 < S.KTokens; K0 += FwdKeys) {
    const int KValid = int(tileRows(FwdKeys, S.KTokens - K0));
    __syncthreads(); // the previous tile's readers are done
    const int64_t KRow = (int64_t(B) * S.KTokens + K0) * S.KvHeads + G;
    loadTile<DK>(Ks, K + KRow * DK, KStride, FwdKeys, KValid);
    loadTile<DV>(Vs, V + KRow * DV, VStride, FwdKeys, KValid);
    for (int I = threadIdx.x; I < FwdKeys; I += blockDim.x)
      KPosS[I] = I < KValid ? KPos[K0 + I] : INT_MAX;
    __syncthreads();
    int KMin = INT_MAX;
    for (int I = 0; I < KValid; ++I)
      KMin = min(KMin, KPosS[I]);
    if (KMin > QMax)
      continue; // every key of the tile is after every query (uniform)

    // Scores of this thread's keys: full dot products over DK.
    float Acc[KeysPerThread];
#pragma unroll
    for (int J = 0; J < KeysPerThread; ++J)
      Acc[J] = 0.f;
    const int J0 = Part * KeysPerThread;
    for (int C = 0; C < DK; ++C) {
      float Qv = toF(Qs[Row][C]);
#pragma unroll
      for (int J = 0; J < KeysPerThread; ++J)
        Acc[J] += Qv * toF(Ks[J0 + J][C]);
    }
    float TileMax = -INFINITY;
#pragma unroll
    for (int J = 0; J < KeysPerThread; ++J) {
      bool Visible = RowValid && KPosS[J0 + J] <= MyQPos;
      Acc[J] = Visible ? Acc[J] * S.Scale : -INFINITY;
      TileMax = fmaxf(TileMax, Acc[J]);
    }
#pragma unroll
    for (int Off = 1; Off < FwdTpr; Off <<= 1)
      TileMax = fmaxf(TileMax, __shfl_xor_sync(0xffffffffu, TileMax, Off));
    const float NewM = fmaxf(M, TileMax);
    float Sum = 0.f;
#pragma unroll
    for (int J = 0; J < KeysPerThread; ++J) {
      float P = NewM == -INFINITY ? 0.f : __expf(Acc[J] - NewM);
      Ss[Row][J0 + J] = P;
      Sum += P;
    }
#pragma unroll
    for (int Off = 1; Off < FwdTpr; Off <<= 1)
      Sum += __shfl_xor_sync(0xffffffffu, Sum, Off);
    __syncwarp();
    const float Alpha = M == -INFINITY ? 0.f : __expf(M - NewM);
    L = L * Alpha + Sum;
    M = NewM;
#pragma unroll
    for (int I = 0; I < Dpt; ++I)
      O[I] *= Alpha;
    for (int J = 0; J < KValid; ++J) {
      float P = Ss[Row][J];
#pragma unroll
      for (int I = 0; I < Dpt; ++I)
        O[I] += P * toF(Vs[J][I * FwdTpr + Part]);
    }
    __syncwarp();
  }

  if (!RowValid || L == 0.f)
    return; // no visible key in this block: the merged state is unchanged
  const int64_t QIdx = Q0 + Row;
  float *LsePtr = Lse + (int64_t(B) * S.QHeads + H) * S.QTokens + QIdx;
  float *OutRow = Out + ((int64_t(B) * S.QTokens + QIdx) * S.QHeads + H) * DV;
  const float BlockLse = M + logf(L);
  const float OldLse = *LsePtr;
  float OldScale = 0.f, NewScale = 1.f / L, MergedLse = BlockLse;
  if (OldLse != -INFINITY) {
    float Max = fmaxf(OldLse, BlockLse);
    MergedLse = Max + logf(__expf(OldLse - Max) + __expf(BlockLse - Max));
    OldScale = __expf(OldLse - MergedLse);
    NewScale = __expf(BlockLse - MergedLse) / L;
  }
#pragma unroll
  for (int I = 0; I < Dpt; ++I) {
    float *Dst = OutRow + I * FwdTpr + Part;
    *Dst = (OldScale == 0.f ? 0.f : *Dst * OldScale) + O[I] * NewScale;
  }
  // Both threads of the row have read OldLse before it is replaced. Only the
  // row's pair takes part: lanes of finished rows may have exited.
  const unsigned PairMask = ((1u << FwdTpr) - 1) << (threadIdx.x % 32 / FwdTpr * FwdTpr);
  __syncwarp(PairMask);
  if (Part == 0)
    *LsePtr = MergedLse;
}

/// One warp per (batch, token, head) row.
__global__ void deltaKernel(DeviceAttentionShape S, const bf16 *DOut, const float *Out, float *Delta) {
  const int64_t Rows = S.Batch * S.QTokens * S.QHeads;
  const int64_t R = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (R >= Rows)
    return;
  const int Lane = threadIdx.x % 32;
  const int64_t Width = S.VHeadDim > 0 ? S.VHeadDim : S.HeadDim; // vHeadDim(), a host function
  float Sum = 0.f;
  for (int64_t C = Lane; C < Width; C += 32)
    Sum += toF(DOut[R * Width + C]) * Out[R * Width + C];
  for (int Off = 16; Off > 0; Off >>= 1)
    Sum += __shfl_xor_sync(0xffffffffu, Sum, Off);
  if (Lane == 0) {
    int64_t H = R % S.QHeads, T = (R / S.QHeads) % S.QTokens, B = R / (S.QHeads * S.QTokens);
    Delta[(B * S.QHeads + H) * S.QTokens + T] = Sum;
  }
}

/// dK and dV of 32 keys of one (batch, KV head), over every query head of
/// its group and every query tile.
template <typename W>
__global__ void __launch_bounds__(BwdThreads)
    backwardKvKernel(DeviceAttentionShape S, const bf16 *Q, const int32_t *QPos, const bf16 *K, const bf16 *V,
                     const int32_t *KPos, const float *Lse, const float *Delta, const bf16 *DOut, float *DK,
                     float *DV) {
  constexpr int DKW = W::DK, DVW = W::DV, BwdTile = W::BwdTile, BwdTpr = W::BwdTpr;
  constexpr int KDpt = DKW / BwdTpr, VDpt = DVW / BwdTpr, RowsPerThread = BwdTile / BwdTpr;
  __shared__ typename W::BackwardKv Tiles;
  auto &Ks = Tiles.Ks;
  auto &Qs = Tiles.Qs;
  auto &Vs = Tiles.Vs;
  auto &DOs = Tiles.DOs;
  auto &Ps = Tiles.Ps;
  auto &DSs = Tiles.DSs;
  auto &LseS = Tiles.LseS;
  auto &DeltaS = Tiles.DeltaS;
  auto &QPosS = Tiles.QPosS;
  auto &KPosS = Tiles.KPosS;

  const int64_t K0 = int64_t(blockIdx.x) * BwdTile;
  const int G = blockIdx.y, B = blockIdx.z;
  const int Group = int(S.QHeads / S.KvHeads);
  const int KValid = int(tileRows(BwdTile, S.KTokens - K0));
  const int64_t QStride = S.QHeads * DKW, OStride = S.QHeads * DVW, KStride = S.KvHeads * DKW,
                VStride = S.KvHeads * DVW;
  const int64_t KRow = (int64_t(B) * S.KTokens + K0) * S.KvHeads + G;
  loadTile<DKW>(Ks, K + KRow * DKW, KStride, BwdTile, KValid);
  loadTile<DVW>(Vs, V + KRow * DVW, VStride, BwdTile, KValid);
  for (int I = threadIdx.x; I < BwdTile; I += blockDim.x)
    KPosS[I] = I < KValid ? KPos[K0 + I] : INT_MAX;
  __syncthreads();
  int KMin = INT_MAX;
  for (int I = 0; I < KValid; ++I)
    KMin = min(KMin, KPosS[I]);

  const int Key = threadIdx.x / BwdTpr, Part = threadIdx.x % BwdTpr;
  const int MyKPos = KPosS[Key];
  float DKAcc[KDpt], DVAcc[VDpt];
#pragma unroll
  for (int I = 0; I < KDpt; ++I)
    DKAcc[I] = 0.f;
#pragma unroll
  for (int I = 0; I < VDpt; ++I)
    DVAcc[I] = 0.f;

  for (int HI = 0; HI < Group; ++HI) {
    const int H = G * Group + HI;
    for (int64_t Q0 = 0; Q0 < S.QTokens; Q0 += BwdTile) {
      const int QValid = int(tileRows(BwdTile, S.QTokens - Q0));
      __syncthreads();
      const int64_t QRow = (int64_t(B) * S.QTokens + Q0) * S.QHeads + H;
      loadTile<DKW>(Qs, Q + QRow * DKW, QStride, BwdTile, QValid);
      loadTile<DVW>(DOs, DOut + QRow * DVW, OStride, BwdTile, QValid);
      const int64_t StatOff = (int64_t(B) * S.QHeads + H) * S.QTokens + Q0;
      for (int I = threadIdx.x; I < BwdTile; I += blockDim.x) {
        bool Valid = I < QValid;
        QPosS[I] = Valid ? QPos[Q0 + I] : INT_MIN;
        LseS[I] = Valid ? Lse[StatOff + I] : 0.f;
        DeltaS[I] = Valid ? Delta[StatOff + I] : 0.f;
      }
      __syncthreads();
      int QMax = INT_MIN;
      for (int I = 0; I < QValid; ++I)
        QMax = max(QMax, QPosS[I]);
      if (KMin > QMax)
        continue; // no query of the tile sees any key of the block

      float SAcc[RowsPerThread], PAcc[RowsPerThread];
#pragma unroll
      for (int R = 0; R < RowsPerThread; ++R)
        SAcc[R] = PAcc[R] = 0.f;
      const int R0 = Part * RowsPerThread;
      for (int C = 0; C < DKW; ++C) {
        float Kv = toF(Ks[Key][C]);
#pragma unroll
        for (int R = 0; R < RowsPerThread; ++R)
          SAcc[R] += toF(Qs[R0 + R][C]) * Kv;
      }
      for (int C = 0; C < DVW; ++C) {
        float Vv = toF(Vs[Key][C]);
#pragma unroll
        for (int R = 0; R < RowsPerThread; ++R)
          PAcc[R] += toF(DOs[R0 + R][C]) * Vv;
      }
#pragma unroll
      for (int R = 0; R < RowsPerThread; ++R) {
        int Q = R0 + R;
        // Lse is -inf only for a query that sees nothing; it is then hidden.
        bool Visible = Key < KValid && Q < QValid && MyKPos <= QPosS[Q] && LseS[Q] != -INFINITY;
        float P = Visible ? __expf(SAcc[R] * S.Scale - LseS[Q]) : 0.f;
        Ps[Key][Q] = P;
        DSs[Key][Q] = P * (PAcc[R] - DeltaS[Q]);
      }
      __syncwarp();
      for (int Q = 0; Q < QValid; ++Q) {
        float P = Ps[Key][Q], Ds = DSs[Key][Q];
#pragma unroll
        for (int I = 0; I < VDpt; ++I)
          DVAcc[I] += P * toF(DOs[Q][I * BwdTpr + Part]);
#pragma unroll
        for (int I = 0; I < KDpt; ++I)
          DKAcc[I] += Ds * toF(Qs[Q][I * BwdTpr + Part]);
      }
      __syncwarp();
    }
  }
  if (Key >= KValid)
    return;
  const int64_t Row = (int64_t(B) * S.KTokens + K0 + Key) * S.KvHeads + G;
#pragma unroll
  for (int I = 0; I < KDpt; ++I)
    DK[Row * DKW + I * BwdTpr + Part] += DKAcc[I] * S.Scale;
#pragma unroll
  for (int I = 0; I < VDpt; ++I)
    DV[Row * DVW + I * BwdTpr + Part] += DVAcc[I];
}

/// dQ of 32 query rows of one (batch, query head), over every key tile.
template <typename W>
__global__ void __launch_bounds__(BwdThreads)
    backwardQKernel(DeviceAttentionShape S, const bf16 *Q, const int32_t *QPos, const bf16 *K, const bf16 *V,
                    const int32_t *KPos, const float *Lse, const float *Delta, const bf16 *DOut, float *DQ) {
  constexpr int DKW = W::DK, DVW = W::DV, BwdTile = W::BwdTile, BwdTpr = W::BwdTpr;
  constexpr int Dpt = DKW / BwdTpr, KeysPerThread = BwdTile / BwdTpr;
  __shared__ typename W::BackwardQ Tiles;
  auto &Qs = Tiles.Qs;
  auto &Ks = Tiles.Ks;
  auto &DOs = Tiles.DOs;
  auto &Vs = Tiles.Vs;
  auto &DSs = Tiles.DSs;
  auto &QPosS = Tiles.QPosS;
  auto &KPosS = Tiles.KPosS;

  const int64_t Q0 = int64_t(blockIdx.x) * BwdTile;
  const int H = blockIdx.y, B = blockIdx.z;
  const int G = H / int(S.QHeads / S.KvHeads);
  const int QValid = int(tileRows(BwdTile, S.QTokens - Q0));
  const int64_t QStride = S.QHeads * DKW, OStride = S.QHeads * DVW, KStride = S.KvHeads * DKW,
                VStride = S.KvHeads * DVW;
  const int64_t QRow = (int64_t(B) * S.QTokens + Q0) * S.QHeads + H;
  loadTile<DKW>(Qs, Q + QRow * DKW, QStride, BwdTile, QValid);
  loadTile<DVW>(DOs, DOut + QRow * DVW, OStride, BwdTile, QValid);
  for (int I = threadIdx.x; I < BwdTile; I += blockDim.x)
    QPosS[I] = I < QValid ? QPos[Q0 + I] : INT_MIN;
  __syncthreads();
  int QMax = INT_MIN;
  for (int I = 0; I < QValid; ++I)
    QMax = max(QMax, QPosS[I]);

  const int Row = threadIdx.x / BwdTpr, Part = threadIdx.x % BwdTpr;
  const bool RowValid = Row < QValid;
  const int64_t StatIdx = (int64_t(B) * S.QHeads + H) * S.QTokens + Q0 + Row;
  const float MyLse = RowValid ? Lse[StatIdx] : -INFINITY;
  const float MyDelta = RowValid ? Delta[StatIdx] : 0.f;
  const int MyQPos = QPosS[Row];
  float DQAcc[Dpt];
#pragma unroll
  for (int I = 0; I < Dpt; ++I)
    DQAcc[I] = 0.f;

  for (int64_t K0 = 0; K0 < S.KTokens; K0 += BwdTile) {
    const int KValid = int(tileRows(BwdTile, S.KTokens - K0));
    __syncthreads();
    const int64_t KRow = (int64_t(B) * S.KTokens + K0) * S.KvHeads + G;
    loadTile<DKW>(Ks, K + KRow * DKW, KStride, BwdTile, KValid);
    loadTile<DVW>(Vs, V + KRow * DVW, VStride, BwdTile, KValid);
    for (int I = threadIdx.x; I < BwdTile; I += blockDim.x)
      KPosS[I] = I < KValid ? KPos[K0 + I] : INT_MAX;
    __syncthreads();
    int KMin = INT_MAX;
    for (int I = 0; I < KValid; ++I)
      KMin = min(KMin, KPosS[I]);
    if (KMin > QMax)
      continue;

    float SAcc[KeysPerThread], PAcc[KeysPerThread];
#pragma unroll
    for (int J = 0; J < KeysPerThread; ++J)
      SAcc[J] = PAcc[J] = 0.f;
    const int J0 = Part * KeysPerThread;
    for (int C = 0; C < DKW; ++C) {
      float Qv = toF(Qs[Row][C]);
#pragma unroll
      for (int J = 0; J < KeysPerThread; ++J)
        SAcc[J] += Qv * toF(Ks[J0 + J][C]);
    }
    for (int C = 0; C < DVW; ++C) {
      float Dv = toF(DOs[Row][C]);
#pragma unroll
      for (int J = 0; J < KeysPerThread; ++J)
        PAcc[J] += Dv * toF(Vs[J0 + J][C]);
    }
#pragma unroll
    for (int J = 0; J < KeysPerThread; ++J) {
      int Kj = J0 + J;
      bool Visible = RowValid && Kj < KValid && KPosS[Kj] <= MyQPos && MyLse != -INFINITY;
      float P = Visible ? __expf(SAcc[J] * S.Scale - MyLse) : 0.f;
      DSs[Row][Kj] = P * (PAcc[J] - MyDelta);
    }
    __syncwarp();
    for (int J = 0; J < KValid; ++J) {
      float Ds = DSs[Row][J];
#pragma unroll
      for (int I = 0; I < Dpt; ++I)
        DQAcc[I] += Ds * toF(Ks[J][I * BwdTpr + Part]);
    }
    __syncwarp();
  }
  if (!RowValid)
    return;
  float *Dst = DQ + ((int64_t(B) * S.QTokens + Q0 + Row) * S.QHeads + H) * DKW;
#pragma unroll
  for (int I = 0; I < Dpt; ++I)
    Dst[I * BwdTpr + Part] += DQAcc[I] * S.Scale;
}

__global__ void fillKernel(float *P, int64_t N, float Value) {
  for (int64_t I = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; I < N; I += int64_t(gridDim.x) * blockDim.x)
    P[I] = Value;
}

void fill(float *P, int64_t N, float Value, cudaStream_t Stream) {
  if (N == 0)
    return;
  int Blocks = int(std::min<int64_t>((N + 255) / 256, 4096));
  fillKernel<<<Blocks, 256, 0, Stream>>>(P, N, Value);
  MOERT_CUDA_CHECK_LAUNCH();
}

void checkShape(const DeviceAttentionShape &S) {
  if (S.Batch < 1 || S.QTokens < 0 || S.KTokens < 0 || S.KvHeads < 1 || S.QHeads < S.KvHeads || S.QHeads % S.KvHeads)
    throw std::invalid_argument("attention: QHeads must be a positive "
                                "multiple of KvHeads, Batch >= 1");
  forWidths(S.HeadDim, S.vHeadDim(), [](auto) {}); // throws, naming the widths, if no kernel takes them
  if (S.Batch > 65535 || S.QHeads > 65535)
    throw std::invalid_argument("attention: Batch and QHeads must fit a "
                                "grid dimension (65535)");
}

template <typename W>
void launchForward(const DeviceAttentionShape &S, const bf16 *Q, const int32_t *QPos, const bf16 *K, const bf16 *V,
                   const int32_t *KPos, float *Out, float *Lse, cudaStream_t Stream) {
  dim3 Grid(unsigned((S.QTokens + W::FwdRows - 1) / W::FwdRows), unsigned(S.QHeads), unsigned(S.Batch));
  forwardKernel<W><<<Grid, FwdThreads, 0, Stream>>>(S, Q, QPos, K, V, KPos, Out, Lse);
  MOERT_CUDA_CHECK_LAUNCH();
}

template <typename W>
void launchBackward(const DeviceAttentionShape &S, const bf16 *Q, const int32_t *QPos, const bf16 *K, const bf16 *V,
                    const int32_t *KPos, const float *Lse, const float *Delta, const bf16 *DOut, float *DQ, float *DK,
                    float *DV, cudaStream_t Stream) {
  dim3 KvGrid(unsigned((S.KTokens + W::BwdTile - 1) / W::BwdTile), unsigned(S.KvHeads), unsigned(S.Batch));
  backwardKvKernel<W><<<KvGrid, BwdThreads, 0, Stream>>>(S, Q, QPos, K, V, KPos, Lse, Delta, DOut, DK, DV);
  MOERT_CUDA_CHECK_LAUNCH();
  dim3 QGrid(unsigned((S.QTokens + W::BwdTile - 1) / W::BwdTile), unsigned(S.QHeads), unsigned(S.Batch));
  backwardQKernel<W><<<QGrid, BwdThreads, 0, Stream>>>(S, Q, QPos, K, V, KPos, Lse, Delta, DOut, DQ);
  MOERT_CUDA_CHECK_LAUNCH();
}

} // namespace

const std::vector<AttentionWidths> &attentionKernelWidths() {
  static const std::vector<AttentionWidths> Taken = std::apply(
      [](auto... W) {
        return std::vector<AttentionWidths>{AttentionWidths{W.DK, W.DV}...};
      },
      KernelWidths{});
  return Taken;
}

bool attentionKernelTakesWidths(int64_t HeadDim, int64_t VHeadDim) {
  const std::vector<AttentionWidths> &Taken = attentionKernelWidths();
  return std::any_of(Taken.begin(), Taken.end(),
                     [&](const AttentionWidths &W) { return W.HeadDim == HeadDim && W.VHeadDim == VHeadDim; });
}

void attentionInit(const DeviceAttentionShape &S, float *Out, float *Lse, cudaStream_t Stream) {
  fill(Out, S.Batch * S.QTokens * S.QHeads * S.vHeadDim(), 0.f, Stream);
  fill(Lse, S.Batch * S.QHeads * S.QTokens, -INFINITY, Stream);
}

void attentionForwardBlock(const DeviceAttentionShape &S, const bf16 *Q, const int32_t *QPos, const bf16 *K,
                           const bf16 *V, const int32_t *KPos, float *Out, float *Lse, cudaStream_t Stream) {
  checkShape(S);
  if (S.QTokens == 0 || S.KTokens == 0)
    return;
  forWidths(S.HeadDim, S.vHeadDim(),
            [&](auto W) { launchForward<decltype(W)>(S, Q, QPos, K, V, KPos, Out, Lse, Stream); });
}

void attentionDelta(const DeviceAttentionShape &S, const bf16 *DOut, const float *Out, float *Delta,
                    cudaStream_t Stream) {
  int64_t Rows = S.Batch * S.QTokens * S.QHeads;
  if (Rows == 0)
    return;
  deltaKernel<<<unsigned((Rows + 7) / 8), 256, 0, Stream>>>(S, DOut, Out, Delta);
  MOERT_CUDA_CHECK_LAUNCH();
}

void attentionBackwardBlock(const DeviceAttentionShape &S, const bf16 *Q, const int32_t *QPos, const bf16 *K,
                            const bf16 *V, const int32_t *KPos, const float *Lse, const float *Delta, const bf16 *DOut,
                            float *DQ, float *DK, float *DV, cudaStream_t Stream) {
  checkShape(S);
  if (S.QTokens == 0 || S.KTokens == 0)
    return;
  forWidths(S.HeadDim, S.vHeadDim(),
            [&](auto W) { launchBackward<decltype(W)>(S, Q, QPos, K, V, KPos, Lse, Delta, DOut, DQ, DK, DV, Stream); });
}

void causalAttentionForward(const DeviceAttentionShape &S, const bf16 *Q, const bf16 *K, const bf16 *V,
                            const int32_t *Positions, float *Out, float *Lse, cudaStream_t Stream) {
  if (S.QTokens != S.KTokens)
    throw std::invalid_argument("causal attention: QTokens != KTokens");
  attentionInit(S, Out, Lse, Stream);
  attentionForwardBlock(S, Q, Positions, K, V, Positions, Out, Lse, Stream);
}

void causalAttentionBackward(const DeviceAttentionShape &S, const bf16 *Q, const bf16 *K, const bf16 *V,
                             const int32_t *Positions, const float *Out, const float *Lse, const bf16 *DOut,
                             float *Delta, float *DQ, float *DK, float *DV, cudaStream_t Stream) {
  if (S.QTokens != S.KTokens)
    throw std::invalid_argument("causal attention: QTokens != KTokens");
  fill(DQ, S.Batch * S.QTokens * S.QHeads * S.HeadDim, 0.f, Stream);
  fill(DK, S.Batch * S.KTokens * S.KvHeads * S.HeadDim, 0.f, Stream);
  fill(DV, S.Batch * S.KTokens * S.KvHeads * S.vHeadDim(), 0.f, Stream);
  attentionDelta(S, DOut, Out, Delta, Stream);
  attentionBackwardBlock(S, Q, Positions, K, V, Positions, Lse, Delta, DOut, DQ, DK, DV, Stream);
}

double causalAttentionFlops(const DeviceAttentionShape &S) {
  double T = double(S.QTokens);
  double Pairs = T * (T + 1) / 2;
  return 2.0 * double(S.Batch) * double(S.QHeads) * Pairs * double(S.HeadDim + S.vHeadDim());
}

} // namespace moert::cuda
