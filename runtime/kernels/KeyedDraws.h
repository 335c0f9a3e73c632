//===- kernels/KeyedDraws.h - Counter-based draws on host and device ------===//
//
// splitmix64's finaliser and a standard normal draw that is a function of a
// key alone: what initParameter and forced-balance routing (Megatron's
// moe_router_force_load_balancing) draw from. Written once for the host's
// compiler and nvcc, so that a backend that routes on the device draws the
// logits there, the host's values up to the device's double log and cos.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_KEYEDDRAWS_H
#define MOERT_KERNELS_KEYEDDRAWS_H

#include "kernels/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace moert {

/// splitmix64's finaliser: a counter-based hash.
MOERT_HOST_DEVICE inline uint64_t mix64(uint64_t Z) {
  Z = (Z ^ (Z >> 30)) * 0xbf58476d1ce4e5b9ull;
  Z = (Z ^ (Z >> 27)) * 0x94d049bb133111ebull;
  return Z ^ (Z >> 31);
}

/// A standard normal draw that is a function of Key alone (Box-Muller over
/// two hashes of it).
MOERT_HOST_DEVICE inline double normalOfKey(uint64_t Key) {
  const double TwoPi = 6.283185307179586;
  // Two uniforms in (0, 1) from two hashes of the key.
  const double U1 = (double(mix64(Key * 2 + 0x9e3779b97f4a7c15ull) >> 11) + 0.5) * 0x1.0p-53;
  const double U2 = (double(mix64(Key * 2 + 1 + 0x9e3779b97f4a7c15ull) >> 11) + 0.5) * 0x1.0p-53;
  return sqrt(-2.0 * log(U1)) * cos(TwoPi * U2);
}

} // namespace moert

#endif
