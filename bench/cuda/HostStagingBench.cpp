//===- HostStagingBench.cpp - What converting on the host would cost -------===//
//
// The CUDA backend moves activations in fp32 and rounds them to bf16 on the
// device (kernels/cuda/CudaBackend.cpp, Stager). The alternative, rounding on
// the host and moving half the bytes, costs a conversion pass per element on
// one core; this measures that pass (the backend's own toBf16 and fromBf16)
// and a plain fp32 copy of the same elements, so that the choice rests on a
// number of this machine (no GPU needed). Where a CUDA device is present it
// also times both ways whole, to the device and back: the fp32 copy with the
// device's cast against the host's conversion with the bf16 copy (pageable
// host memory, as the backend's arrays are). Prints a line of ns per element
// for each.
//
//===----------------------------------------------------------------------===//
#include "kernels/cuda/DeviceBuffer.h"
#include "kernels/cuda/Elementwise.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

/// The best of Runs timings of Body, in ns per element.
template <typename Fn> double nsPerElement(size_t Count, int Runs, Fn Body) {
  double Best = 1e30;
  for (int R = 0; R < Runs; ++R) {
    auto Start = std::chrono::steady_clock::now();
    Body();
    double Ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - Start).count();
    Best = std::min(Best, Ns / double(Count));
  }
  return Best;
}

} // namespace

int main() {
  using namespace moert::cuda;
  const size_t Count = size_t(1) << 24;
  std::vector<float> X(Count);
  for (size_t I = 0; I < Count; ++I)
    X[I] = float(I % 1000) * 0.001f - 0.5f;
  std::vector<bf16> Narrow;
  std::vector<float> Wide, Copy(Count);
  double To = nsPerElement(Count, 5, [&] { Narrow = toBf16(X); });
  double From = nsPerElement(Count, 5, [&] { Wide = fromBf16(Narrow); });
  double Copied = nsPerElement(Count, 5, [&] { std::copy(X.begin(), X.end(), Copy.begin()); });
  if (Wide[Count / 2] != Wide[Count / 2] || Copy[Count / 3] != X[Count / 3])
    return 1;
  std::printf("host ns per element: to bf16 %.2f, from bf16 %.2f, fp32 copy %.2f\n", To, From, Copied);

  int Devices = 0;
  if (cudaGetDeviceCount(&Devices) != cudaSuccess || Devices == 0)
    return 0;
  DeviceBuffer<float> DeviceWide(Count);
  DeviceBuffer<bf16> DeviceNarrow(Count);
  auto Synced = [](auto Body) {
    return [Body] {
      Body();
      MOERT_CUDA_CHECK(cudaDeviceSynchronize());
    };
  };
  double UpDevice = nsPerElement(
      Count, 5, Synced([&] {
        MOERT_CUDA_CHECK(cudaMemcpy(DeviceWide.data(), X.data(), Count * sizeof(float), cudaMemcpyHostToDevice));
        castToBf16(int64_t(Count), DeviceWide.data(), DeviceNarrow.data(), nullptr);
      }));
  double UpHost = nsPerElement(
      Count, 5, Synced([&] {
        Narrow = toBf16(X);
        MOERT_CUDA_CHECK(cudaMemcpy(DeviceNarrow.data(), Narrow.data(), Count * sizeof(bf16), cudaMemcpyHostToDevice));
      }));
  double DownDevice = nsPerElement(
      Count, 5, Synced([&] {
        castToF32(int64_t(Count), DeviceNarrow.data(), DeviceWide.data(), nullptr);
        MOERT_CUDA_CHECK(cudaMemcpy(Copy.data(), DeviceWide.data(), Count * sizeof(float), cudaMemcpyDeviceToHost));
      }));
  double DownHost = nsPerElement(
      Count, 5, Synced([&] {
        std::vector<bf16> Back(Count);
        MOERT_CUDA_CHECK(cudaMemcpy(Back.data(), DeviceNarrow.data(), Count * sizeof(bf16), cudaMemcpyDeviceToHost));
        Wide = fromBf16(Back);
      }));
  std::printf("device ns per element: up rounded on the device %.2f, on the host %.2f; down widened on the device "
              "%.2f, on the host %.2f\n",
              UpDevice, UpHost, DownDevice, DownHost);
  return 0;
}
