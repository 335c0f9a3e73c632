//===- comm/mpi/MpiComm.h - Communicator over MPI (CPU backend) ------------===//
#ifndef MOERT_COMM_MPI_MPICOMM_H
#define MOERT_COMM_MPI_MPICOMM_H

#include "comm/Communicator.h"

namespace moert {

/// Initializes MPI (if needed) and returns the world. MPI errors abort the
/// whole job with the failing call named, instead of hanging the other ranks.
/// Finalizes MPI when destroyed.
std::unique_ptr<CommWorld> createMpiWorld(int *Argc, char ***Argv);

} // namespace moert

#endif
