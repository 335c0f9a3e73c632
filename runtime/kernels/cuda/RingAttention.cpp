//===- kernels/cuda/RingAttention.cpp -------------------------------------===//
#include "kernels/cuda/RingAttention.h"

#include "parallel/cp/Ring.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <type_traits>

namespace moert::cuda {

std::vector<int32_t> ringPositions(int Size, int64_t SeqLen) {
  std::vector<int32_t> All;
  for (int R = 0; R < Size; ++R)
    for (int64_t P : localPositions(R, Size, SeqLen)) // checks SeqLen
      All.push_back(int32_t(P));
  return All;
}

namespace {

/// Everything one rank needs about the ring: shapes and every rank's
/// positions on the device.
struct Ring {
  DeviceAttentionShape Shape;
  int Size, Rank;
  size_t KCount, VCount; ///< elements of K and of V
  DeviceBuffer<int32_t> Uploaded;
  const int32_t *Positions; ///< [Size, LocalTokens]

  Ring(DeviceCommunicator &Cp, const AttentionDims &Dims, const int32_t *Given)
      : Size(Cp.size()), Rank(Cp.rank()), Positions(Given) {
    if (Dims.QHeads <= 0 || Dims.KvHeads <= 0 || Dims.QHeads % Dims.KvHeads != 0)
      throw std::invalid_argument("ring attention: query heads must be a positive multiple of kv "
                                  "heads");
    int64_t Local = Dims.SeqLen / Size;
    Shape.Batch = Dims.Batch;
    Shape.QTokens = Shape.KTokens = Local;
    Shape.QHeads = Dims.QHeads;
    Shape.KvHeads = Dims.KvHeads;
    Shape.HeadDim = Dims.HeadDim;
    Shape.VHeadDim = Dims.vHeadDim();
    Shape.Scale = float(1.0 / std::sqrt(double(Dims.HeadDim)));
    KCount = size_t(Dims.Batch * Local * Dims.KvHeads * Dims.HeadDim);
    VCount = size_t(Dims.Batch * Local * Dims.KvHeads * Dims.vHeadDim());
    if (!Positions) {
      Uploaded.upload(ringPositions(Size, Dims.SeqLen));
      Positions = Uploaded.data();
    }
  }
  const int32_t *positionsOf(int R) const { return Positions + int64_t(R) * Shape.QTokens; }
  int prev() const { return (Rank + Size - 1) % Size; }
  int next() const { return (Rank + 1) % Size; }
};

void copyAsync(void *Dst, const void *Src, size_t Bytes, cudaStream_t Stream) {
  if (Bytes)
    MOERT_CUDA_CHECK(cudaMemcpyAsync(Dst, Src, Bytes, cudaMemcpyDeviceToDevice, Stream));
}

/// The device's block in hand (parallel/cp/Ring.h): K then V in bf16 and,
/// in the backward, its dK then dV in fp32 in a buffer of their own.
struct DeviceBlock {
  const Ring &R;
  cudaStream_t Stream;
  DeviceBuffer<bf16> Cur, Next;
  DeviceBuffer<float> CurGrad, NextGrad;

