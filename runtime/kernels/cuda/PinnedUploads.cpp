//===- kernels/cuda/PinnedUploads.cpp -------------------------------------===//
#include "kernels/cuda/PinnedUploads.h"

#include "kernels/cuda/CudaCheck.h"

#include <cstring>

namespace moert::cuda {

PinnedUploads::PinnedUploads(size_t Capacity) : Ring(Capacity) {}

PinnedUploads::~PinnedUploads() {
  // Destructors must not throw: the copies still queued read the slab, so
  // they are waited for, and errors (a device already gone) are ignored.
  for (cudaEvent_t E : Pending) {
    cudaEventSynchronize(E);
    cudaEventDestroy(E);
  }
  for (cudaEvent_t E : Spare)
    cudaEventDestroy(E);
  if (Slab)
    cudaFreeHost(Slab);
}

bool PinnedUploads::copy(void *Device, const void *Host, size_t Bytes, cudaStream_t Stream) {
  if (!Ring.takes(Bytes))
    return false;
  if (!Slab)
    MOERT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&Slab), Ring.capacity(), cudaHostAllocDefault));
  // The span's event is at hand before the ring hands out the span, so that
  // the ring's spans and the queued events stay paired (an event never
  // recorded counts as done).
  cudaEvent_t Done = nullptr;
  if (Spare.empty()) {
    MOERT_CUDA_CHECK(cudaEventCreateWithFlags(&Done, cudaEventDisableTiming));
  } else {
    Done = Spare.back();
    Spare.pop_back();
  }
  const size_t Offset = Ring.place(Bytes, Next++, [&](uint64_t) {
    cudaEvent_t Copied = Pending.front();
    Pending.pop_front();
    MOERT_CUDA_CHECK(cudaEventSynchronize(Copied));
    Spare.push_back(Copied);
  });
  Pending.push_back(Done);
  std::memcpy(Slab + Offset, Host, Bytes);
  MOERT_CUDA_CHECK(cudaMemcpyAsync(Device, Slab + Offset, Bytes, cudaMemcpyHostToDevice, Stream));
  MOERT_CUDA_CHECK(cudaEventRecord(Done, Stream));
  return true;
}

} // namespace moert::cuda
