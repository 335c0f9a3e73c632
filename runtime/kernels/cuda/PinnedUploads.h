//===- kernels/cuda/PinnedUploads.h - Uploads the host need not wait for ---===//
//
// A copy from pageable host memory to the device synchronizes its stream
// first (the CUDA Runtime API's "API synchronization behavior"): the host
// waits for every kernel queued before it. A copy from pinned memory is only
// queued. PinnedUploads copies the host's bytes into a ring of pinned memory
// (UploadRing.h) and queues the copy from there, with an event after it; a
// span of the ring is written again only after its event (the host waits
// then, and only for that copy, only once the ring has come round).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_PINNEDUPLOADS_H
#define MOERT_KERNELS_CUDA_PINNEDUPLOADS_H

#include "kernels/cuda/UploadRing.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace moert::cuda {

class PinnedUploads {
public:
  /// The ring's bytes, pinned on the first upload.
  static constexpr size_t DefaultCapacity = size_t(8) << 20;
  explicit PinnedUploads(size_t Capacity = DefaultCapacity);
  ~PinnedUploads();
  PinnedUploads(const PinnedUploads &) = delete;
  PinnedUploads &operator=(const PinnedUploads &) = delete;

  /// Queues a copy of Bytes from Host to Device on Stream and returns true;
  /// Host may be reused at once. False, with nothing done, where Bytes are
  /// more than the ring holds.
  bool copy(void *Device, const void *Host, size_t Bytes, cudaStream_t Stream);

private:
  UploadRing Ring;
  char *Slab = nullptr;
  uint64_t Next = 0;
  /// The events after the live spans' copies, oldest first (the ring's order).
  std::deque<cudaEvent_t> Pending;
  std::vector<cudaEvent_t> Spare;
};

} // namespace moert::cuda

#endif