  DeviceBlock(const Ring &R, const bf16 *K, const bf16 *V, bool WithGrads, cudaStream_t Stream)
      : R(R), Stream(Stream), Cur(R.KCount + R.VCount), Next(R.Size > 1 ? R.KCount + R.VCount : 0),
        CurGrad(WithGrads ? R.KCount + R.VCount : 0), NextGrad(WithGrads && R.Size > 1 ? R.KCount + R.VCount : 0) {
    copyAsync(Cur.data(), K, R.KCount * sizeof(bf16), Stream);
    copyAsync(Cur.data() + R.KCount, V, R.VCount * sizeof(bf16), Stream);
    if (WithGrads)
      MOERT_CUDA_CHECK(cudaMemsetAsync(CurGrad.data(), 0, CurGrad.bytes(), Stream));
  }
  const void *kv() const { return Cur.data(); }
  void *nextKv() { return Next.data(); }
  size_t kvCount() const { return R.KCount + R.VCount; }
  DType kvType() const { return DType::BF16; }
  const void *grad() const { return CurGrad.data(); }
  void *nextGrad() { return NextGrad.data(); }
  size_t gradCount() const { return R.KCount + R.VCount; }
  DType gradType() const { return DType::F32; }
  void swap() {
    std::swap(Cur, Next);
    std::swap(CurGrad, NextGrad);
  }
  const bf16 *blockK() const { return Cur.data(); }
  const bf16 *blockV() const { return Cur.data() + R.KCount; }
};

/// A backward over this rank's queries starts so: DQ zeroed (every block
/// adds to it) and Delta = rowsum(dO * O) per (batch, head, token).
DeviceBuffer<float> startBackward(const Ring &R, const bf16 *DOut, const float *Out, float *DQ, cudaStream_t Stream) {
  const DeviceAttentionShape &S = R.Shape;
  MOERT_CUDA_CHECK(cudaMemsetAsync(DQ, 0, size_t(S.Batch * S.QTokens * S.QHeads * S.HeadDim) * sizeof(float), Stream));
  DeviceBuffer<float> Delta(size_t(S.Batch * S.QHeads * S.QTokens));
  attentionDelta(S, DOut, Out, Delta.data(), Stream);
  return Delta;
}

} // namespace

void ringAttentionForward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                          const bf16 *V, float *Out, float *Lse, cudaStream_t Stream, const int32_t *Positions) {
  Ring R(Cp, Dims, Positions);
  Cp.setComputeStream(Stream);
  attentionInit(R.Shape, Out, Lse, Stream);
  struct Forward : DeviceBlock {
    const bf16 *Q;
    float *Out, *Lse;
    Forward(const Ring &R, const bf16 *Q, const bf16 *K, const bf16 *V, float *Out, float *Lse, cudaStream_t Stream)
        : DeviceBlock(R, K, V, false, Stream), Q(Q), Out(Out), Lse(Lse) {}
    void attend(int Owner) {
      attentionForwardBlock(R.Shape, Q, R.positionsOf(R.Rank), blockK(), blockV(), R.positionsOf(Owner), Out, Lse,
                            Stream);
    }
  } B(R, Q, K, V, Out, Lse, Stream);
  ring::forward(Cp, B);
  // The buffers are freed on return: finish the kernels that read them.
  MOERT_CUDA_CHECK(cudaStreamSynchronize(Stream));
}

void ringAttentionBackward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                           const bf16 *V, const float *Out, const float *Lse, const bf16 *DOut, float *DQ, float *DK,
                           float *DV, cudaStream_t Stream, const int32_t *Positions) {
  Ring R(Cp, Dims, Positions);
  Cp.setComputeStream(Stream);
  DeviceBuffer<float> Delta = startBackward(R, DOut, Out, DQ, Stream);
  struct Backward : DeviceBlock {
    const bf16 *Q, *DOut;
    const float *Lse, *Delta;
    float *DQ;
    Backward(const Ring &R, const bf16 *Q, const bf16 *K, const bf16 *V, const float *Lse, const float *Delta,
             const bf16 *DOut, float *DQ, cudaStream_t Stream)
        : DeviceBlock(R, K, V, true, Stream), Q(Q), DOut(DOut), Lse(Lse), Delta(Delta), DQ(DQ) {}
    void attend(int Owner) {
      attentionBackwardBlock(R.Shape, Q, R.positionsOf(R.Rank), blockK(), blockV(), R.positionsOf(Owner), Lse, Delta,
                             DOut, DQ, CurGrad.data(), CurGrad.data() + R.KCount, Stream);
    }
  } B(R, Q, K, V, Lse, Delta.data(), DOut, DQ, Stream);
  ring::backward(Cp, B);
  copyAsync(DK, B.CurGrad.data(), R.KCount * sizeof(float), Stream);
  copyAsync(DV, B.CurGrad.data() + R.KCount, R.VCount * sizeof(float), Stream);
  MOERT_CUDA_CHECK(cudaStreamSynchronize(Stream));
}

