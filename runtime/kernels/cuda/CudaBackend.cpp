//===- kernels/cuda/CudaBackend.cpp ---------------------------------------===//
#include "kernels/cuda/CudaBackend.h"

#include "kernels/cuda/Attention.h"
#include "kernels/cuda/DeviceBuffer.h"
#include "kernels/cuda/Elementwise.h"
#include "kernels/cuda/Gemm.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>

namespace moert::cuda {

namespace {

/// Rows [Begin, Begin + Len) of each batch row of a [Batch, LocalTokens,
/// Width] host tensor, packed [Batch, Len, Width] (and back).
std::vector<float> packSpan(const float *Src, int64_t Batch, int64_t LocalTokens, int64_t Begin, int64_t Len,
                            int64_t Width) {
  std::vector<float> Packed(size_t(Batch * Len * Width));
  for (int64_t B = 0; B < Batch; ++B)
    std::copy(Src + (B * LocalTokens + Begin) * Width, Src + (B * LocalTokens + Begin + Len) * Width,
              Packed.begin() + B * Len * Width);
  return Packed;
}

void unpackSpan(const std::vector<float> &Packed, float *Dst, int64_t Batch, int64_t LocalTokens, int64_t Begin,
                int64_t Len, int64_t Width) {
  for (int64_t B = 0; B < Batch; ++B)
    std::copy(Packed.begin() + B * Len * Width, Packed.begin() + (B + 1) * Len * Width,
              Dst + (B * LocalTokens + Begin) * Width);
}

/// A [Batch, QHeads, LocalTokens] statistic's entries of the query span,
/// packed [Batch, QHeads, QLen] (and back).
std::vector<float> packStat(const float *Src, const AttentionBlockArgs &A) {
  return packSpan(Src, A.Batch * A.QHeads, A.LocalTokens, A.QBegin, A.QLen, 1);
}

std::vector<int32_t> positions(int64_t First, int64_t Count) {
  std::vector<int32_t> P(static_cast<size_t>(Count));
  for (int64_t I = 0; I < Count; ++I)
    P[size_t(I)] = int32_t(First + I);
  return P;
}

/// The kernels of kernels/cuda/Attention.h take heads of 32, 64 or 128
/// columns, values as wide as keys, and positions that fit int32.
bool attentionKernelTakes(const AttentionBlockArgs &A) {
  bool Width = A.HeadDim == 32 || A.HeadDim == 64 || A.HeadDim == 128;
  return Width && A.VHeadDim == A.HeadDim && A.KvHeads > 0 && A.QHeads % A.KvHeads == 0 &&
         A.QPos + A.QLen < (int64_t(1) << 31) && A.KPos + A.KLen < (int64_t(1) << 31);
}

/// Every copy between host and device goes through here, so that the
/// backend can say what it moved (BackendTraffic).
class Stager {
public:
  template <typename T> DeviceBuffer<T> upload(const std::vector<T> &Host) {
    DeviceBuffer<T> Buffer;
    Buffer.upload(Host);
    Moved.HostToDeviceBytes += int64_t(Buffer.bytes());
    return Buffer;
  }
  DeviceBuffer<bf16> bf16s(const float *Data, int64_t Count) { return upload(toBf16(Data, size_t(Count))); }
  DeviceBuffer<float> floats(const float *Data, int64_t Count) {
    return upload(std::vector<float>(Data, Data + Count));
  }
  /// Rows x Cols of a row-major host matrix with leading dimension Ld,
  /// packed densely in bf16.
  DeviceBuffer<bf16> matrix(const float *Data, int64_t Rows, int64_t Cols, int64_t Ld) {
    std::vector<bf16> Packed(size_t(Rows * Cols));
    for (int64_t R = 0; R < Rows; ++R)
      for (int64_t C = 0; C < Cols; ++C)
        Packed[size_t(R * Cols + C)] = __float2bfloat16_rn(Data[R * Ld + C]);
    return upload(Packed);
  }
  template <typename T> std::vector<T> download(const DeviceBuffer<T> &Buffer) {
    Moved.DeviceToHostBytes += int64_t(Buffer.bytes());
    return Buffer.download();
  }
  void downloadTo(const DeviceBuffer<bf16> &Buffer, float *Out) {
    std::vector<bf16> Host = download(Buffer);
    for (size_t I = 0; I < Host.size(); ++I)
      Out[I] = __bfloat162float(Host[I]);
  }
  void downloadTo(const DeviceBuffer<float> &Buffer, float *Out) {
    std::vector<float> Host = download(Buffer);
    std::copy(Host.begin(), Host.end(), Out);
  }

