//===- kernels/cuda/Moe.cu ------------------------------------------------===//
#include "kernels/cuda/Moe.h"

#include "kernels/KeyedDraws.h"
#include "kernels/cuda/DeviceMath.cuh"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace moert::cuda {

namespace {

unsigned blocksFor(int64_t Count, int Threads) {
  return unsigned(std::max<int64_t>(1, (Count + Threads - 1) / Threads));
}

/// (Score, Id) comes before (OtherScore, OtherId) in routing order.
__device__ inline bool before(float Score, int Id, float OtherScore, int OtherId) {
  return Score > OtherScore || (Score == OtherScore && Id < OtherId);
}

/// Takes the experts Lo..Hi - 1 that Admit(J) lets through one at a time in
/// routing order (the higher Value(J) first, the lower id on ties): each
/// next() is the best one strictly after the previous pick, so a token's
/// top-k needs no scratch array.
template <typename ValueFn, typename AdmitFn> struct Picker {
  int Lo, Hi;
  ValueFn Value;
  AdmitFn Admit;
  float PrevValue = INFINITY; ///< the last pick's value
  int PrevId = -1;
  __device__ int next() {
    float Best = -INFINITY;
    int BestId = -1;
    for (int J = Lo; J < Hi; ++J) {
      if (!Admit(J))
        continue;
      const float V = Value(J);
      if (before(PrevValue, PrevId, V, J) && (BestId < 0 || before(V, J, Best, BestId))) {
        Best = V;
        BestId = J;
      }
    }
    PrevValue = Best;
    PrevId = BestId;
    return BestId;
  }
};
template <typename ValueFn, typename AdmitFn>
__device__ Picker<ValueFn, AdmitFn> picker(int Lo, int Hi, ValueFn Value, AdmitFn Admit) {
  return {Lo, Hi, Value, Admit};
}
/// Admits every expert.
struct AnyExpert {
  __device__ bool operator()(int) const { return true; }
};

/// Where group-limited routing keeps experts: a bit per group.
using GroupMask = unsigned long long;

__device__ inline bool groupedRouting(const RouterSpec &S) { return S.Groups > 1 && S.GroupTopK < S.Groups; }

__global__ void balancedLogitsKernel(int64_t N, int64_t E, const uint64_t *Keys, float *Logits) {
  for (int64_t X = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; X < N * E; X += int64_t(gridDim.x) * blockDim.x)
    Logits[X] = float(normalOfKey(mix64(Keys[X / E]) + uint64_t(X % E)));
}

/// One thread per token: model/Router.cpp's Router::route, operation for
/// operation.
__global__ void routeTokensKernel(RouterSpec S, int64_t N, const float *Logits, const float *Bias, float *Scores,
                                  int32_t *TopIdx, float *TopW) {
  const int64_t T = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (T >= N)
    return;
  const int E = int(S.Experts), K = int(S.TopK);
  const float *L = Logits + T * E;
  float *Sc = Scores + T * E;
  if (S.Sigmoid) {
    for (int J = 0; J < E; ++J)
      Sc[J] = 1.0f / (1.0f + expf(-L[J]));
  } else {
    float M = -INFINITY;
    for (int J = 0; J < E; ++J)
      M = fmaxf(M, L[J]);
    double Sum = 0;
    for (int J = 0; J < E; ++J) {
      Sc[J] = expf(L[J] - M);
      Sum += Sc[J];
    }
    for (int J = 0; J < E; ++J)
      Sc[J] = float(Sc[J] / Sum);
  }
  // What the top-k ranks by: the scores; for group-limited routing after a
  // softmax over the chosen, their logs (a group's sum of logits ranks as
  // the sum of the logs); a sigmoid router's plus its expert bias.
  const bool Grouped = groupedRouting(S), LogScores = Grouped && !S.Sigmoid && !S.PreSoftmax,
             Biased = Bias && S.Sigmoid;
  auto Selection = [&](int J) { return LogScores ? logf(Sc[J]) : Biased ? Sc[J] + Bias[J] : Sc[J]; };
  const int PerGroup = Grouped ? E / int(S.Groups) : E;
  GroupMask Kept = ~GroupMask(0);
  if (Grouped) {
    // A group scores the sum of its best K / GroupTopK selections; the best
    // GroupTopK groups keep their experts, the lower group on ties.
    const int Best = max(K / int(S.GroupTopK), 1);
    double GroupScore[MaxRouterGroups];
    for (int G = 0; G < int(S.Groups); ++G) {
      auto Members = picker(G * PerGroup, (G + 1) * PerGroup, Selection, AnyExpert{});
      double Sum = 0;
      for (int P = 0; P < Best; ++P) {
        Members.next();
        Sum += Members.PrevValue;
      }
      GroupScore[G] = Sum;
    }
    Kept = 0;
    for (int P = 0; P < int(S.GroupTopK); ++P) {
      int BestG = -1;
      for (int G = 0; G < int(S.Groups); ++G)
        if (!((Kept >> G) & 1) && (BestG < 0 || GroupScore[G] > GroupScore[BestG]))
          BestG = G;
      Kept |= GroupMask(1) << BestG;
    }
  }
  auto Candidates = picker(0, E, Selection, [&](int J) { return bool((Kept >> (J / PerGroup)) & 1); });
  double Sum = 0;
  for (int Pick = 0; Pick < K; ++Pick) {
    const int Id = Candidates.next();
    TopIdx[T * K + Pick] = Id;
    Sum += Sc[Id];
  }
  const bool Normalised = S.Sigmoid ? K > 1 : !S.PreSoftmax;
  const float Scaling = float(S.Scaling);
  for (int Pick = 0; Pick < K; ++Pick) {
    const float W = Sc[TopIdx[T * K + Pick]];
    TopW[T * K + Pick] = (Normalised ? float(W / Sum) : W) * Scaling;
  }
}

/// One thread per token: its top-k by score over every expert (what the
/// load-balancing loss counts) and what its scores are divided by.
__global__ void auxPicksKernel(RouterSpec S, int64_t N, const float *Scores, int32_t *Picks, double *Div) {
  const int64_t T = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (T >= N)
    return;
  const int E = int(S.Experts), K = int(S.TopK);
  const float *Sc = Scores + T * E;
  double Sum = 0;
  for (int J = 0; J < E; ++J)
    Sum += Sc[J];
  Div[T] = S.Sigmoid ? Sum + AuxScoreEpsilon : 1.0;
  auto Score = [&](int J) { return Sc[J]; };
  auto ByScore = picker(0, E, Score, AnyExpert{});
  for (int Pick = 0; Pick < K; ++Pick)
    Picks[T * K + Pick] = ByScore.next();
}

/// Thread e counts the copies of expert e and sums its divided scores over
/// the tokens in order; thread E writes N.
__global__ void routerStatsKernel(int64_t N, int64_t E, int64_t K, const float *Scores, const int32_t *Picks,
                                  const double *Div, float *Stats) {
  const int64_t J = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (J > E)
    return;
  if (J == E) {
    Stats[2 * E] = float(N);
    return;
  }
  float Count = 0.f, Sum = 0.f;
  for (int64_t I = 0; I < N * K; ++I)
    Count += Picks[I] == J ? 1.f : 0.f;
  for (int64_t I = 0; I < N; ++I)
    Sum += float(Scores[I * E + J] / Div[I]);
  Stats[J] = Count;
  Stats[E + J] = Sum;
}

/// One thread per token: model/Router.cpp's Router::backward.
__global__ void routerBackwardKernel(RouterSpec S, int64_t N, const float *Scores, const int32_t *TopIdx,
                                     const float *TopW, const float *DTopW, const float *Fraction, double AuxPerScore,
                                     float *DLogits) {
  const int64_t T = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (T >= N)
    return;
  const int E = int(S.Experts), K = int(S.TopK);
  const float *Sc = Scores + T * E, *Wt = TopW + T * K, *Dw = DTopW + T * K;
  const int32_t *Idx = TopIdx + T * K;
  float *Out = DLogits + T * E;
  // The aux loss's share of dScore_j (a sigmoid router's reads a_j = s_j /
  // (sum s + eps)), then the routing weights' of the picked experts.
  double Div = 1, AuxDot = 0;
  if (S.Sigmoid) {
    double Sum = 0;
    for (int J = 0; J < E; ++J)
      Sum += Sc[J];
    Div = Sum + AuxScoreEpsilon;
    for (int J = 0; J < E; ++J)
      AuxDot += AuxPerScore * Fraction[J] * (Sc[J] / Div);
  }
  const bool Normalised = S.Sigmoid ? K > 1 : !S.PreSoftmax;
  double PickSum = 0, PickDot = 0;
  for (int P = 0; P < K; ++P) {
    PickSum += Sc[Idx[P]];
    PickDot += double(Dw[P]) * Wt[P];
  }
  auto DScore = [&](int J) {
    double D = S.Sigmoid ? (AuxPerScore * Fraction[J] - AuxDot) / Div : AuxPerScore * Fraction[J];
    for (int P = 0; P < K; ++P)
      if (Idx[P] == J)
        D += Normalised ? (S.Scaling * Dw[P] - PickDot) / PickSum : S.Scaling * Dw[P];
    return D;
  };
  if (S.Sigmoid) {
    for (int J = 0; J < E; ++J)
      Out[J] = float(DScore(J) * Sc[J] * (1.0 - Sc[J]));
    return;
  }
  double Dot = 0;
  for (int J = 0; J < E; ++J)
    Dot += DScore(J) * Sc[J];
  for (int J = 0; J < E; ++J)
    Out[J] = float(Sc[J] * (DScore(J) - Dot));
}

// The permutation as a stable counting sort over tiles of PermuteTile
// copies: per tile a histogram of its experts, an exclusive scan of the
// (expert, tile) counts in expert-major order, then each copy's row = its
// (expert, tile) start + the copies of the same expert before it in the tile.
constexpr int PermuteTile = 256, ScanThreads = 1024;

/// Block b: TileCounts[e * Tiles + b] = copies of tile b routed to expert e.
__global__ void tileHistogramKernel(int64_t Copies, int64_t E, int64_t Tiles, const int32_t *TopIdx,
                                    int32_t *TileCounts) {
  __shared__ int Hist[MaxPermuteExperts];
  for (int64_t J = threadIdx.x; J < E; J += blockDim.x)
    Hist[J] = 0;
  __syncthreads();
  int64_t Copy = int64_t(blockIdx.x) * PermuteTile + threadIdx.x;
  if (Copy < Copies)
    atomicAdd(&Hist[TopIdx[Copy]], 1);
  __syncthreads();
  for (int64_t J = threadIdx.x; J < E; J += blockDim.x)
    TileCounts[J * Tiles + blockIdx.x] = Hist[J];
}

/// One block: TileCounts becomes its exclusive prefix sum (each thread scans
/// a contiguous run, the runs' totals are scanned in shared memory), and
/// ExpertCounts[e] the copies of expert e.
__global__ void tileScanKernel(int64_t E, int64_t Tiles, int64_t Copies, int32_t *TileCounts, int64_t *ExpertCounts) {
  __shared__ int64_t Partial[ScanThreads];
  const int64_t Total = E * Tiles, Run = (Total + ScanThreads - 1) / ScanThreads;
  const int64_t Start = int64_t(threadIdx.x) * Run;
  const int64_t Begin = Start < Total ? Start : Total, End = Begin + Run < Total ? Begin + Run : Total;
  int64_t Sum = 0;
  for (int64_t I = Begin; I < End; ++I)
    Sum += TileCounts[I];
  Partial[threadIdx.x] = Sum;
  __syncthreads();
  // Hillis-Steele inclusive scan of the runs' totals.
  for (int Offset = 1; Offset < ScanThreads; Offset *= 2) {
    int64_t Left = threadIdx.x >= unsigned(Offset) ? Partial[threadIdx.x - Offset] : 0;
    __syncthreads();
    Partial[threadIdx.x] += Left;
    __syncthreads();
  }
  int64_t Base = Partial[threadIdx.x] - Sum;
  for (int64_t I = Begin; I < End; ++I) {
    int64_t Count = TileCounts[I];
    TileCounts[I] = int32_t(Base);
    Base += Count;
  }
  __syncthreads();
  for (int64_t J = threadIdx.x; J < E; J += blockDim.x)
    ExpertCounts[J] = (J + 1 < E ? int64_t(TileCounts[(J + 1) * Tiles]) : Copies) - TileCounts[J * Tiles];
}

/// Block b places tile b's copies: after the copies of the same expert
/// before it in the tile, from the (expert, tile) start.
__global__ void tilePlaceKernel(int64_t Copies, int64_t Tiles, const int32_t *TopIdx, const int32_t *TileStarts,
                                int32_t *Permutation, int32_t *RowOfCopy) {
  __shared__ int32_t Experts[PermuteTile];
  const int64_t First = int64_t(blockIdx.x) * PermuteTile, Copy = First + threadIdx.x;
  Experts[threadIdx.x] = Copy < Copies ? TopIdx[Copy] : -1;
  __syncthreads();
  if (Copy >= Copies)
    return;
  const int32_t Expert = Experts[threadIdx.x];
  int32_t Before = 0;
  for (unsigned I = 0; I < threadIdx.x; ++I)
    Before += Experts[I] == Expert;
  int32_t Row = TileStarts[int64_t(Expert) * Tiles + blockIdx.x] + Before;
  Permutation[Row] = int32_t(Copy);
  RowOfCopy[Copy] = Row;
}

/// One block per output row; threads stride over the features.
__global__ void permuteKernel(int64_t K, int64_t H, const bf16 *X, const int32_t *Permutation, bf16 *Out) {
  int64_t Row = blockIdx.x;
  const bf16 *Src = X + int64_t(Permutation[Row] / K) * H;
  for (int64_t C = threadIdx.x; C < H; C += blockDim.x)
    Out[Row * H + C] = Src[C];
}

/// One block per token: sums its K rows in k order.
__global__ void gatherSumKernel(int64_t K, int64_t H, const bf16 *Rows, const int32_t *RowOfCopy, const float *W,
                                bf16 *Y) {
  int64_t N = blockIdx.x;
  for (int64_t C = threadIdx.x; C < H; C += blockDim.x) {
    float Acc = 0.f;
    for (int64_t P = 0; P < K; ++P) {
      float Weight = W ? W[N * K + P] : 1.f;
      Acc += Weight * toF(Rows[int64_t(RowOfCopy[N * K + P]) * H + C]);
    }
    Y[N * H + C] = toB(Acc);
  }
}

/// One block per copy: the weighted row back and the weight's gradient.
__global__ void unpermuteBackwardKernel(int64_t K, int64_t H, const bf16 *DY, const bf16 *Rows,
                                        const int32_t *RowOfCopy, const float *W, bf16 *DRows, float *DW) {
  __shared__ float Partial[32];
  int64_t Copy = blockIdx.x, N = Copy / K, Row = RowOfCopy[Copy];
  float Weight = W[Copy], Dot = 0.f;
  for (int64_t C = threadIdx.x; C < H; C += blockDim.x) {
    float G = toF(DY[N * H + C]);
    DRows[Row * H + C] = toB(Weight * G);
    Dot += G * toF(Rows[Row * H + C]);
  }
  for (int Off = 16; Off > 0; Off >>= 1)
    Dot += __shfl_xor_sync(0xffffffffu, Dot, Off);
  if (threadIdx.x % 32 == 0)
    Partial[threadIdx.x / 32] = Dot;
  __syncthreads();
  if (threadIdx.x == 0) {
    float Sum = 0.f;
    for (int I = 0; I < int(blockDim.x / 32); ++I)
      Sum += Partial[I];
    DW[Copy] = Sum;
  }
}

} // namespace

