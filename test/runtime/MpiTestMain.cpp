//===- MpiTestMain.cpp - GoogleTest main for tests run under mpirun -------===//
//
// Every rank runs every test; only rank 0 prints. The process exits non-zero
// on every rank when any rank failed, so mpirun reports the failure.
//
//===----------------------------------------------------------------------===//
#include "MpiTestEnv.h"

#include <gtest/gtest.h>
#include <mpi.h>

namespace moert::test {
CommWorld *TheWorld = nullptr;
CommWorld &world() { return *TheWorld; }
} // namespace moert::test

int main(int Argc, char **Argv) {
  auto World = moert::createMpiWorld(&Argc, &Argv);
  moert::test::TheWorld = World.get();
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