  BackendTraffic Moved;
};

/// The device copies of one attention block: its spans packed, positions
/// counted from the spans' first.
struct DeviceBlock {
  DeviceAttentionShape Shape;
  DeviceBuffer<bf16> Q, K, V;
  DeviceBuffer<int32_t> QPos, KPos;

  DeviceBlock(const AttentionBlockArgs &A, Stager &Copies) {
    Shape.Batch = A.Batch;
    Shape.QTokens = A.QLen;
    Shape.KTokens = A.KLen;
    Shape.QHeads = A.QHeads;
    Shape.KvHeads = A.KvHeads;
    Shape.HeadDim = A.HeadDim;
    Shape.Scale = A.Scale;
    Q = Copies.upload(toBf16(packSpan(A.Q, A.Batch, A.LocalTokens, A.QBegin, A.QLen, A.QHeads * A.HeadDim)));
    K = Copies.upload(toBf16(packSpan(A.K, A.Batch, A.LocalTokens, A.KBegin, A.KLen, A.KvHeads * A.HeadDim)));
    V = Copies.upload(toBf16(packSpan(A.V, A.Batch, A.LocalTokens, A.KBegin, A.KLen, A.KvHeads * A.HeadDim)));
    QPos = Copies.upload(positions(A.QPos, A.QLen));
    KPos = Copies.upload(positions(A.KPos, A.KLen));
  }
};

/// A bf16 operand on the device: a held array's copy (not owned) or a
/// staged one.
struct Operand {
  const bf16 *Data = nullptr;
  int64_t Ld = 0;
  DeviceBuffer<bf16> Staged;
};

class CudaBackend final : public ComputeBackend {
public:
  const char *name() const override { return "cuda"; }
  const char *precision() const override {
    return "GEMMs, attention, RMSNorm, RoPE and SwiGLU on bf16 operands with fp32 accumulation, the rest in fp32 "
           "on the host";
  }

  void gemm(const GemmArgs &G) override {
    if (G.M == 0 || G.N == 0)
      return;
    if (G.K == 0) { // no product: C = Beta * C, as cblas leaves it
      for (int64_t R = 0; R < G.M; ++R)
        for (int64_t C = 0; C < G.N; ++C)
          G.C[R * G.LdC + C] = G.Beta == 0.0f ? 0.0f : G.Beta * G.C[R * G.LdC + C];
      return;
    }
    DeviceBuffer<float> C{size_t(G.M * G.N)};
    if (G.Beta != 0.0f) {
      std::vector<float> Packed(size_t(G.M * G.N));
      for (int64_t R = 0; R < G.M; ++R)
        std::copy(G.C + R * G.LdC, G.C + R * G.LdC + G.N, Packed.begin() + R * G.N);
      C = Copies.upload(Packed);
    }
    Operand A = operand(G.A, G.TransA ? G.K : G.M, G.TransA ? G.M : G.K, G.LdA);
    Operand B = operand(G.B, G.TransB ? G.N : G.K, G.TransB ? G.K : G.N, G.LdB);
    cuda::gemm(Blas, G.TransA, G.TransB, G.M, G.N, G.K, G.Alpha, A.Data, A.Ld, B.Data, B.Ld, G.Beta, C.data(),
               OutType::F32, G.N);
    std::vector<float> Host = Copies.download(C);
    for (int64_t R = 0; R < G.M; ++R)
      std::copy(Host.begin() + R * G.N, Host.begin() + (R + 1) * G.N, G.C + R * G.LdC);
  }

  void rmsNormForward(int64_t Rows, int64_t Hidden, const float *X, const float *W, double Eps, float *Y,
                      float *Rstd) override {
    if (Rows == 0)
      return;
    DeviceBuffer<bf16> DX = Copies.bf16s(X, Rows * Hidden);
    Operand DW = operand(W, 1, Hidden, Hidden);
    DeviceBuffer<bf16> DY{size_t(Rows * Hidden)};
    DeviceBuffer<float> DRstd{size_t(Rows)};
    cuda::rmsNormForward(Rows, Hidden, DX.data(), DW.Data, float(Eps), DY.data(), DRstd.data(), Blas.stream());
    Copies.downloadTo(DY, Y);
    Copies.downloadTo(DRstd, Rstd);
  }

