//===- AllocatorTest.cpp - The caching device allocator ---------------------===//
//
// Runs on GPUs and on the CUDA emulation. The emulation's cudaMalloc counts
// live bytes and can be given a limit, so poisoning and running out of device
// memory are tested there only (MOERT_CUDA_EMULATION).
//
//===----------------------------------------------------------------------===//
#ifdef MOERT_CUDA_EMULATION
#include "CudaEmu.h"
#endif
#include "kernels/cuda/DeviceAllocator.h"
#include "kernels/cuda/DeviceBuffer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

using namespace moert::cuda;

namespace {

TEST(DeviceAllocator, SizeClasses) {
  EXPECT_EQ(deviceSizeClass(1), 512u);
  EXPECT_EQ(deviceSizeClass(512), 512u);
  EXPECT_EQ(deviceSizeClass(513), 1024u);
  EXPECT_EQ(deviceSizeClass(size_t(1) << 20), size_t(1) << 20);
  EXPECT_EQ(deviceSizeClass((size_t(1) << 20) + 1), size_t(2) << 20);
  EXPECT_EQ(deviceSizeClass((size_t(5) << 20) + 7), size_t(6) << 20);
}

TEST(DeviceAllocator, ASteadyStepAllocatesFromTheCache) {
  deviceEmptyCache();
  const DeviceMemoryStats Before = deviceMemoryStats();
  // One "step": activations of a few shapes, freed in another order.
  auto step = [] {
    DeviceBuffer<float> A(1000), B(300000), C(1000);
    DeviceBuffer<bf16> D(4096);
    A.zero();
    EXPECT_NE(A.data(), C.data());
  };
  step();
  const DeviceMemoryStats First = deviceMemoryStats();
  EXPECT_EQ(First.DeviceMallocs - Before.DeviceMallocs, 4);
  EXPECT_EQ(First.AllocatedBytes, Before.AllocatedBytes); // all returned
  for (int I = 0; I < 5; ++I)
    step();
  const DeviceMemoryStats Later = deviceMemoryStats();
  EXPECT_EQ(Later.DeviceMallocs, First.DeviceMallocs); // no cudaMalloc after the first step
  EXPECT_EQ(Later.CacheHits - First.CacheHits, 20);
  EXPECT_EQ(Later.ReservedBytes, First.ReservedBytes);
  // The peak counts class sizes: 4096 + 1200128 + 4096 + 8192 bytes.
  EXPECT_GE(Later.PeakAllocatedBytes - Before.AllocatedBytes, size_t(4096 + 1200128 + 4096 + 8192));
  deviceEmptyCache();
  EXPECT_EQ(deviceMemoryStats().ReservedBytes, deviceMemoryStats().AllocatedBytes);
}

#ifdef MOERT_CUDA_EMULATION
TEST(DeviceAllocator, ReusedBlocksArePoisonedInTheEmulation) {
  // In the emulation a block handed out again is NaN-filled like fresh
  // memory, so a kernel that reads before it writes still fails its test.
  {
    DeviceBuffer<float> A(64);
    A.zero();
  }
  DeviceBuffer<float> B(64);
  for (float X : B.download())
    ASSERT_TRUE(std::isnan(X));
}

TEST(DeviceAllocator, RunningOutReturnsTheCacheAndRetries) {
  deviceEmptyCache();
  moert::emu::DeviceMemory &M = moert::emu::deviceMemory();
  const size_t Saved = M.Limit;
  M.Limit = M.LiveBytes + (size_t(8) << 20); // 8 MiB more
  {
    DeviceBuffer<char> Cached(size_t(6) << 20); // cached when it goes
  }
  EXPECT_EQ(deviceMemoryStats().ReservedBytes, size_t(6) << 20);
  // 6 MiB cached + 4 MiB is past the limit: the cache goes back first.
  DeviceBuffer<char> Other(size_t(4) << 20);
  EXPECT_EQ(deviceMemoryStats().ReservedBytes, size_t(4) << 20);
  // Past the limit with nothing cached: an error that says what is in use.
  try {
    DeviceBuffer<char> TooBig(size_t(5) << 20);
    ADD_FAILURE() << "allocated past the limit";
  } catch (const std::runtime_error &E) {
    EXPECT_NE(std::string(E.what()).find("cannot allocate 6291456 bytes"), std::string::npos) << E.what();
    EXPECT_NE(std::string(E.what()).find("4194304 bytes in use"), std::string::npos) << E.what();
  }
  M.Limit = Saved;
}
#endif // MOERT_CUDA_EMULATION

} // namespace
