//===- comm/nccl/HostStagedComm.h - Device buffers over a host communicator
//===//
//
// A DeviceCommunicator that copies device buffers to host memory, runs the
// operation on a host Communicator (MPI), and copies the result back. Slow,
// but it lets several ranks share ONE GPU, which NCCL refuses: the multi-rank
// GPU tests (CP rings, EP all-to-all with CUDA kernels) run this way on a
// single-GPU machine. Every call is synchronous: it waits for the compute
// stream before reading, and the results are in place when it returns.
// Non-blocking requests complete at wait() (the receive's copy back happens
// there).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_COMM_NCCL_HOSTSTAGEDCOMM_H
#define MOERT_COMM_NCCL_HOSTSTAGEDCOMM_H

#include "comm/nccl/NcclComm.h"

namespace moert {

/// Host must outlive the result.
std::unique_ptr<DeviceCommunicator> createHostStagedCommunicator(Communicator &Host);

} // namespace moert

#endif
