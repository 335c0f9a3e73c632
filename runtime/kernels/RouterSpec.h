//===- kernels/RouterSpec.h - What an MoE router does with its logits -----===//
//
// The router's settings (model/Model.h's ModelConfig fields), as the compute
// backend's operations (Backend.h's RouterArgs) and the CUDA kernels
// (kernels/cuda/Moe.h) take them.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_ROUTERSPEC_H
#define MOERT_KERNELS_ROUTERSPEC_H

#include <cstdint>

namespace moert {

struct RouterSpec {
  int64_t Experts = 0, TopK = 0;
  /// Group-limited routing where Groups > 1 and GroupTopK < Groups.
  int64_t Groups = 1, GroupTopK = 1;
  bool Sigmoid = false, PreSoftmax = false;
  double Scaling = 1.0;
};

} // namespace moert

#endif
