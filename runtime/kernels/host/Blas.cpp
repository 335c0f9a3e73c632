#include "kernels/host/Blas.h"

#include "kernels/Backend.h"

#include <cblas.h>

#include <chrono>

namespace moert {

static double GemmSeconds = 0;

void gemmOn(ComputeBackend &Backend, const GemmArgs &G) {
  if (G.M == 0 || G.N == 0)
    return;
  auto Start = std::chrono::steady_clock::now();
  Backend.gemm(G);
  GemmSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - Start).count();
}

void gemmStrided(bool TransA, bool TransB, int64_t M, int64_t N, int64_t K, float Alpha, const float *A, int64_t LdA,
                 const float *B, int64_t LdB, float Beta, float *C, int64_t LdC) {
  gemmOn(currentBackend(), {TransA, TransB, M, N, K, Alpha, A, LdA, B, LdB, Beta, C, LdC});
}

void gemm(bool TransA, bool TransB, int64_t M, int64_t N, int64_t K, float Alpha, const float *A, const float *B,
          float Beta, float *C) {
  gemmStrided(TransA, TransB, M, N, K, Alpha, A, TransA ? M : K, B, TransB ? K : N, Beta, C, N);
}

void setBlasThreads(int Threads) { openblas_set_num_threads(Threads); }

double blasSeconds() { return GemmSeconds; }

} // namespace moert
