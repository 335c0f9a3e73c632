//===- MpiTestEnv.h - Shared state for tests run under mpirun -------------===//
#ifndef MOERT_TEST_MPITESTENV_H
#define MOERT_TEST_MPITESTENV_H

#include "comm/mpi/MpiComm.h"

namespace moert::test {
/// The job's world, set up by MpiTestMain before the tests run.
CommWorld &world();
} // namespace moert::test

#endif