  void rmsNormBackward(int64_t Rows, int64_t Hidden, const float *X, const float *W, const float *Rstd, const float *DY,
                       float *DX, float *DW) override {
    if (Rows == 0)
      return;
    DeviceBuffer<bf16> X16 = Copies.bf16s(X, Rows * Hidden);
    Operand W16 = operand(W, 1, Hidden, Hidden);
    DeviceBuffer<bf16> DY16 = Copies.bf16s(DY, Rows * Hidden), DX16{size_t(Rows * Hidden)};
    DeviceBuffer<float> R32 = Copies.floats(Rstd, Rows), DW32 = Copies.floats(DW, Hidden);
    cuda::rmsNormBackward(Rows, Hidden, X16.data(), W16.Data, R32.data(), DY16.data(), DX16.data(), DW32.data(),
                          Blas.stream());
    Copies.downloadTo(DX16, DX);
    Copies.downloadTo(DW32, DW);
  }

  void swiGluForward(int64_t Count, const float *G, const float *U, float *Act) override {
    if (Count == 0)
      return;
    DeviceBuffer<bf16> G16 = Copies.bf16s(G, Count), U16 = Copies.bf16s(U, Count), A16{size_t(Count)};
    cuda::swiGluForward(Count, G16.data(), U16.data(), A16.data(), Blas.stream());
    Copies.downloadTo(A16, Act);
  }

  void swiGluBackward(int64_t Count, const float *G, const float *U, const float *DAct, float *DG, float *DU) override {
    if (Count == 0)
      return;
    DeviceBuffer<bf16> G16 = Copies.bf16s(G, Count), U16 = Copies.bf16s(U, Count), DA16 = Copies.bf16s(DAct, Count);
    DeviceBuffer<bf16> DG16{size_t(Count)}, DU16{size_t(Count)};
    cuda::swiGluBackward(Count, G16.data(), U16.data(), DA16.data(), DG16.data(), DU16.data(), Blas.stream());
    Copies.downloadTo(DG16, DG);
    Copies.downloadTo(DU16, DU);
  }

  bool rope(int64_t Rows, int64_t Heads, int64_t HeadDim, float *X, const int64_t *Positions, double Theta,
            bool Inverse) override {
    std::vector<int32_t> Positions32(static_cast<size_t>(Rows));
    for (int64_t I = 0; I < Rows; ++I) {
      if (Positions[I] < 0 || Positions[I] >= (int64_t(1) << 31))
        return false;
      Positions32[size_t(I)] = int32_t(Positions[I]);
    }
    DeviceBuffer<bf16> X16 = Copies.bf16s(X, Rows * Heads * HeadDim);
    DeviceBuffer<int32_t> P = Copies.upload(Positions32);
    cuda::applyRope(Rows, Heads, HeadDim, X16.data(), P.data(), Theta, Inverse, Blas.stream());
    Copies.downloadTo(X16, X);
    return true;
  }

  bool attentionBlockForward(const AttentionBlockArgs &A) override {
    if (!attentionKernelTakes(A))
      return false;
    DeviceBlock Block(A, Copies);
    int64_t OutWidth = A.QHeads * A.HeadDim;
    DeviceBuffer<float> Out = Copies.upload(packSpan(A.Out, A.Batch, A.LocalTokens, A.QBegin, A.QLen, OutWidth));
    DeviceBuffer<float> Lse = Copies.upload(packStat(A.Lse, A));
    attentionForwardBlock(Block.Shape, Block.Q.data(), Block.QPos.data(), Block.K.data(), Block.V.data(),
                          Block.KPos.data(), Out.data(), Lse.data(), Blas.stream());
    unpackSpan(Copies.download(Out), A.Out, A.Batch, A.LocalTokens, A.QBegin, A.QLen, OutWidth);
    unpackSpan(Copies.download(Lse), A.Lse, A.Batch * A.QHeads, A.LocalTokens, A.QBegin, A.QLen, 1);
    return true;
  }

