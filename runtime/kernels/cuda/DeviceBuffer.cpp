//===- kernels/cuda/DeviceBuffer.cpp --------------------------------------===//
#include "kernels/cuda/DeviceBuffer.h"

namespace moert::cuda {

std::vector<bf16> toBf16(const float *Data, size_t Count) {
  std::vector<bf16> Out(Count);
  for (size_t I = 0; I < Count; ++I)
    Out[I] = __float2bfloat16_rn(Data[I]);
  return Out;
}

std::vector<float> fromBf16(const std::vector<bf16> &V) {
  std::vector<float> Out(V.size());
  for (size_t I = 0; I < V.size(); ++I)
    Out[I] = __bfloat162float(V[I]);
  return Out;
}

std::vector<float> roundedToBf16(const std::vector<float> &V) { return fromBf16(toBf16(V)); }

DeviceBuffer<bf16> uploadBf16(const std::vector<float> &Host) {
  DeviceBuffer<bf16> B;
  B.upload(toBf16(Host));
  return B;
}

DeviceBuffer<float> uploadF32(const std::vector<float> &Host) {
  DeviceBuffer<float> B;
  B.upload(Host);
  return B;
}

std::vector<float> downloadBf16(const DeviceBuffer<bf16> &Buffer) { return fromBf16(Buffer.download()); }

} // namespace moert::cuda