namespace {
/// Every rank's K then V blocks, gathered over the group.
struct Gathered {
  DeviceBuffer<bf16> K, V;
  Gathered(DeviceCommunicator &Cp, const Ring &R, const bf16 *LocalK, const bf16 *LocalV)
      : K(size_t(R.Size) * R.KCount), V(size_t(R.Size) * R.VCount) {
    Cp.allGather(LocalK, K.data(), R.KCount, DType::BF16);
    Cp.allGather(LocalV, V.data(), R.VCount, DType::BF16);
  }
  const bf16 *k(int Owner, const Ring &R) const { return K.data() + size_t(Owner) * R.KCount; }
  const bf16 *v(int Owner, const Ring &R) const { return V.data() + size_t(Owner) * R.VCount; }
};
} // namespace

void gatheredAttentionForward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                              const bf16 *V, float *Out, float *Lse, cudaStream_t Stream, const int32_t *Positions) {
  Ring R(Cp, Dims, Positions);
  Cp.setComputeStream(Stream);
  attentionInit(R.Shape, Out, Lse, Stream);
  const Gathered All(Cp, R, K, V);
  for (int Step = 0; Step < R.Size; ++Step) {
    const int Owner = ring::ownerAt(Cp, Step);
    attentionForwardBlock(R.Shape, Q, R.positionsOf(R.Rank), All.k(Owner, R), All.v(Owner, R), R.positionsOf(Owner),
                          Out, Lse, Stream);
  }
  MOERT_CUDA_CHECK(cudaStreamSynchronize(Stream));
}

void gatheredAttentionBackward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                               const bf16 *V, const float *Out, const float *Lse, const bf16 *DOut, float *DQ,
                               float *DK, float *DV, cudaStream_t Stream, const int32_t *Positions) {
  Ring R(Cp, Dims, Positions);
  Cp.setComputeStream(Stream);
  DeviceBuffer<float> Delta = startBackward(R, DOut, Out, DQ, Stream);
  const Gathered All(Cp, R, K, V);
  DeviceBuffer<float> AllDK(size_t(R.Size) * R.KCount), AllDV(size_t(R.Size) * R.VCount);
  MOERT_CUDA_CHECK(cudaMemsetAsync(AllDK.data(), 0, AllDK.bytes(), Stream));
  MOERT_CUDA_CHECK(cudaMemsetAsync(AllDV.data(), 0, AllDV.bytes(), Stream));
  for (int Step = 0; Step < R.Size; ++Step) {
    const int Owner = ring::ownerAt(Cp, Step);
    attentionBackwardBlock(R.Shape, Q, R.positionsOf(R.Rank), All.k(Owner, R), All.v(Owner, R), R.positionsOf(Owner),
                           Lse, Delta.data(), DOut, DQ, AllDK.data() + size_t(Owner) * R.KCount,
                           AllDV.data() + size_t(Owner) * R.VCount, Stream);
  }
  Cp.reduceScatterSum(AllDK.data(), DK, R.KCount, DType::F32);
  Cp.reduceScatterSum(AllDV.data(), DV, R.VCount, DType::F32);
  MOERT_CUDA_CHECK(cudaStreamSynchronize(Stream));
}

