//===- EveryRankGroup.h - One group of the world's ranks, host and device -===//
//
// The multi-rank GPU tests' group: every rank of the world in one group, and
// its counterpart over device buffers through the host-staged communicator
// (the ranks share one GPU, which NCCL refuses).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_TEST_CUDA_EVERYRANKGROUP_H
#define MOERT_TEST_CUDA_EVERYRANKGROUP_H

#include "MpiTestEnv.h"

#include "comm/nccl/HostStagedComm.h"

#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace moert::test {

struct EveryRankGroup {
  std::unique_ptr<Communicator> Host;
  std::unique_ptr<DeviceCommunicator> Device; ///< over Host's buffers staged through host memory
  explicit EveryRankGroup(const std::string &Name) {
    std::vector<int> All(size_t(world().size()));
    std::iota(All.begin(), All.end(), 0);
    Host = world().split(Name, {All});
    Device = createHostStagedCommunicator(*Host);
  }
};

} // namespace moert::test

#endif
