//===- kernels/cuda/RingAttention.cpp -------------------------------------===//
#include "kernels/cuda/RingAttention.h"

#include <cmath>
#include <memory>
#include <stdexcept>

namespace moert::cuda {

namespace {

/// Everything one rank needs about the ring: shapes, every rank's positions
/// on the device, and the two block buffers.
struct Ring {
  DeviceAttentionShape Shape;
  int Size, Rank;
  size_t KvCount;                  ///< elements of K (= of V)
  DeviceBuffer<int32_t> Positions; ///< [Size, LocalTokens]

  Ring(DeviceCommunicator &Cp, const AttentionDims &Dims) : Size(Cp.size()), Rank(Cp.rank()) {
    if (Dims.QHeads <= 0 || Dims.KvHeads <= 0 || Dims.QHeads % Dims.KvHeads != 0)
      throw std::invalid_argument("ring attention: query heads must be a positive multiple of kv "
                                  "heads");
    std::vector<int32_t> All;
    for (int R = 0; R < Size; ++R)
      for (int64_t P : localPositions(R, Size, Dims.SeqLen)) // checks SeqLen
        All.push_back(int32_t(P));
    int64_t Local = Dims.SeqLen / Size;
    Shape.Batch = Dims.Batch;
    Shape.QTokens = Shape.KTokens = Local;
    Shape.QHeads = Dims.QHeads;
    Shape.KvHeads = Dims.KvHeads;
    Shape.HeadDim = Dims.HeadDim;
    Shape.Scale = float(1.0 / std::sqrt(double(Dims.HeadDim)));
    KvCount = size_t(Dims.Batch * Local * Dims.KvHeads * Dims.HeadDim);
    Positions.upload(All);
  }
  const int32_t *positionsOf(int R) const { return Positions.data() + int64_t(R) * Shape.QTokens; }
  int prev() const { return (Rank + Size - 1) % Size; }
  int next() const { return (Rank + 1) % Size; }
};

/// One hop: receive the previous rank's buffer, send ours to the next.
struct Hop {
  std::unique_ptr<Request> RecvReq, SendReq;
  Hop(DeviceCommunicator &Cp, const Ring &R, const void *Send, void *Recv, size_t Count, DType T, int Tag) {
    RecvReq = Cp.irecv(Recv, Count, R.prev(), Tag, T);
    SendReq = Cp.isend(Send, Count, R.next(), Tag, T);
  }
  void wait() {
    RecvReq->wait();
    SendReq->wait();
  }
};

constexpr int KvTag = 11, GradTag = 12;

void copyAsync(void *Dst, const void *Src, size_t Bytes, cudaStream_t Stream) {
  if (Bytes)
    MOERT_CUDA_CHECK(cudaMemcpyAsync(Dst, Src, Bytes, cudaMemcpyDeviceToDevice, Stream));
}

} // namespace

void ringAttentionForward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                          const bf16 *V, float *Out, float *Lse, cudaStream_t Stream) {
  Ring R(Cp, Dims);
  Cp.setComputeStream(Stream);
  attentionInit(R.Shape, Out, Lse, Stream);
  // A block is K then V in bf16, sent as 2 * KvCount bf16 elements.
  DeviceBuffer<bf16> Cur(2 * R.KvCount), Next(R.Size > 1 ? 2 * R.KvCount : 0);
  copyAsync(Cur.data(), K, R.KvCount * sizeof(bf16), Stream);
  copyAsync(Cur.data() + R.KvCount, V, R.KvCount * sizeof(bf16), Stream);
  for (int Step = 0; Step < R.Size; ++Step) {
    std::unique_ptr<Hop> H;
    if (Step + 1 < R.Size)
      H = std::make_unique<Hop>(Cp, R, Cur.data(), Next.data(), 2 * R.KvCount, DType::BF16, KvTag);
    int Owner = (R.Rank - Step + R.Size) % R.Size;
    attentionForwardBlock(R.Shape, Q, R.positionsOf(R.Rank), Cur.data(), Cur.data() + R.KvCount, R.positionsOf(Owner),
                          Out, Lse, Stream);
    if (H) {
      H->wait();
      std::swap(Cur, Next);
    }
  }
  // The buffers are freed on return: finish the kernels that read them.
  MOERT_CUDA_CHECK(cudaStreamSynchronize(Stream));
}

void ringAttentionBackward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                           const bf16 *V, const float *Out, const float *Lse, const bf16 *DOut, float *DQ, float *DK,
                           float *DV, cudaStream_t Stream) {
  Ring R(Cp, Dims);
  Cp.setComputeStream(Stream);
  const DeviceAttentionShape &S = R.Shape;
  size_t QCount = size_t(S.Batch * S.QTokens * S.QHeads * S.HeadDim);
  MOERT_CUDA_CHECK(cudaMemsetAsync(DQ, 0, QCount * sizeof(float), Stream));
  DeviceBuffer<float> Delta(size_t(S.Batch * S.QHeads * S.QTokens));
  attentionDelta(S, DOut, Out, Delta.data(), Stream);

  bool Ringed = R.Size > 1;
  DeviceBuffer<bf16> Cur(2 * R.KvCount), Next(Ringed ? 2 * R.KvCount : 0);
  // The block's gradients so far: dK then dV in fp32.
  DeviceBuffer<float> CurGrad(2 * R.KvCount), NextGrad(Ringed ? 2 * R.KvCount : 0);
  copyAsync(Cur.data(), K, R.KvCount * sizeof(bf16), Stream);
  copyAsync(Cur.data() + R.KvCount, V, R.KvCount * sizeof(bf16), Stream);
  MOERT_CUDA_CHECK(cudaMemsetAsync(CurGrad.data(), 0, CurGrad.bytes(), Stream));
  for (int Step = 0; Step < R.Size; ++Step) {
    std::unique_ptr<Hop> KvHop, GradHop;
    if (Step + 1 < R.Size)
      KvHop = std::make_unique<Hop>(Cp, R, Cur.data(), Next.data(), 2 * R.KvCount, DType::BF16, KvTag);
    int Owner = (R.Rank - Step + R.Size) % R.Size;
    attentionBackwardBlock(S, Q, R.positionsOf(R.Rank), Cur.data(), Cur.data() + R.KvCount, R.positionsOf(Owner), Lse,
                           Delta.data(), DOut, DQ, CurGrad.data(), CurGrad.data() + R.KvCount, Stream);
    // After the last step the block in hand belongs to the next rank, which
    // is where this hop sends its gradients.
    if (Ringed)
      GradHop = std::make_unique<Hop>(Cp, R, CurGrad.data(), NextGrad.data(), 2 * R.KvCount, DType::F32, GradTag);
    if (KvHop)
      KvHop->wait();
    if (GradHop) {
      GradHop->wait();
      std::swap(Cur, Next);
      std::swap(CurGrad, NextGrad);
    }
  }
  copyAsync(DK, CurGrad.data(), R.KvCount * sizeof(float), Stream);
  copyAsync(DV, CurGrad.data() + R.KvCount, R.KvCount * sizeof(float), Stream);
  MOERT_CUDA_CHECK(cudaStreamSynchronize(Stream));
}

} // namespace moert::cuda