namespace {
template <typename T> constexpr DType dtypeOf() { return std::is_same_v<T, float> ? DType::F32 : DType::BF16; }

/// An all-to-all that regroups a row-major matrix in Cp.size() column
/// blocks: Src [RowsIn, C x WidthIn] sends its column block J to rank J,
/// which lays what rank R sent as column block R of Dst [RowsOut, C x
/// WidthOut] (RowsIn x WidthIn = RowsOut x WidthOut). Send and Recv hold at
/// least C x RowsIn x WidthIn elements of T; the caller keeps them until
/// the stream has run the exchange.
template <typename T>
void exchangeColumnBlocks(DeviceCommunicator &Cp, const T *Src, int64_t RowsIn, int64_t WidthIn, T *Dst,
                          int64_t RowsOut, int64_t WidthOut, T *Send, T *Recv, cudaStream_t Stream) {
  const int64_t C = Cp.size(), Chunk = RowsIn * WidthIn;
  if (Chunk != RowsOut * WidthOut)
    throw std::logic_error("an all-to-all's blocks do not match");
  if (Chunk == 0)
    return;
  for (int64_t J = 0; J < C; ++J)
    MOERT_CUDA_CHECK(cudaMemcpy2DAsync(Send + J * Chunk, size_t(WidthIn) * sizeof(T), Src + J * WidthIn,
                                       size_t(C * WidthIn) * sizeof(T), size_t(WidthIn) * sizeof(T), size_t(RowsIn),
                                       cudaMemcpyDeviceToDevice, Stream));
  Cp.allToAll(Send, Recv, size_t(Chunk), dtypeOf<T>());
  for (int64_t J = 0; J < C; ++J)
    MOERT_CUDA_CHECK(cudaMemcpy2DAsync(Dst + J * WidthOut, size_t(C * WidthOut) * sizeof(T), Recv + J * Chunk,
                                       size_t(WidthOut) * sizeof(T), size_t(WidthOut) * sizeof(T), size_t(RowsOut),
                                       cudaMemcpyDeviceToDevice, Stream));
}

/// One rank's view of the all-to-all exchange: the head shards' shape (the
/// whole sequence, every rank's positions in rank order) and the moves.
struct HeadShards {
  DeviceCommunicator &Cp;
  Ring R;
  DeviceAttentionShape Local, Sharded;
  int64_t C, T;
  cudaStream_t Stream;

  /// The exchanges' send and receive buffers, in fp32 elements: room for
  /// the largest tensor exchanged, reused by every exchange in stream order
  /// and freed after finish().
  DeviceBuffer<float> Send, Recv;

  HeadShards(DeviceCommunicator &Cp, const AttentionDims &Dims, cudaStream_t Stream, const int32_t *Positions)
      : Cp(Cp), R(Cp, Dims, Positions), Local(R.Shape), Sharded(R.Shape), C(Cp.size()), T(R.Shape.QTokens),
        Stream(Stream) {
    if (Dims.QHeads % C != 0 || Dims.KvHeads % C != 0)
      throw std::invalid_argument("all-to-all attention: the query and key-value heads must divide by cp");
    Sharded.QTokens = Sharded.KTokens = C * T;
    Sharded.QHeads /= C;
    Sharded.KvHeads /= C;
    Send.resize(size_t(count(std::max(Dims.QHeads, Dims.KvHeads), std::max(Dims.HeadDim, Dims.vHeadDim()))));
    Recv.resize(Send.size());
    Cp.setComputeStream(Stream);
  }
  /// Dst from Src by exchangeColumnBlocks, through the shared buffers.
  template <typename E>
  void exchange(const E *Src, int64_t RowsIn, int64_t WidthIn, E *Dst, int64_t RowsOut, int64_t WidthOut) {
    exchangeColumnBlocks(Cp, Src, RowsIn, WidthIn, Dst, RowsOut, WidthOut, reinterpret_cast<E *>(Send.data()),
                         reinterpret_cast<E *>(Recv.data()), Stream);
  }
  /// The buffers (and the caller's) are freed on return: finish the work
  /// that reads them.
  void finish() { MOERT_CUDA_CHECK(cudaStreamSynchronize(Stream)); }
  int64_t count(int64_t Heads, int64_t Width) const { return Local.Batch * T * Heads * Width; }
  /// [Batch, T, Heads, Width] sequence shard <-> [Batch, C x T, Heads / C,
  /// Width] head shard.
  template <typename E> DeviceBuffer<E> toHeads(const E *X, int64_t Heads, int64_t Width) {
    DeviceBuffer<E> Xs(size_t(count(Heads, Width)));
    const int64_t Row = Heads / C * Width;
    exchange(X, Local.Batch * T, Row, Xs.data(), Local.Batch, T * Row);
    return Xs;
  }
  template <typename E> void toSequence(const E *Xs, int64_t Heads, int64_t Width, E *X) {
    const int64_t Row = Heads / C * Width;
    exchange(Xs, Local.Batch, T * Row, X, Local.Batch * T, Row);
  }
  /// Per (batch, head, token) [Batch, QHeads, T] <-> [Batch, QHeads / C, C x T].
  DeviceBuffer<float> statsToHeads(const float *X) {
    DeviceBuffer<float> Xs(size_t(Local.Batch * Local.QHeads * T));
    exchange(X, Local.Batch, Sharded.QHeads * T, Xs.data(), Local.Batch * Sharded.QHeads, T);
    return Xs;
  }
  void statsToSequence(const float *Xs, float *X) {
    exchange(Xs, Local.Batch * Sharded.QHeads, T, X, Local.Batch, Sharded.QHeads * T);
  }
  const int32_t *positions() const { return R.Positions; }
};
} // namespace