  bool attentionBlockBackward(const AttentionBlockArgs &A) override {
    if (!attentionKernelTakes(A))
      return false;
    DeviceBlock Block(A, Copies);
    int64_t QWidth = A.QHeads * A.HeadDim, KWidth = A.KvHeads * A.HeadDim;
    DeviceBuffer<bf16> DOut = Copies.upload(toBf16(packSpan(A.DOut, A.Batch, A.LocalTokens, A.QBegin, A.QLen, QWidth)));
    DeviceBuffer<float> Lse = Copies.upload(packStat(A.FinalLse, A));
    DeviceBuffer<float> Delta = Copies.upload(packStat(A.Delta, A));
    DeviceBuffer<float> DQ = Copies.upload(packSpan(A.DQ, A.Batch, A.LocalTokens, A.QBegin, A.QLen, QWidth));
    DeviceBuffer<float> DK = Copies.upload(packSpan(A.DK, A.Batch, A.LocalTokens, A.KBegin, A.KLen, KWidth));
    DeviceBuffer<float> DV = Copies.upload(packSpan(A.DV, A.Batch, A.LocalTokens, A.KBegin, A.KLen, KWidth));
    attentionBackwardBlock(Block.Shape, Block.Q.data(), Block.QPos.data(), Block.K.data(), Block.V.data(),
                           Block.KPos.data(), Lse.data(), Delta.data(), DOut.data(), DQ.data(), DK.data(), DV.data(),
                           Blas.stream());
    unpackSpan(Copies.download(DQ), A.DQ, A.Batch, A.LocalTokens, A.QBegin, A.QLen, QWidth);
    unpackSpan(Copies.download(DK), A.DK, A.Batch, A.LocalTokens, A.KBegin, A.KLen, KWidth);
    unpackSpan(Copies.download(DV), A.DV, A.Batch, A.LocalTokens, A.KBegin, A.KLen, KWidth);
    return true;
  }

  void holdArrays(const std::vector<HeldArray> &Arrays) override {
    for (const HeldArray &A : Arrays)
      if (A.Count > 0)
        Held[A.Data].Count = A.Count;
  }
  void releaseArrays() override { Held.clear(); }

  BackendTraffic traffic() const override {
    BackendTraffic T = Copies.Moved;
    T.DevicePeakBytes = int64_t(deviceMemoryStats().PeakAllocatedBytes);
    return T;
  }
  void resetPeak() override { resetDevicePeak(); }

private:
  /// A held array's device copy, made on its first use.
  struct HeldCopy {
    int64_t Count = 0;
    DeviceBuffer<bf16> Copy;
  };

  /// Rows x Cols of a row-major host matrix (leading dimension Ld) on the
  /// device in bf16: inside the held array that contains all of it, else
  /// staged.
  Operand operand(const float *Data, int64_t Rows, int64_t Cols, int64_t Ld) {
    Operand O;
    if (const bf16 *Copy = heldCopy(Data, (Rows - 1) * Ld + Cols)) {
      O.Data = Copy;
      O.Ld = Ld;
      return O;
    }
    O.Staged = Copies.matrix(Data, Rows, Cols, Ld);
    O.Data = O.Staged.data();
    O.Ld = Cols;
    return O;
  }

  const bf16 *heldCopy(const float *Data, int64_t Extent) {
    auto It = Held.upper_bound(Data);
    if (It == Held.begin())
      return nullptr;
    --It;
    const float *Begin = It->first;
    HeldCopy &H = It->second;
    int64_t Offset = int64_t((reinterpret_cast<uintptr_t>(Data) - reinterpret_cast<uintptr_t>(Begin)) / sizeof(float));
    if (Offset + Extent > H.Count)
      return nullptr;
    if (!H.Copy.size())
      H.Copy = Copies.bf16s(Begin, H.Count);
    return H.Copy.data() + Offset;
  }

  BlasHandle Blas;
  Stager Copies;
  std::map<const float *, HeldCopy> Held;
};

int envInt(const char *Name, int Default) {
  const char *V = std::getenv(Name);
  return V && *V ? std::atoi(V) : Default;
}

} // namespace

std::unique_ptr<ComputeBackend> createCudaBackend(int Device) {
  int Devices = deviceCount();
  if (Device < 0 || Device >= Devices)
    throw std::runtime_error("the CUDA backend needs a CUDA device: " +
                             (Devices ? "device " + std::to_string(Device) + " of " + std::to_string(Devices)
                                      : std::string("none found (no GPU or no driver)")) +
                             "; run on a GPU node, or with --backend cpu");
  MOERT_CUDA_CHECK(cudaSetDevice(Device));
  return std::make_unique<CudaBackend>();
}

int deviceForLocalRank() {
  int Local = envInt("OMPI_COMM_WORLD_LOCAL_RANK", envInt("SLURM_LOCALID", 0));
  int Devices = deviceCount();
  return Devices ? Local % Devices : 0;
}

} // namespace moert::cuda
