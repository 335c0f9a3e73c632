//===- kernels/cuda/DeviceBuffer.h - Owned device arrays and bf16 copies --===//
//
// The CUDA backend stores activations and weights in BF16 (__nv_bfloat16) and
// accumulates in fp32; master weights, optimizer moments, softmax statistics
// (Lse) and gradient accumulators stay fp32. DeviceBuffer<T> owns one block
// of the caching allocator (DeviceAllocator.h); the helpers move host fp32 data in and out, rounding to bf16
// (round-to-nearest-even) on the way in.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_DEVICEBUFFER_H
#define MOERT_KERNELS_CUDA_DEVICEBUFFER_H

#include "kernels/cuda/CudaCheck.h"
#include "kernels/cuda/DeviceAllocator.h"

#include <cuda_bf16.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace moert::cuda {

using bf16 = __nv_bfloat16;

template <typename T> class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t Count) { resize(Count); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  DeviceBuffer(DeviceBuffer &&O) noexcept : Ptr(std::exchange(O.Ptr, nullptr)), Count(std::exchange(O.Count, 0)) {}
  DeviceBuffer &operator=(DeviceBuffer &&O) noexcept {
    if (this != &O) {
      release();
      Ptr = std::exchange(O.Ptr, nullptr);
      Count = std::exchange(O.Count, 0);
    }
    return *this;
  }

  /// Reallocates (contents are lost) unless the size is unchanged.
  void resize(size_t NewCount) {
    if (NewCount == Count)
      return;
    release();
    if (NewCount)
      Ptr = static_cast<T *>(deviceAllocate(NewCount * sizeof(T)));
    Count = NewCount;
  }
  void zero() {
    if (Count)
      MOERT_CUDA_CHECK(cudaMemset(Ptr, 0, Count * sizeof(T)));
  }
  void upload(const std::vector<T> &Host) {
    resize(Host.size());
    if (Count)
      MOERT_CUDA_CHECK(cudaMemcpy(Ptr, Host.data(), Count * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> Host(Count);
    if (Count)
      MOERT_CUDA_CHECK(cudaMemcpy(Host.data(), Ptr, Count * sizeof(T), cudaMemcpyDeviceToHost));
    return Host;
  }

  T *data() { return Ptr; }
  const T *data() const { return Ptr; }
  size_t size() const { return Count; }
  size_t bytes() const { return Count * sizeof(T); }

private:
  void release() {
    deviceRelease(Ptr); // back to the cache (DeviceAllocator.h); never throws
    Ptr = nullptr;
    Count = 0;
  }
  T *Ptr = nullptr;
  size_t Count = 0;
};

/// Host conversions (round to nearest even, as the device's __float2bfloat16).
std::vector<bf16> toBf16(const float *Data, size_t Count);
inline std::vector<bf16> toBf16(const std::vector<float> &V) { return toBf16(V.data(), V.size()); }
std::vector<float> fromBf16(const std::vector<bf16> &V);
/// Each value rounded through bf16 and back: the exact inputs a bf16 kernel
/// sees, for references computed on the host.
std::vector<float> roundedToBf16(const std::vector<float> &V);

/// Device buffers from host fp32 data, and back.
DeviceBuffer<bf16> uploadBf16(const std::vector<float> &Host);
DeviceBuffer<float> uploadF32(const std::vector<float> &Host);
std::vector<float> downloadBf16(const DeviceBuffer<bf16> &Buffer);

} // namespace moert::cuda

#endif