void headShardedAttentionForward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                                 const bf16 *V, float *Out, float *Lse, cudaStream_t Stream, const int32_t *Positions) {
  HeadShards H(Cp, Dims, Stream, Positions);
  const int64_t Dk = Dims.HeadDim, Dv = Dims.vHeadDim();
  DeviceBuffer<bf16> Qs = H.toHeads(Q, Dims.QHeads, Dk), Ks = H.toHeads(K, Dims.KvHeads, Dk),
                     Vs = H.toHeads(V, Dims.KvHeads, Dv);
  DeviceBuffer<float> Os(size_t(H.count(Dims.QHeads, Dv))), Ls(size_t(Dims.Batch * Dims.QHeads * H.T));
  attentionInit(H.Sharded, Os.data(), Ls.data(), Stream);
  attentionForwardBlock(H.Sharded, Qs.data(), H.positions(), Ks.data(), Vs.data(), H.positions(), Os.data(), Ls.data(),
                        Stream);
  H.toSequence(Os.data(), Dims.QHeads, Dv, Out);
  H.statsToSequence(Ls.data(), Lse);
  H.finish();
}

void headShardedAttentionBackward(DeviceCommunicator &Cp, const AttentionDims &Dims, const bf16 *Q, const bf16 *K,
                                  const bf16 *V, const float *Out, const float *Lse, const bf16 *DOut, float *DQ,
                                  float *DK, float *DV, cudaStream_t Stream, const int32_t *Positions) {
  HeadShards H(Cp, Dims, Stream, Positions);
  // Delta per (batch, head, token) where the output is, then with Lse to
  // the head shards.
  DeviceBuffer<float> Delta(size_t(Dims.Batch * Dims.QHeads * H.T));
  attentionDelta(H.Local, DOut, Out, Delta.data(), Stream);
  DeviceBuffer<float> Deltas = H.statsToHeads(Delta.data()), Ls = H.statsToHeads(Lse);
  const int64_t Dk = Dims.HeadDim, Dv = Dims.vHeadDim();
  DeviceBuffer<bf16> Qs = H.toHeads(Q, Dims.QHeads, Dk), Ks = H.toHeads(K, Dims.KvHeads, Dk),
                     Vs = H.toHeads(V, Dims.KvHeads, Dv), DOs = H.toHeads(DOut, Dims.QHeads, Dv);
  DeviceBuffer<float> DQs(Qs.size()), DKs(Ks.size()), DVs(Vs.size());
  for (DeviceBuffer<float> *G : {&DQs, &DKs, &DVs})
    MOERT_CUDA_CHECK(cudaMemsetAsync(G->data(), 0, G->bytes(), Stream));
  attentionBackwardBlock(H.Sharded, Qs.data(), H.positions(), Ks.data(), Vs.data(), H.positions(), Ls.data(),
                         Deltas.data(), DOs.data(), DQs.data(), DKs.data(), DVs.data(), Stream);
  H.toSequence(DQs.data(), Dims.QHeads, Dk, DQ);
  H.toSequence(DKs.data(), Dims.KvHeads, Dk, DK);
  H.toSequence(DVs.data(), Dims.KvHeads, Dv, DV);
  H.finish();
}

} // namespace moert::cuda