bool routerKernelTakes(const RouterSpec &S) {
  if (S.Experts < 1 || S.TopK < 1 || S.TopK > S.Experts || S.Experts > std::numeric_limits<int32_t>::max())
    return false;
  const bool Grouped = S.Groups > 1 && S.GroupTopK < S.Groups;
  return !Grouped || (S.Groups <= MaxRouterGroups && S.Experts % S.Groups == 0 && S.GroupTopK >= 1);
}

namespace {
void checkRouter(const RouterSpec &S) {
  if (!routerKernelTakes(S))
    throw std::invalid_argument("router: no kernel for " + std::to_string(S.Experts) + " experts, top " +
                                std::to_string(S.TopK) + ", " + std::to_string(S.Groups) + " groups");
}
} // namespace

void balancedLogits(int64_t N, int64_t E, const uint64_t *Keys, float *Logits, cudaStream_t Stream) {
  if (N * E == 0)
    return;
  balancedLogitsKernel<<<unsigned(std::min<int64_t>(blocksFor(N * E, 256), 4096)), 256, 0, Stream>>>(N, E, Keys,
                                                                                                     Logits);
  MOERT_CUDA_CHECK_LAUNCH();
}

void routeTokens(const RouterSpec &S, int64_t N, const float *Logits, const float *Bias, float *Scores, int32_t *TopIdx,
                 float *TopW, cudaStream_t Stream) {
  checkRouter(S);
  if (N == 0)
    return;
  routeTokensKernel<<<blocksFor(N, 128), 128, 0, Stream>>>(S, N, Logits, Bias, Scores, TopIdx, TopW);
  MOERT_CUDA_CHECK_LAUNCH();
}

