//===- parallel/cp/Ring.h - The ring schedule of context parallelism -*- C++ -*-===//
//
// The ring of context-parallel attention, written once for every backend (the
// host's ContextParallelAttention.cpp and the CUDA backend's
// kernels/cuda/RingAttention.cpp): each rank owns one K/V block; at step s it
// attends its queries to the block of rank (rank - s) mod size while the next
// hop of that block to the following rank is in flight, so the transfer
// overlaps the compute. In the backward the block's dK/dV travel with it,
// leaving after the compute of each step; after the last step the block in
// hand belongs to the next rank, which is where that hop sends them, so every
// rank ends holding its own block's gradients.
//
// A backend's block state provides:
//   const void *kv();  void *nextKv();  size_t kvCount();  DType kvType();
//   void attend(int Owner);   // the block in hand is Owner's
//   void swap();              // the received block (and gradients) in hand
// and for the backward also
//   const void *grad(); void *nextGrad(); size_t gradCount(); DType gradType();
// Buffers live on whatever device the communicator moves (a DeviceCommunicator
// orders its transfers against the backend's stream).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_PARALLEL_CP_RING_H
#define MOERT_PARALLEL_CP_RING_H

#include "comm/Communicator.h"

#include <memory>

namespace moert::ring {

// Tags keep the early K/V hop and the late gradient hop of one step apart.
constexpr int KvTag = 11;
constexpr int GradTag = 12;

/// One hop of the ring: posts the receive of the previous rank's buffer and
/// the send of ours; wait() completes both.
class Hop {
public:
  Hop(Communicator &Cp, const void *Send, void *Recv, size_t Count, DType T, int Tag) {
    const int Size = Cp.size(), Rank = Cp.rank();
    RecvReq = Cp.irecv(Recv, Count, (Rank + Size - 1) % Size, Tag, T);
    SendReq = Cp.isend(Send, Count, (Rank + 1) % Size, Tag, T);
  }
  void wait() {
    RecvReq->wait();
    SendReq->wait();
  }

private:
  std::unique_ptr<Request> RecvReq, SendReq;
};

/// The rank whose block is in hand at Step.
inline int ownerAt(const Communicator &Cp, int Step) { return (Cp.rank() - Step + Cp.size()) % Cp.size(); }

template <typename Block> void forward(Communicator &Cp, Block &B) {
  for (int Step = 0; Step < Cp.size(); ++Step) {
    std::unique_ptr<Hop> Kv;
    if (Step + 1 < Cp.size())
      Kv = std::make_unique<Hop>(Cp, B.kv(), B.nextKv(), B.kvCount(), B.kvType(), KvTag);
    B.attend(ownerAt(Cp, Step));
    if (Kv) {
      Kv->wait();
      B.swap();
    }
  }
}

template <typename Block> void backward(Communicator &Cp, Block &B) {
  const bool Ringed = Cp.size() > 1;
  for (int Step = 0; Step < Cp.size(); ++Step) {
    // K/V leave before the compute; their gradients only after it.
    std::unique_ptr<Hop> Kv, Grad;
    if (Step + 1 < Cp.size())
      Kv = std::make_unique<Hop>(Cp, B.kv(), B.nextKv(), B.kvCount(), B.kvType(), KvTag);
    B.attend(ownerAt(Cp, Step));
    if (Ringed)
      Grad = std::make_unique<Hop>(Cp, B.grad(), B.nextGrad(), B.gradCount(), B.gradType(), GradTag);
    if (Kv)
      Kv->wait();
    if (Grad) {
      Grad->wait();
      B.swap();
    }
  }
}

} // namespace moert::ring

#endif
