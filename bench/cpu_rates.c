/* The two rates of one CPU core that the `cpu` system of the catalog stands
 * for (lib/Catalog/gpus.moe): OpenBLAS's single-threaded sgemm on square
 * matrices (what moerun's matrix products run on), and a STREAM-style triad
 * (what its memory-bound loops run at). Prints one JSON object. Built and run
 * by bench/runtime_speed.py with OPENBLAS_NUM_THREADS=1, at -O3 as the Release
 * build of moerun. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec T;
  clock_gettime(CLOCK_MONOTONIC, &T);
  return (double)T.tv_sec + 1e-9 * (double)T.tv_nsec;
}

/* Best of three one-second runs of C = A B, n x n. */
static double sgemmGflops(int N) {
  float *A = malloc(sizeof(float) * N * N), *B = malloc(sizeof(float) * N * N), *C = malloc(sizeof(float) * N * N);
  for (long Ix = 0; Ix < (long)N * N; ++Ix) {
    A[Ix] = 1e-3f * (float)(Ix % 7);
    B[Ix] = 1e-3f * (float)(Ix % 5);
  }
  double Best = 0;
  for (int Rep = 0; Rep < 3; ++Rep) {
    double T0 = now();
    long K = 0;
    do {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, A, N, B, N, 0.0f, C, N);
      ++K;
    } while (now() - T0 < 1.0);
    double Rate = 2.0 * N * N * (double)N * (double)K / (now() - T0) / 1e9;
    Best = Rate > Best ? Rate : Best;
  }
  free(A);
  free(B);
  free(C);
  return Best;
}

/* c = a + s b over arrays far larger than the caches: 12 bytes moved per
 * element (the write-allocate read not counted, as STREAM does). */
static double triadGBs(void) {
  long N = 1L << 25;
  float *A = malloc(sizeof(float) * N), *B = malloc(sizeof(float) * N), *C = malloc(sizeof(float) * N);
  for (long Ix = 0; Ix < N; ++Ix) {
    A[Ix] = 1.0f;
    B[Ix] = 2.0f;
    C[Ix] = 0.0f;
  }
  double Best = 0;
  for (int Rep = 0; Rep < 8; ++Rep) {
    double T0 = now();
    for (long Ix = 0; Ix < N; ++Ix)
      C[Ix] = A[Ix] + 1.5f * B[Ix];
    double Rate = 12.0 * (double)N / (now() - T0) / 1e9;
    Best = Rate > Best ? Rate : Best;
  }
  volatile float Sink = C[N / 2];
  (void)Sink;
  free(A);
  free(B);
  free(C);
  return Best;
}

int main(void) {
  printf("{\"sgemm_1024_gflops\": %.1f, \"triad_gbs\": %.1f}\n", sgemmGflops(1024), triadGBs());
  return 0;
}
