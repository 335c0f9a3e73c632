//===- kernels/cuda/DeviceAllocator.cpp -----------------------------------===//
#include "kernels/cuda/DeviceAllocator.h"

#include "kernels/cuda/CudaCheck.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace moert::cuda {

namespace {

constexpr size_t SmallGranule = 512, LargeGranule = size_t(2) << 20, SmallLimit = size_t(1) << 20;

struct Block {
  int Device = 0;
  size_t Size = 0;
};

struct DeviceState {
  std::map<size_t, std::vector<void *>> Free; ///< cached blocks by class size
  DeviceMemoryStats Stats;
};

class Allocator {
public:
  void *allocate(size_t Bytes) {
    if (Bytes == 0)
      return nullptr;
    const size_t Size = deviceSizeClass(Bytes);
    int Device = 0;
    MOERT_CUDA_CHECK(cudaGetDevice(&Device));
    std::lock_guard<std::mutex> Lock(Mutex);
    DeviceState &D = Devices[Device];
    void *Ptr = nullptr;
    auto It = D.Free.find(Size);
    if (It != D.Free.end() && !It->second.empty()) {
      Ptr = It->second.back();
      It->second.pop_back();
      ++D.Stats.CacheHits;
#ifdef MOERT_POISON_REUSED_BLOCKS
      // As fresh memory in the CUDA emulation: NaN bytes make a read of
      // what the new owner has not written show in the tests.
      MOERT_CUDA_CHECK(cudaMemset(Ptr, 0xff, Size));
#endif
    } else {
      cudaError_t E = cudaMalloc(&Ptr, Size);
      if (E == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); // clear the error the failed call left
        emptyCacheLocked(D);
        E = cudaMalloc(&Ptr, Size);
      }
      if (E != cudaSuccess) {
        (void)cudaGetLastError();
        throw std::runtime_error("device " + std::to_string(Device) + ": cannot allocate " + std::to_string(Size) +
                                 " bytes (" + cudaGetErrorString(E) + "); " + std::to_string(D.Stats.AllocatedBytes) +
                                 " bytes in use; compare with the plan's memory.peak_bytes (moec plan) and lower the "
                                 "micro batch or recompute more");
      }
      ++D.Stats.DeviceMallocs;
      D.Stats.ReservedBytes += Size;
    }
    Blocks[Ptr] = {Device, Size};
    D.Stats.AllocatedBytes += Size;
    if (D.Stats.AllocatedBytes > D.Stats.PeakAllocatedBytes)
      D.Stats.PeakAllocatedBytes = D.Stats.AllocatedBytes;
    return Ptr;
  }

  void release(void *Ptr) noexcept {
    if (!Ptr)
      return;
    std::lock_guard<std::mutex> Lock(Mutex);
    auto It = Blocks.find(Ptr);
    if (It == Blocks.end())
      return; // not ours: nothing to return
    DeviceState &D = Devices[It->second.Device];
    D.Stats.AllocatedBytes -= It->second.Size;
    D.Free[It->second.Size].push_back(Ptr);
    Blocks.erase(It);
  }

  void emptyCache() {
    int Device = 0;
    MOERT_CUDA_CHECK(cudaGetDevice(&Device));
    std::lock_guard<std::mutex> Lock(Mutex);
    emptyCacheLocked(Devices[Device]);
  }

  DeviceMemoryStats stats() {
    int Device = 0;
    MOERT_CUDA_CHECK(cudaGetDevice(&Device));
    std::lock_guard<std::mutex> Lock(Mutex);
    return Devices[Device].Stats;
  }

  void resetPeak() {
    int Device = 0;
    MOERT_CUDA_CHECK(cudaGetDevice(&Device));
    std::lock_guard<std::mutex> Lock(Mutex);
    DeviceMemoryStats &S = Devices[Device].Stats;
    S.PeakAllocatedBytes = S.AllocatedBytes;
  }

private:
  /// The caller holds Mutex and D is the current device's.
  void emptyCacheLocked(DeviceState &D) {
    for (auto &[Size, Ptrs] : D.Free)
      for (void *Ptr : Ptrs) {
        cudaFree(Ptr);
        D.Stats.ReservedBytes -= Size;
      }
    D.Free.clear();
  }

  std::mutex Mutex;
  std::unordered_map<void *, Block> Blocks; ///< handed-out blocks
  std::map<int, DeviceState> Devices;
};

/// Never destroyed: buffers with static storage may be released after the
/// end of main, and the cached blocks stay reachable (not leaks) until the
/// process ends.
Allocator &allocator() {
  static Allocator *A = new Allocator;
  return *A;
}

} // namespace

size_t deviceSizeClass(size_t Bytes) {
  size_t Granule = Bytes <= SmallLimit ? SmallGranule : LargeGranule;
  return (Bytes + Granule - 1) / Granule * Granule;
}

void *deviceAllocate(size_t Bytes) { return allocator().allocate(Bytes); }
void deviceRelease(void *Ptr) { allocator().release(Ptr); }
void deviceEmptyCache() { allocator().emptyCache(); }
DeviceMemoryStats deviceMemoryStats() { return allocator().stats(); }
void resetDevicePeak() { allocator().resetPeak(); }

} // namespace moert::cuda