void routerStats(const RouterSpec &S, int64_t N, const float *Scores, int32_t *Picks, double *Div, float *Stats,
                 cudaStream_t Stream) {
  checkRouter(S);
  if (N > 0) {
    auxPicksKernel<<<blocksFor(N, 128), 128, 0, Stream>>>(S, N, Scores, Picks, Div);
    MOERT_CUDA_CHECK_LAUNCH();
  }
  routerStatsKernel<<<blocksFor(S.Experts + 1, 128), 128, 0, Stream>>>(N, S.Experts, S.TopK, Scores, Picks, Div, Stats);
  MOERT_CUDA_CHECK_LAUNCH();
}

void routerBackward(const RouterSpec &S, int64_t N, const float *Scores, const int32_t *TopIdx, const float *TopW,
                    const float *DTopW, const float *Fraction, double AuxPerScore, float *DLogits,
                    cudaStream_t Stream) {
  checkRouter(S);
  if (N == 0)
    return;
  routerBackwardKernel<<<blocksFor(N, 128), 128, 0, Stream>>>(S, N, Scores, TopIdx, TopW, DTopW, Fraction, AuxPerScore,
                                                              DLogits);
  MOERT_CUDA_CHECK_LAUNCH();
}

size_t permutationScratch(int64_t Copies, int64_t E) { return size_t(E * ((Copies + PermuteTile - 1) / PermuteTile)); }

