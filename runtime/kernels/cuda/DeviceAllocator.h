//===- kernels/cuda/DeviceAllocator.h - Caching device allocator ----------===//
//
// Every device buffer of the CUDA backend comes from here. cudaMalloc and
// cudaFree synchronise the whole device, and a training step allocates the
// same shapes every step; so freed blocks are kept, per device and size
// class, and handed out again: after the first step a step calls neither.
//
// Size classes: multiples of 512 bytes up to 1 MiB, of 2 MiB above; a
// request is served by a cached block of exactly its class. When cudaMalloc
// runs out of memory the cache is returned to the device and the request
// tried once more.
//
// Reuse is ordered by the compute stream: a block released now may be given
// to work issued next on any stream ordered after the compute stream. Release
// a buffer only when the work that still reads it (a pending send, a
// collective on a communication stream) is ordered before the compute
// stream's later work: the communicators' wait() and their collectives do
// this.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_DEVICEALLOCATOR_H
#define MOERT_KERNELS_CUDA_DEVICEALLOCATOR_H

#include <cstddef>
#include <cstdint>

namespace moert::cuda {

/// The current device's figures, in bytes where named so.
struct DeviceMemoryStats {
  size_t AllocatedBytes = 0;     ///< in blocks handed out (class sizes)
  size_t ReservedBytes = 0;      ///< from cudaMalloc: handed out + cached
  size_t PeakAllocatedBytes = 0; ///< since the last resetDevicePeak()
  int64_t DeviceMallocs = 0;     ///< cudaMalloc calls
  int64_t CacheHits = 0;         ///< requests served from the cache
};

/// The size class of a request of Bytes (> 0).
size_t deviceSizeClass(size_t Bytes);
/// A block of at least Bytes on the current device; null for 0 bytes.
/// Throws std::runtime_error (with the device's figures) when the device has
/// no room even after returning the cache.
void *deviceAllocate(size_t Bytes);
/// Returns a block of deviceAllocate to the cache; null is ignored. Never
/// throws (destructors call it).
void deviceRelease(void *Ptr);
/// Returns the current device's cached blocks to the device.
void deviceEmptyCache();
DeviceMemoryStats deviceMemoryStats();
void resetDevicePeak();

} // namespace moert::cuda

#endif
