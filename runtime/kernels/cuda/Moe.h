//===- kernels/cuda/Moe.h - Router top-k, token permute and unpermute -----===//
//
// The MoE layer's routing on the GPU, with model/MoeBlock.cpp's and
// parallel/ep/TokenDispatcher.h's semantics:
//
//  * routeTokens: router logits [N, E] fp32 -> scores, each token's experts
//    and routing weights, model/Router.h's Router::route (softmax or
//    sigmoid, a softmax before or after the top-k, group-limited top-k, the
//    expert bias, the weights' scaling; the higher selection first and the
//    lower expert id on ties).
//  * routerStats: Router::stats, the 2E + 1 statistics the aux loss
//    all-reduces over the TpCp group.
//  * routerBackward: Router::backward, the logits' gradients from the
//    routing weights' and the aux loss's.
//  * buildPermutation: copy c = n * K + k goes to row Permutation^-1(c) of the
//    expert-major send buffer, sorted by expert then copy number (the
//    dispatcher's order); RowOfCopy is that inverse, ExpertCounts the rows per
//    expert.
//  * permuteTokens / unpermuteTokens and their backwards move bf16 rows; sums
//    over the K copies of a token run in k order in fp32.
//
// One thread per token in the router kernels (E up to a few hundred, as the
// host's loops over a token's experts, in their order, so the same
// arithmetic up to the device's exp and log); the
// permutation is a stable counting sort over tiles of copies (a histogram
// per tile, one scan, a placement per tile), parallel over the copies and
// deterministic.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_MOE_H
#define MOERT_KERNELS_CUDA_MOE_H

#include "kernels/RouterSpec.h"
#include "kernels/cuda/DeviceBuffer.h"

#include <cstdint>

namespace moert::cuda {

/// The most expert groups the kernels take.
constexpr int64_t MaxRouterGroups = 64;
/// A sigmoid router's aux scores are s / (sum s + this) (Router::AuxScoreEpsilon).
constexpr double AuxScoreEpsilon = 1e-20;
bool routerKernelTakes(const RouterSpec &S);

/// Logits [N, E] of forced balance: row I's drawn from Keys[I] and the
/// expert (Router::forceBalancedLogits; kernels/KeyedDraws.h).
void balancedLogits(int64_t N, int64_t E, const uint64_t *Keys, float *Logits, cudaStream_t Stream);

/// Logits [N, E] -> Scores [N, E] (may be Logits), TopIdx [N * K] (int32),
/// TopW [N * K]; Bias [E] (a sigmoid router's) or null.
void routeTokens(const RouterSpec &S, int64_t N, const float *Logits, const float *Bias, float *Scores, int32_t *TopIdx,
                 float *TopW, cudaStream_t Stream);

/// Stats [2E + 1] from Scores; Picks [N * K] and Div [N] are scratch.
void routerStats(const RouterSpec &S, int64_t N, const float *Scores, int32_t *Picks, double *Div, float *Stats,
                 cudaStream_t Stream);

/// DLogits [N, E] from DTopW [N * K]; Fraction [E] are the f_e of the aux
/// loss and AuxPerScore = AuxGradScale * AuxLossCoeff * E / GroupTokens.
void routerBackward(const RouterSpec &S, int64_t N, const float *Scores, const int32_t *TopIdx, const float *TopW,
                    const float *DTopW, const float *Fraction, double AuxPerScore, float *DLogits, cudaStream_t Stream);

/// The most experts buildPermutation takes (one shared-memory histogram).
constexpr int64_t MaxPermuteExperts = 1024;
/// int32 elements of scratch buildPermutation needs for Copies = N * K.
size_t permutationScratch(int64_t Copies, int64_t E);
/// Permutation [N * K] (send row -> copy), RowOfCopy [N * K] (copy -> send
/// row), ExpertCounts [E] (int64); Scratch holds permutationScratch(N * K, E)
/// int32. No host round trip: the counts stay on the device.
void buildPermutation(int64_t N, int64_t K, int64_t E, const int32_t *TopIdx, int32_t *Permutation, int32_t *RowOfCopy,
                      int64_t *ExpertCounts, int32_t *Scratch, cudaStream_t Stream);

/// Out [N * K, H]: row j = X[Permutation[j] / K].
void permuteTokens(int64_t N, int64_t K, int64_t H, const bf16 *X, const int32_t *Permutation, bf16 *Out,
                   cudaStream_t Stream);
/// Backward of permuteTokens: DX[n] = sum_k DRows[RowOfCopy[n K + k]].
void permuteTokensBackward(int64_t N, int64_t K, int64_t H, const bf16 *DRows, const int32_t *RowOfCopy, bf16 *DX,
                           cudaStream_t Stream);
/// Y[n] = sum_k W[n K + k] * Rows[RowOfCopy[n K + k]].
void unpermuteTokens(int64_t N, int64_t K, int64_t H, const bf16 *Rows, const int32_t *RowOfCopy, const float *W,
                     bf16 *Y, cudaStream_t Stream);
/// Backward of unpermuteTokens: DRows[RowOfCopy[c]] = W[c] * DY[c / K] and
/// DW[c] = <DY[c / K], Rows[RowOfCopy[c]]>.
void unpermuteTokensBackward(int64_t N, int64_t K, int64_t H, const bf16 *DY, const bf16 *Rows,
                             const int32_t *RowOfCopy, const float *W, bf16 *DRows, float *DW, cudaStream_t Stream);

} // namespace moert::cuda

#endif
