//===- UploadTest.cpp - Uploads through a ring of pinned memory -------------===//
//
// The ring's arithmetic (no CUDA), and PinnedUploads on a GPU or the CUDA
// emulation: every upload arrives whole however often the ring comes round,
// and the host's array may be reused as soon as the copy is queued.
//
//===----------------------------------------------------------------------===//
#ifdef MOERT_CUDA_EMULATION
#include "CudaEmu.h"
#endif
#include "kernels/cuda/CudaCheck.h"
#include "kernels/cuda/DeviceBuffer.h"
#include "kernels/cuda/PinnedUploads.h"
#include "kernels/cuda/UploadRing.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

using namespace moert::cuda;

namespace {

TEST(UploadRing, HandsOutSpansInOrderAndRetiresNoneWhileThereIsRoom) {
  UploadRing Ring(1024, 256);
  std::vector<uint64_t> Retired;
  auto Note = [&](uint64_t Id) { Retired.push_back(Id); };
  EXPECT_EQ(Ring.place(1, 0, Note), 0u);
  EXPECT_EQ(Ring.place(256, 1, Note), 256u);
  EXPECT_EQ(Ring.place(300, 2, Note), 512u); // two alignment units
  EXPECT_TRUE(Retired.empty());
  EXPECT_EQ(Ring.live(), 3u);
  // Full: the next span wraps to the start and retires the oldest only.
  EXPECT_EQ(Ring.place(200, 3, Note), 0u);
  EXPECT_EQ(Retired, (std::vector<uint64_t>{0}));
  EXPECT_EQ(Ring.live(), 3u);
}

TEST(UploadRing, AWrappingSpanRetiresTheSpansItSkipsFirst) {
  UploadRing Ring(1024, 128);
  std::vector<uint64_t> Retired;
  auto Note = [&](uint64_t Id) { Retired.push_back(Id); };
  EXPECT_EQ(Ring.place(640, 0, Note), 0u);   // [0, 640)
  EXPECT_EQ(Ring.place(384, 1, Note), 640u); // [640, 1024)
  EXPECT_EQ(Ring.place(512, 2, Note), 0u);   // wraps: [0, 512), over span 0
  EXPECT_EQ(Retired, (std::vector<uint64_t>{0}));
  EXPECT_EQ(Ring.place(100, 3, Note), 512u); // [512, 640): overlaps nothing
  EXPECT_EQ(Retired, (std::vector<uint64_t>{0}));
  // [640, 1152) does not fit: wrapping to 0 skips span 1 at the end and
  // overlaps span 2, both retired, oldest first; span 3 at [512, 640) stays.
  EXPECT_EQ(Ring.place(512, 4, Note), 0u);
  EXPECT_EQ(Retired, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(Ring.live(), 2u);
}

TEST(UploadRing, RefusesWhatItCannotHold) {
  UploadRing Ring(1024, 256);
  EXPECT_FALSE(Ring.takes(0));
  EXPECT_TRUE(Ring.takes(1024));
  EXPECT_FALSE(Ring.takes(1025));
  EXPECT_THROW(Ring.place(2048, 0, [](uint64_t) {}), std::invalid_argument);
  EXPECT_THROW(UploadRing(1000, 256), std::invalid_argument);
}

// Random sizes, some as large as the ring: no span handed out overlaps a
// span not yet retired, and spans are retired oldest first.
TEST(UploadRing, RandomSpansNeverOverlapALiveOne) {
  const size_t Capacity = 64 * 256;
  UploadRing Ring(Capacity, 256);
  std::mt19937 Gen(7);
  std::map<uint64_t, std::pair<size_t, size_t>> Live; // id -> [begin, end)
  uint64_t Oldest = 0;
  for (uint64_t Id = 0; Id < 5000; ++Id) {
    const size_t Bytes = 1 + Gen() % (Gen() % 8 == 0 ? Capacity : Capacity / 8);
    const size_t Offset = Ring.place(Bytes, Id, [&](uint64_t Retired) {
      ASSERT_EQ(Retired, Oldest) << "retired out of order";
      Live.erase(Retired);
      ++Oldest;
    });
    ASSERT_EQ(Offset % 256, 0u);
    ASSERT_LE(Offset + Bytes, Capacity);
    for (const auto &[Other, Span] : Live)
      ASSERT_TRUE(Offset + Bytes <= Span.first || Span.second <= Offset)
          << "span " << Id << " overlaps live span " << Other;
    Live[Id] = {Offset, Offset + Bytes};
    Oldest = Live.begin()->first;
    ASSERT_EQ(Ring.live(), Live.size());
  }
}

bool haveDevice() {
  int Count = 0;
  return cudaGetDeviceCount(&Count) == cudaSuccess && Count > 0;
}

TEST(PinnedUploads, EveryUploadArrivesWholeAsTheRingComesRound) {
  if (!haveDevice())
    GTEST_SKIP() << "no CUDA device";
  PinnedUploads Uploads(4096);
  std::mt19937 Gen(11);
  std::vector<DeviceBuffer<int32_t>> Buffers;
  std::vector<std::vector<int32_t>> Sent;
  std::vector<int32_t> Host;
  for (int I = 0; I < 64; ++I) {
    Host.resize(1 + Gen() % 600); // up to 2400 bytes: the ring comes round often
    std::iota(Host.begin(), Host.end(), int32_t(I) * 1000);
    Buffers.emplace_back(Host.size());
    ASSERT_TRUE(Uploads.copy(Buffers.back().data(), Host.data(), Host.size() * sizeof(int32_t), nullptr));
    Sent.push_back(Host);
    std::fill(Host.begin(), Host.end(), -1); // the copy no longer reads it
  }
  MOERT_CUDA_CHECK(cudaDeviceSynchronize());
  for (size_t I = 0; I < Buffers.size(); ++I)
    ASSERT_EQ(Buffers[I].download(), Sent[I]) << "upload " << I;
  // More than the ring holds: the caller's to copy another way.
  DeviceBuffer<int32_t> Big(2048);
  std::vector<int32_t> Values(2048, 5);
  EXPECT_FALSE(Uploads.copy(Big.data(), Values.data(), Values.size() * sizeof(int32_t), nullptr));
}

} // namespace