void buildPermutation(int64_t N, int64_t K, int64_t E, const int32_t *TopIdx, int32_t *Permutation, int32_t *RowOfCopy,
                      int64_t *ExpertCounts, int32_t *Scratch, cudaStream_t Stream) {
  if (E < 1 || E > MaxPermuteExperts)
    throw std::invalid_argument("buildPermutation: " + std::to_string(E) + " experts; 1 to " +
                                std::to_string(MaxPermuteExperts) + " supported");
  const int64_t Copies = N * K;
  if (Copies > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("buildPermutation: more copies than int32 rows");
  if (Copies == 0) {
    MOERT_CUDA_CHECK(cudaMemsetAsync(ExpertCounts, 0, size_t(E) * sizeof(int64_t), Stream));
    return;
  }
  const int64_t Tiles = (Copies + PermuteTile - 1) / PermuteTile;
  tileHistogramKernel<<<unsigned(Tiles), PermuteTile, 0, Stream>>>(Copies, E, Tiles, TopIdx, Scratch);
  MOERT_CUDA_CHECK_LAUNCH();
  tileScanKernel<<<1, ScanThreads, 0, Stream>>>(E, Tiles, Copies, Scratch, ExpertCounts);
  MOERT_CUDA_CHECK_LAUNCH();
  tilePlaceKernel<<<unsigned(Tiles), PermuteTile, 0, Stream>>>(Copies, Tiles, TopIdx, Scratch, Permutation, RowOfCopy);
  MOERT_CUDA_CHECK_LAUNCH();
}

void permuteTokens(int64_t N, int64_t K, int64_t H, const bf16 *X, const int32_t *Permutation, bf16 *Out,
                   cudaStream_t Stream) {
  if (N * K == 0)
    return;
  permuteKernel<<<unsigned(N * K), 128, 0, Stream>>>(K, H, X, Permutation, Out);
  MOERT_CUDA_CHECK_LAUNCH();
}

void permuteTokensBackward(int64_t N, int64_t K, int64_t H, const bf16 *DRows, const int32_t *RowOfCopy, bf16 *DX,
                           cudaStream_t Stream) {
  if (N == 0)
    return;
  gatherSumKernel<<<unsigned(N), 128, 0, Stream>>>(K, H, DRows, RowOfCopy, nullptr, DX);
  MOERT_CUDA_CHECK_LAUNCH();
}

void unpermuteTokens(int64_t N, int64_t K, int64_t H, const bf16 *Rows, const int32_t *RowOfCopy, const float *W,
                     bf16 *Y, cudaStream_t Stream) {
  if (N == 0)
    return;
  gatherSumKernel<<<unsigned(N), 128, 0, Stream>>>(K, H, Rows, RowOfCopy, W, Y);
  MOERT_CUDA_CHECK_LAUNCH();
}

void unpermuteTokensBackward(int64_t N, int64_t K, int64_t H, const bf16 *DY, const bf16 *Rows,
                             const int32_t *RowOfCopy, const float *W, bf16 *DRows, float *DW, cudaStream_t Stream) {
  if (N * K == 0)
    return;
  unpermuteBackwardKernel<<<unsigned(N * K), 128, 0, Stream>>>(K, H, DY, Rows, RowOfCopy, W, DRows, DW);
  MOERT_CUDA_CHECK_LAUNCH();
}

} // namespace moert::cuda
