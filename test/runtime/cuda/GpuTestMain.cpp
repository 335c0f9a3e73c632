//===- GpuTestMain.cpp - GoogleTest main for the GPU tests ----------------===//
//
// Like MpiTestMain, plus the device check: without a usable CUDA device the
// program prints "SKIPPED: no CUDA device" and exits 0 before running any
// test (ctest marks the test skipped on that line). With devices, rank r
// uses device r % count (ranks share a GPU when there are fewer GPUs).
//
//===----------------------------------------------------------------------===//
#include "MpiTestEnv.h"
#include "kernels/cuda/CudaCheck.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace moert::test {
CommWorld *TheWorld = nullptr;
CommWorld &world() { return *TheWorld; }
} // namespace moert::test

int main(int Argc, char **Argv) {
  auto World = moert::createMpiWorld(&Argc, &Argv);
  moert::test::TheWorld = World.get();
  int Devices = moert::cuda::deviceCount();
  // Every rank must agree, or some would wait in collectives forever.
  int MinDevices = 0;
  MPI_Allreduce(&Devices, &MinDevices, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (MinDevices == 0) {
    if (World->rank() == 0)
      std::printf("SKIPPED: no CUDA device (cudaGetDeviceCount found none); "
                  "%s ran no test\n",
                  Argc > 0 ? Argv[0] : "this GPU test");
    return 0;
  }
  moert::cuda::checkCuda(cudaSetDevice(World->rank() % MinDevices), "cudaSetDevice", __FILE__, __LINE__);
  if (World->rank() == 0)
    std::printf("GPU test on %s (%d device(s), %d rank(s))\n", moert::cuda::deviceDescription(0).c_str(), MinDevices,
                World->size());
  ::testing::InitGoogleTest(&Argc, Argv);
  if (World->rank() != 0) {
    auto &Listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete Listeners.Release(Listeners.default_result_printer());
  }
  int Failed = RUN_ALL_TESTS() != 0;
  int AnyFailed = 0;
  MPI_Allreduce(&Failed, &AnyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (AnyFailed && World->rank() == 0)
    std::fprintf(stderr, "some rank failed a test\n");
  World.reset();
  return AnyFailed;
}
