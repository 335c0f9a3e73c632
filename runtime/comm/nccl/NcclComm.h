//===- comm/nccl/NcclComm.h - Communicator over NCCL (CUDA backend) -------===//
//
// The plan's groups on GPUs: one ncclComm_t per group, bootstrapped through
// MPI (rank 0 of each group creates the ncclUniqueId and broadcasts it over
// the group's MPI communicator; then ncclCommInitRank). Every buffer passed to
// these communicators is a DEVICE pointer on the communicator's GPU.
//
// Streams and ordering. Each communicator owns a stream for collectives and
// one for point-to-point transfers. A call is stream-ordered against the
// caller's compute stream (setComputeStream, default: the legacy default
// stream): the NCCL work waits for everything already queued on the compute
// stream, and everything queued on the compute stream afterwards waits for
// the NCCL work. That is what the Communicator interface's "blocking" means on
// this backend; the host does not wait (call synchronize() for that, or use a
// blocking cudaMemcpy, which orders after these streams since they are
// created blocking).
//
// Overlap: isend/irecv return at once; their Request's wait() makes the
// compute stream wait on the transfer (stream order, no host sync), so the
// caller can queue compute between posting and waiting: CP ring exchanges
// overlap attention, a pipeline stage's send overlaps its next op. NCCL
// requires sends and receives that wait on each other to be launched in one
// group (ncclSend: "if multiple ncclSend() and ncclRecv() operations need to
// progress concurrently to complete, they must be fused within a
// ncclGroupStart()/ncclGroupEnd() section"), and a pipeline rank's pending
// send to its successor and its receive from it, or a ring step's send and
// receive, do. So isend/irecv only post: the operations posted since the
// last launch are launched as one group at the first wait() of any of them
// (or before any other operation on the communicator), each after the
// compute stream's work at its posting. Sends posted before a receive that
// is waited on thus progress with it, as an MPI isend does while its rank
// waits. NCCL has no tags: messages between one pair of ranks match in
// posting order, which the pipeline executor and the CP ring keep the same
// on both sides. A rank must not isend/irecv to itself.
//
// Collectives: allReduceSum / reduceScatterSum / allGather are NCCL's;
// allToAllV and allToAll are grouped ncclSend/ncclRecv (ncclGroupStart/End);
// sendRecv is one group of a send and a receive (ring steps). barrier()
// synchronizes the streams and then the group's MPI communicator.
//
// NCCL refuses two ranks on one GPU: on a machine with one GPU, run one rank
// with NCCL, or use HostStagedComm (device buffers staged through host over
// the MPI communicator) for multi-rank tests.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_COMM_NCCL_NCCLCOMM_H
#define MOERT_COMM_NCCL_NCCLCOMM_H

#include "comm/Communicator.h"

#include <cuda_runtime.h>

#include <memory>

namespace moert {

/// A Communicator whose buffers are device pointers; adds the stream controls.
class DeviceCommunicator : public Communicator {
public:
  /// Later calls order themselves against Stream (see the file comment).
  virtual void setComputeStream(cudaStream_t Stream) = 0;
  /// Blocks the host until every operation issued so far has completed.
  virtual void synchronize() = 0;
};

/// The NCCL world: wraps the MPI world (for bootstrap, abort and host
/// barriers). Device is the CUDA device of this rank (usually the local rank
/// modulo the GPUs per node); it is made current before any NCCL call.
/// split() returns DeviceCommunicator objects (dynamic_cast if the stream
/// controls are needed). Mpi must outlive the result.
std::unique_ptr<CommWorld> createNcclWorld(CommWorld &Mpi, int Device);

/// One NCCL communicator over an existing MPI group: all members call this
/// together. Used by createNcclWorld's split(), and by tests.
std::unique_ptr<DeviceCommunicator> createNcclCommunicator(std::unique_ptr<Communicator> MpiGroup, int Device);

} // namespace moert

#endif
