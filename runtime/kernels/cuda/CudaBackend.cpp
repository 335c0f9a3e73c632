//===- kernels/cuda/CudaBackend.cpp ---------------------------------------===//
#include "kernels/cuda/CudaBackend.h"

#include "comm/nccl/NcclComm.h"
#include "kernels/cuda/AdamW.h"
#include "kernels/cuda/Attention.h"
#include "kernels/cuda/CrossEntropy.h"
#include "kernels/cuda/DeltaRule.h"
#include "kernels/cuda/DeviceBuffer.h"
#include "kernels/cuda/Elementwise.h"
#include "kernels/cuda/Gemm.h"
#include "kernels/cuda/LinearAttention.h"
#include "kernels/cuda/Moe.h"
#include "kernels/cuda/PinnedUploads.h"
#include "kernels/cuda/RingAttention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

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

/// The elements an exchange's counts and offsets reach.
int64_t extent(const std::vector<size_t> &Counts, const std::vector<size_t> &Offsets) {
  size_t End = 0;
  for (size_t P = 0; P < Counts.size(); ++P)
    if (Counts[P])
      End = std::max(End, Offsets[P] + Counts[P]);
  return int64_t(End);
}

/// The kernels of kernels/cuda/Attention.h take the head widths they are
/// built for (cuda::attentionKernelWidths()), grouped queries, and positions
/// that fit int32.
bool attentionKernelTakesHeads(int64_t QHeads, int64_t KvHeads, int64_t HeadDim, int64_t VHeadDim) {
  return cuda::attentionKernelTakesWidths(HeadDim, VHeadDim) && KvHeads > 0 && QHeads % KvHeads == 0;
}
constexpr int64_t PositionBound = int64_t(1) << 31;

bool attentionKernelTakes(const AttentionBlockArgs &A) {
  return attentionKernelTakesHeads(A.QHeads, A.KvHeads, A.HeadDim, A.VHeadDim) && A.QPos + A.QLen < PositionBound &&
         A.KPos + A.KLen < PositionBound;
}

/// Every copy between host and device goes through here, so that the
/// backend can say what it moved (BackendTraffic). Activations cross in fp32
/// and are rounded to bf16 (or widened back) on the device: twice the bytes
/// of a bf16 copy, but no conversion pass on the host, which costs about 2
/// ns an element each way on one core, more than three fp32 copies of it
/// (moert-host-staging-bench); fp32 arrays go straight between the caller's
/// memory and the device.
class Stager {
public:
  explicit Stager(cudaStream_t Stream) : Stream(Stream) {}

  template <typename T> DeviceBuffer<T> upload(const std::vector<T> &Host) {
    DeviceBuffer<T> Buffer{Host.size()};
    toDeviceBytes(Buffer.data(), Host.data(), Buffer.bytes());
    return Buffer;
  }
  DeviceBuffer<float> floats(const float *Data, int64_t Count) {
    DeviceBuffer<float> Buffer{size_t(Count)};
    toDevice(Data, Buffer.data(), Count);
    return Buffer;
  }
  DeviceBuffer<bf16> bf16s(const float *Data, int64_t Count) {
    DeviceBuffer<float> Wide = floats(Data, Count);
    DeviceBuffer<bf16> Narrow{size_t(Count)};
    castToBf16(Count, Wide.data(), Narrow.data(), Stream);
    return Narrow;
  }
  /// Rows x Cols of a row-major host matrix with leading dimension Ld,
  /// packed densely in bf16.
  DeviceBuffer<bf16> matrix(const float *Data, int64_t Rows, int64_t Cols, int64_t Ld) {
    if (Ld == Cols || Rows == 1)
      return bf16s(Data, Rows * Cols);
    std::vector<float> Packed(size_t(Rows * Cols));
    for (int64_t R = 0; R < Rows; ++R)
      std::copy(Data + R * Ld, Data + R * Ld + Cols, Packed.begin() + R * Cols);
    return bf16s(Packed.data(), Rows * Cols);
  }
  /// Count fp32 elements between host memory and a device array.
  void toDevice(const float *Host, float *Device, int64_t Count) {
    toDeviceBytes(Device, Host, size_t(Count) * sizeof(float));
  }
  /// Through pinned memory where the bytes fit its ring, so that the host
  /// does not wait for the device's queued work; else straight from the
  /// caller's memory, which waits.
  void toDeviceBytes(void *Device, const void *Host, size_t Bytes) {
    bool Queued = false;
    if (Bytes) {
      Queued = Pinned.copy(Device, Host, Bytes, Stream);
      if (!Queued)
        MOERT_CUDA_CHECK(cudaMemcpy(Device, Host, Bytes, cudaMemcpyHostToDevice));
    }
    count(int64_t(Bytes), 0, Queued);
  }
  void toHost(const float *Device, float *Host, int64_t Count) {
    if (Count)
      MOERT_CUDA_CHECK(cudaMemcpy(Host, Device, size_t(Count) * sizeof(float), cudaMemcpyDeviceToHost));
    count(0, Count * int64_t(sizeof(float)));
  }
  template <typename T> std::vector<T> download(const DeviceBuffer<T> &Buffer) {
    count(0, int64_t(Buffer.bytes()));
    return Buffer.download();
  }
  void downloadTo(const DeviceBuffer<bf16> &Buffer, float *Out) {
    DeviceBuffer<float> Wide{Buffer.size()};
    castToF32(int64_t(Buffer.size()), Buffer.data(), Wide.data(), Stream);
    downloadTo(Wide, Out);
  }
  void downloadTo(const DeviceBuffer<float> &Buffer, float *Out) { toHost(Buffer.data(), Out, int64_t(Buffer.size())); }
  BackendTraffic Moved;
  /// The operation the copies are made for (Stager::Operation).
  const char *Operation = "other";

private:
  void count(int64_t ToDevice, int64_t ToHost, bool Queued = false) {
    Moved.HostToDeviceBytes += ToDevice;
    Moved.DeviceToHostBytes += ToHost;
    BackendTraffic::Copies &Of = Moved.ByOperation[Operation];
    Of.HostToDeviceBytes += ToDevice;
    Of.DeviceToHostBytes += ToHost;
    if (ToDevice || ToHost) {
      Of.Transfers += 1;
      Of.Queued += Queued;
    }
  }

public:
  /// A copy back that is only queued (LaterLosses).
  void queuedDownload(int64_t Bytes) { count(0, Bytes, /*Queued=*/true); }

private:
  cudaStream_t Stream;
  cuda::PinnedUploads Pinned;
};

/// Each loss from its row's [sum of exponentials, target logit] over the
/// whole vocabulary; 0 for a negative label.
void lossesFromStatistics(int64_t Rows, const int32_t *Labels, const float *Stats, double *Losses) {
  for (int64_t I = 0; I < Rows; ++I)
    Losses[I] = Labels[I] < 0 ? 0.0 : std::log(double(Stats[2 * I])) - double(Stats[2 * I + 1]);
}

/// Loss heads' row statistics on their way back (LossHeadArgs::LossesLater):
/// each copied into pinned memory behind the work queued before it, and
/// made into losses when the caller asks for them, so that the host need
/// not wait for the device at the loss head.
class LaterLosses {
public:
  LaterLosses() = default;
  LaterLosses(const LaterLosses &) = delete;
  LaterLosses &operator=(const LaterLosses &) = delete;
  ~LaterLosses() {
    // The queued copies write the pinned buffers: wait for them; a device
    // already gone reports errors, which a destructor ignores.
    for (auto &[Losses, C] : Pending) {
      cudaEventSynchronize(C.Done);
      release(C);
    }
    for (auto &[Count, Stats] : SpareStats)
      cudaFreeHost(Stats);
    for (cudaEvent_t E : SpareEvents)
      cudaEventDestroy(E);
  }

  /// Queues the copy of Rows rows' statistics (DeviceStats, [2 Rows]) for
  /// Losses.
  void queue(double *Losses, const int32_t *Labels, int64_t Rows, const float *DeviceStats, cudaStream_t Stream) {
    // An earlier head's copy for an array at the same address that was
    // never asked for (its owner is gone): dropped, not written.
    if (auto Stale = Pending.find(Losses); Stale != Pending.end()) {
      MOERT_CUDA_CHECK(cudaEventSynchronize(Stale->second.Done));
      release(Stale->second);
      Pending.erase(Stale);
    }
    Copy C;
    C.Count = size_t(2 * Rows);
    C.Labels.assign(Labels, Labels + Rows);
    auto Spare = std::find_if(SpareStats.begin(), SpareStats.end(), [&](auto &S) { return S.first == C.Count; });
    if (Spare != SpareStats.end()) {
      C.Stats = Spare->second;
      SpareStats.erase(Spare);
    } else {
      MOERT_CUDA_CHECK(
          cudaHostAlloc(reinterpret_cast<void **>(&C.Stats), C.Count * sizeof(float), cudaHostAllocDefault));
    }
    if (!SpareEvents.empty()) {
      C.Done = SpareEvents.back();
      SpareEvents.pop_back();
    } else if (const cudaError_t Made = cudaEventCreateWithFlags(&C.Done, cudaEventDisableTiming);
               Made != cudaSuccess) {
      SpareStats.emplace_back(C.Count, C.Stats);
      MOERT_CUDA_CHECK(Made);
    }
    Copy &Queued = Pending[Losses] = std::move(C);
    MOERT_CUDA_CHECK(
        cudaMemcpyAsync(Queued.Stats, DeviceStats, Queued.Count * sizeof(float), cudaMemcpyDeviceToHost, Stream));
    MOERT_CUDA_CHECK(cudaEventRecord(Queued.Done, Stream));
  }

  /// Writes Losses from its queued copy once that is done; nothing for an
  /// array that has none.
  void read(const double *Losses) {
    auto It = Pending.find(Losses);
    if (It == Pending.end())
      return;
    Copy C = std::move(It->second);
    Pending.erase(It);
    const cudaError_t Waited = cudaEventSynchronize(C.Done);
    if (Waited == cudaSuccess)
      lossesFromStatistics(int64_t(C.Labels.size()), C.Labels.data(), C.Stats, const_cast<double *>(Losses));
    release(C);
    MOERT_CUDA_CHECK(Waited);
  }

private:
  struct Copy {
    float *Stats = nullptr;
    size_t Count = 0;
    cudaEvent_t Done = nullptr;
    std::vector<int32_t> Labels;
  };
  void release(Copy &C) {
    SpareStats.emplace_back(C.Count, C.Stats);
    SpareEvents.push_back(C.Done);
  }

  std::map<const double *, Copy> Pending;
  std::vector<std::pair<size_t, float *>> SpareStats;
  std::vector<cudaEvent_t> SpareEvents;
};

/// Charges the copies made in its lifetime to Name (BackendTraffic::ByOperation);
/// the innermost one is in force.
class Charge {
public:
  Charge(Stager &Copies, const char *Name) : Copies(Copies), Previous(Copies.Operation) { Copies.Operation = Name; }
  ~Charge() { Copies.Operation = Previous; }
  Charge(const Charge &) = delete;
  Charge &operator=(const Charge &) = delete;

private:
  Stager &Copies;
  const char *Previous;
};

DeviceBuffer<bf16> packed(Stager &Copies, const std::vector<float> &Span) {
  return Copies.bf16s(Span.data(), int64_t(Span.size()));
}

/// Integer arrays that operations upload again and again with the same
/// values: the positions of a micro batch's tokens, which every layer's RoPE
/// and attention read, forward and backward, and the permutation's indices,
/// which a layer's forward and backward both read. Each is uploaded once and
/// found again by its values, so that a later call is not a copy (which
/// would wait for the device's queued work). A found array is shared with
/// the operation that asked for it, which may outlive its place here.
class UploadedIntegers {
public:
  using Shared = std::shared_ptr<const DeviceBuffer<int32_t>>;
  /// What is kept, at most: the permutation's indices of every layer of a
  /// few micro batches in flight at a real model's size (a layer's two are
  /// 256 KiB for 4096 tokens of top 8); past either bound, all are dropped.
  static constexpr size_t MaxArrays = 4096, MaxBytes = size_t(64) << 20;

  Shared get(Stager &Copies, const std::vector<int32_t> &Values) {
    if (Shared Found = find(Values))
      return Found;
    return put(Values, Copies.upload(Values));
  }
  /// The values' device copy if one is here, without uploading them.
  Shared find(const std::vector<int32_t> &Values) const {
    auto It = Uploaded.find(Values);
    return It == Uploaded.end() ? nullptr : It->second;
  }
  /// Values an operation made on the device (and brought back): a later
  /// get() of the same values finds them there.
  Shared put(const std::vector<int32_t> &Values, DeviceBuffer<int32_t> Device) {
    auto It = Uploaded.find(Values);
    if (It != Uploaded.end())
      return It->second;
    const size_t Bytes = Values.size() * sizeof(int32_t);
    if (Uploaded.size() >= MaxArrays || KeptBytes + Bytes > MaxBytes) {
      Uploaded.clear();
      KeptBytes = 0;
    }
    KeptBytes += Bytes;
    return Uploaded.emplace(Values, std::make_shared<const DeviceBuffer<int32_t>>(std::move(Device))).first->second;
  }

private:
  std::map<std::vector<int32_t>, Shared> Uploaded;
  size_t KeptBytes = 0;
};

/// The device copies of one attention block: its spans packed, positions
/// counted from the spans' first (CudaBackend::deviceBlock).
struct DeviceBlock {
  DeviceAttentionShape Shape;
  DeviceBuffer<bf16> Q, K, V;
  UploadedIntegers::Shared QPos, KPos;
};

/// A bf16 operand on the device: a held array's copy (not owned) or a
/// staged one.
struct Operand {
  const bf16 *Data = nullptr;
  int64_t Ld = 0;
  DeviceBuffer<bf16> Staged;
};

/// Rows of a device matrix as an operand (not owned).
Operand onDevice(const bf16 *Data, int64_t Ld) {
  Operand O;
  O.Data = Data;
  O.Ld = Ld;
  return O;
}

class CudaBackend final : public ComputeBackend {
public:
  const char *name() const override { return "cuda"; }
  const char *precision() const override {
    return "GEMMs, attention and its output gate, RMSNorm, LayerNorm, Gated DeltaNet's convolution and output norm, "
           "RoPE, SwiGLU, GELU, the experts' MLPs, token permutation, latent attention's column splits and the loss "
           "head on bf16 operands with fp32 accumulation, the router, Gated DeltaNet's query and key norms, gates and "
           "recurrence, the residual stream's adds, the gradient sums and AdamW in fp32 on the device (of the "
           "parameters no host code reads), the rest in fp32 on the host";
  }

  void gemm(const GemmArgs &G) override {
    Charge Charged(Copies, "gemm");
    if (G.M == 0 || G.N == 0)
      return;
    if (G.K == 0) { // no product: C = Beta * C, as cblas leaves it
      for (int64_t R = 0; R < G.M; ++R)
        for (int64_t C = 0; C < G.N; ++C)
          G.C[R * G.LdC + C] = G.Beta == 0.0f ? 0.0f : G.Beta * G.C[R * G.LdC + C];
      return;
    }
    Operand A = operand(G.A, G.TransA ? G.K : G.M, G.TransA ? G.M : G.K, G.LdA);
    Operand B = operand(G.B, G.TransB ? G.N : G.K, G.TransB ? G.K : G.N, G.LdB);
    productInto(G.TransA, G.TransB, G.M, G.N, G.K, G.Alpha, A, B, G.Beta, G.C, G.LdC);
  }

  void rmsNormForward(int64_t Rows, int64_t Hidden, const float *X, const float *W, double Eps, float *Y,
                      float *Rstd) override {
    Charge Charged(Copies, "rmsnorm");
    if (Rows == 0)
      return;
    Operand DX = input(X, Rows * Hidden);
    Operand DW = input(W, Hidden);
    DeviceBuffer<bf16> DY{size_t(Rows * Hidden)};
    DeviceBuffer<float> DRstd{size_t(Rows)};
    cuda::rmsNormForward(Rows, Hidden, DX.Data, DW.Data, float(Eps), DY.data(), DRstd.data(), Blas.stream());
    result(DY, Y);
    result(DRstd, Rstd);
  }

  void rmsNormBackward(int64_t Rows, int64_t Hidden, const float *X, const float *W, const float *Rstd, const float *DY,
                       float *DX, float *DW) override {
    Charge Charged(Copies, "rmsnorm");
    if (Rows == 0)
      return;
    Operand X16 = input(X, Rows * Hidden), W16 = input(W, Hidden), DY16 = input(DY, Rows * Hidden);
    DeviceBuffer<bf16> DX16{size_t(Rows * Hidden)};
    DeviceBuffer<float> Staged;
    const float *R32 = wideInput(Rstd, Rows, Staged); // the forward's, where it kept them
    AddedTo DW32(*this, DW, Hidden);
    cuda::rmsNormBackward(Rows, Hidden, X16.Data, W16.Data, R32, DY16.Data, DX16.data(), DW32.get(), Blas.stream());
    result(DX16, DX);
    DW32.finish();
  }

  bool gatedRmsNormForward(int64_t Rows, int64_t Width, const float *O, const float *Z, const float *W, double Eps,
                           float *Y, float *Rstd) override {
    Charge Charged(Copies, "gated norm");
    if (Rows == 0)
      return true;
    Operand O16 = input(O, Rows * Width), Z16 = input(Z, Rows * Width), W16 = input(W, Width);
    DeviceBuffer<bf16> Y16{size_t(Rows * Width)};
    DeviceBuffer<float> R32{size_t(Rows)};
    cuda::gatedRmsNormForward(Rows, Width, O16.Data, Z16.Data, W16.Data, float(Eps), Y16.data(), R32.data(),
                              Blas.stream());
    result(Y16, Y);
    result(R32, Rstd);
    return true;
  }

  bool gatedRmsNormBackward(int64_t Rows, int64_t Width, const float *O, const float *Z, const float *W,
                            const float *Rstd, const float *DY, float *DO, float *DZ, float *DW) override {
    Charge Charged(Copies, "gated norm");
    if (Rows == 0)
      return true;
    Operand O16 = input(O, Rows * Width), Z16 = input(Z, Rows * Width), W16 = input(W, Width),
            DY16 = input(DY, Rows * Width);
    DeviceBuffer<float> Staged;
    const float *R32 = wideInput(Rstd, Rows, Staged); // the forward's, where it kept them
    DeviceBuffer<bf16> DO16{size_t(Rows * Width)}, DZ16{size_t(Rows * Width)};
    AddedTo DW32(*this, DW, Width);
    cuda::gatedRmsNormBackward(Rows, Width, O16.Data, Z16.Data, W16.Data, R32, DY16.Data, DO16.data(), DZ16.data(),
                               DW32.get(), Blas.stream());
    result(DO16, DO);
    result(DZ16, DZ);
    DW32.finish();
    return true;
  }

  // The vision tower's pieces work in place on arrays the backend keeps
  // in fp32 (held wide); on others the host's loops run.
  bool addRowBias(int64_t Rows, int64_t Cols, const float *Bias, float *Y) override {
    Charge Charged(Copies, "bias");
    HeldCopy *H = wide(Y, Rows * Cols);
    if (!H)
      return false;
    DeviceBuffer<float> StagedBias;
    const float *Bias32 = wideInput(Bias, Cols, StagedBias);
    float *Y32 = inPlace(*H, Y);
    cuda::addRowBias(Rows, Cols, Bias32, Y32, Blas.stream());
    return true;
  }

  bool addColumnSums(int64_t Rows, int64_t Cols, const float *DY, float *DBias) override {
    Charge Charged(Copies, "bias");
    if (Cols == 0)
      return true;
    AddedTo DB32(*this, DBias, Cols);
    if (HeldCopy *H = wide(DY, Rows * Cols)) {
      cuda::addColumnSums(Rows, Cols, inMaster(*H, DY), DB32.get(), Blas.stream());
    } else {
      Operand DY16 = input(DY, Rows * Cols);
      cuda::addColumnSums(Rows, Cols, DY16.Data, DB32.get(), Blas.stream());
    }
    DB32.finish();
    return true;
  }

  bool interpolateRowsForward(int64_t N, int64_t Cols, const int64_t *Index, const float *Weight, const float *Table,
                              float *X) override {
    Charge Charged(Copies, "interpolation");
    HeldCopy *H = wide(X, N * Cols);
    if (!H)
      return false;
    UploadedIntegers::Shared Index32 = indices(Index, 4 * N);
    DeviceBuffer<float> StagedWeight, StagedTable;
    const float *Weight32 = wideInput(Weight, 4 * N, StagedWeight);
    const int64_t TableRows = N ? *std::max_element(Index, Index + 4 * N) + 1 : 0;
    const float *Table32 = wideInput(Table, TableRows * Cols, StagedTable);
    cuda::interpolateRowsForward(N, Cols, Index32->data(), Weight32, Table32, inPlace(*H, X), Blas.stream());
    return true;
  }

  bool interpolateRowsBackward(int64_t N, int64_t Cols, const int64_t *Index, const float *Weight, const float *DX,
                               float *DTable) override {
    Charge Charged(Copies, "interpolation");
    if (N * Cols == 0)
      return true;
    const int64_t TableRows = *std::max_element(Index, Index + 4 * N) + 1;
    HeldCopy *Sum = heldSum(DTable, TableRows * Cols);
    if (!Sum)
      return false; // a table's gradient the host keeps: its loop adds to it
    UploadedIntegers::Shared Index32 = indices(Index, 4 * N);
    DeviceBuffer<float> StagedWeight, StagedDX;
    cuda::interpolateRowsBackward(N, Cols, Index32->data(), wideInput(Weight, 4 * N, StagedWeight),
                                  wideInput(DX, N * Cols, StagedDX), Sum->at(DTable), Blas.stream());
    return true;
  }

  bool ropeByTable(int64_t Rows, int64_t Groups, const RopeColumns &Columns, float *X, const float *Cos,
                   const float *Sin, bool Inverse) override {
    Charge Charged(Copies, "rope");
    const int64_t Angles = Rows * (Columns.RopeDim / 2);
    DeviceBuffer<bf16> X16 = ownCopy(X, Rows * Groups * Columns.Stride);
    DeviceBuffer<float> StagedCos, StagedSin;
    cuda::ropeByTable(Rows, Groups, Columns, X16.data(), wideInput(Cos, Angles, StagedCos),
                      wideInput(Sin, Angles, StagedSin), Inverse, Blas.stream());
    result(X16, X);
    return true;
  }

  bool sigmoidGateForward(int64_t Count, const float *X, const float *Gate, float *Y) override {
    Charge Charged(Copies, "output gate");
    if (Count == 0)
      return true;
    Operand X16 = input(X, Count), G16 = input(Gate, Count);
    DeviceBuffer<bf16> Y16{size_t(Count)};
    cuda::sigmoidGateForward(Count, X16.Data, G16.Data, Y16.data(), Blas.stream());
    result(Y16, Y);
    return true;
  }

  bool sigmoidGateBackward(int64_t Count, const float *X, const float *Gate, const float *DY, float *DX,
                           float *DGate) override {
    Charge Charged(Copies, "output gate");
    if (Count == 0)
      return true;
    Operand X16 = input(X, Count), G16 = input(Gate, Count), DY16 = input(DY, Count);
    DeviceBuffer<bf16> DX16{size_t(Count)}, DG16{size_t(Count)};
    cuda::sigmoidGateBackward(Count, X16.Data, G16.Data, DY16.Data, DX16.data(), DG16.data(), Blas.stream());
    result(DX16, DX);
    result(DG16, DGate);
    return true;
  }

  bool causalConvSiluForward(const CausalConv &C, const float *X, const float *W, float *Pre, float *Act) override {
    Charge Charged(Copies, "short conv");
    if (C.elements() == 0)
      return true;
    Operand X16 = input(X, C.elements()), W16 = input(W, C.Channels * C.Width);
    DeviceBuffer<bf16> Pre16{size_t(C.elements())};
    DeviceBuffer<float> Act32{size_t(C.elements())};
    cuda::causalConvSiluForward(C, X16.Data, W16.Data, Pre16.data(), Act32.data(), Blas.stream());
    result(Pre16, Pre);
    result(Act32, Act);
    return true;
  }

  bool causalConvSiluBackward(const CausalConv &C, const float *X, const float *W, const float *Pre, const float *DAct,
                              float *DX, float *DW) override {
    Charge Charged(Copies, "short conv");
    if (C.elements() == 0)
      return true;
    const int64_t Weights = C.Channels * C.Width;
    Operand X16 = input(X, C.elements()), W16 = input(W, Weights), Pre16 = input(Pre, C.elements());
    DeviceBuffer<float> StagedDAct, Scratch{size_t(C.elements())};
    const float *DAct32 = wideInput(DAct, C.elements(), StagedDAct);
    DeviceBuffer<bf16> DX16{size_t(C.elements())};
    AddedTo DW32(*this, DW, Weights);
    cuda::causalConvSiluBackward(C, X16.Data, W16.Data, Pre16.Data, DAct32, DX16.data(), DW32.get(), Scratch.data(),
                                 Blas.stream());
    result(DX16, DX);
    DW32.finish();
    return true;
  }

  bool l2NormHeadsForward(int64_t Rows, int64_t Width, double Eps, const float *X, float *Y, float *Inv) override {
    Charge Charged(Copies, "l2 norm");
    if (Rows == 0)
      return true;
    DeviceBuffer<float> StagedX, Y32{size_t(Rows * Width)}, Inv32{size_t(Rows)};
    cuda::l2NormHeadsForward(Rows, Width, float(Eps), wideInput(X, Rows * Width, StagedX), Y32.data(), Inv32.data(),
                             Blas.stream());
    result(Y32, Y);
    result(Inv32, Inv);
    return true;
  }

  bool l2NormHeadsBackward(int64_t Rows, int64_t Width, const float *Y, const float *Inv, const float *DY,
                           float *DX) override {
    Charge Charged(Copies, "l2 norm");
    if (Rows == 0)
      return true;
    DeviceBuffer<float> StagedY, StagedInv, StagedDY, DX32{size_t(Rows * Width)};
    cuda::l2NormHeadsBackward(Rows, Width, wideInput(Y, Rows * Width, StagedY), wideInput(Inv, Rows, StagedInv),
                              wideInput(DY, Rows * Width, StagedDY), DX32.data(), Blas.stream());
    result(DX32, DX);
    return true;
  }

  bool deltaGatesForward(const DeltaGates &Gates, const float *A, const float *B, float *RawA, float *G,
                         float *Beta) override {
    Charge Charged(Copies, "gates");
    const int64_t N = Gates.elements();
    if (N == 0)
      return true;
    DeviceBuffer<float> SA, SB, SDt, SALog, RawA32{size_t(N)}, G32{size_t(N)}, Beta32{size_t(N)};
    DeltaGates OnDevice = Gates;
    OnDevice.DtBias = wideInput(Gates.DtBias, Gates.Heads, SDt);
    OnDevice.ALog = wideInput(Gates.ALog, Gates.Heads, SALog);
    cuda::deltaGatesForward(OnDevice, wideInput(A, N, SA), wideInput(B, N, SB), RawA32.data(), G32.data(),
                            Beta32.data(), Blas.stream());
    result(RawA32, RawA);
    result(G32, G);
    result(Beta32, Beta);
    return true;
  }

  bool deltaGatesBackward(const DeltaGates &Gates, const float *RawA, const float *G, const float *Beta,
                          const float *DG, const float *DBeta, float *DA, float *DB, float *DALog,
                          float *DDtBias) override {
    Charge Charged(Copies, "gates");
    const int64_t N = Gates.elements();
    if (N == 0)
      return true;
    DeviceBuffer<float> SALog, SRawA, SG, SBeta, SDG, SDBeta;
    DeltaGates OnDevice = Gates;
    OnDevice.DtBias = nullptr; // the backward reads ALog alone
    OnDevice.ALog = wideInput(Gates.ALog, Gates.Heads, SALog);
    DeviceBuffer<bf16> DA16{size_t(N)}, DB16{size_t(N)};
    AddedTo DALog32(*this, DALog, Gates.Heads), DDtBias32(*this, DDtBias, Gates.Heads);
    cuda::deltaGatesBackward(OnDevice, wideInput(RawA, N, SRawA), wideInput(G, N, SG), wideInput(Beta, N, SBeta),
                             wideInput(DG, N, SDG), wideInput(DBeta, N, SDBeta), DA16.data(), DB16.data(),
                             DALog32.get(), DDtBias32.get(), Blas.stream());
    result(DA16, DA);
    result(DB16, DB);
    DALog32.finish();
    DDtBias32.finish();
    return true;
  }

  void swiGluForward(int64_t Count, const float *G, const float *U, float *Act) override {
    Charge Charged(Copies, "swiglu");
    if (Count == 0)
      return;
    Operand G16 = input(G, Count), U16 = input(U, Count);
    DeviceBuffer<bf16> A16{size_t(Count)};
    cuda::swiGluForward(Count, G16.Data, U16.Data, A16.data(), Blas.stream());
    result(A16, Act);
  }

  void swiGluBackward(int64_t Count, const float *G, const float *U, const float *DAct, float *DG, float *DU) override {
    Charge Charged(Copies, "swiglu");
    if (Count == 0)
      return;
    Operand G16 = input(G, Count), U16 = input(U, Count), DA16 = input(DAct, Count);
    DeviceBuffer<bf16> DG16{size_t(Count)}, DU16{size_t(Count)};
    cuda::swiGluBackward(Count, G16.Data, U16.Data, DA16.Data, DG16.data(), DU16.data(), Blas.stream());
    result(DG16, DG);
    result(DU16, DU);
  }

  bool layerNormForward(int64_t Rows, int64_t Hidden, const float *X, const float *W, const float *B, double Eps,
                        float *Y, float *Mean, float *Rstd) override {
    Charge Charged(Copies, "layernorm");
    if (Rows == 0)
      return true;
    Operand X16 = input(X, Rows * Hidden), W16 = input(W, Hidden), B16 = input(B, Hidden);
    DeviceBuffer<bf16> Y16{size_t(Rows * Hidden)};
    DeviceBuffer<float> M32{size_t(Rows)}, R32{size_t(Rows)};
    cuda::layerNormForward(Rows, Hidden, X16.Data, W16.Data, B16.Data, float(Eps), Y16.data(), M32.data(), R32.data(),
                           Blas.stream());
    result(Y16, Y);
    result(M32, Mean);
    result(R32, Rstd);
    return true;
  }

  bool layerNormBackward(int64_t Rows, int64_t Hidden, const float *X, const float *W, const float *Mean,
                         const float *Rstd, const float *DY, float *DX, float *DW, float *DB) override {
    Charge Charged(Copies, "layernorm");
    if (Rows == 0)
      return true;
    Operand X16 = input(X, Rows * Hidden), W16 = input(W, Hidden), DY16 = input(DY, Rows * Hidden);
    DeviceBuffer<bf16> DX16{size_t(Rows * Hidden)};
    DeviceBuffer<float> StagedMean, StagedRstd;
    const float *M32 = wideInput(Mean, Rows, StagedMean), *R32 = wideInput(Rstd, Rows, StagedRstd);
    AddedTo DW32(*this, DW, Hidden), DB32(*this, DB, Hidden);
    cuda::layerNormBackward(Rows, Hidden, X16.Data, W16.Data, M32, R32, DY16.Data, DX16.data(), DW32.get(), DB32.get(),
                            Blas.stream());
    result(DX16, DX);
    DW32.finish();
    DB32.finish();
    return true;
  }

  bool gelu(GeluForm Form, int64_t Count, const float *X, float *Y) override {
    Charge Charged(Copies, "gelu");
    if (Count == 0)
      return true;
    Operand X16 = input(X, Count);
    DeviceBuffer<bf16> Y16{size_t(Count)};
    cuda::geluForward(Count, Form == GeluForm::Tanh, X16.Data, Y16.data(), Blas.stream());
    result(Y16, Y);
    return true;
  }

  bool geluBackward(GeluForm Form, int64_t Count, const float *X, const float *DY, float *DX) override {
    Charge Charged(Copies, "gelu");
    if (Count == 0)
      return true;
    Operand X16 = input(X, Count), DY16 = input(DY, Count);
    DeviceBuffer<bf16> DX16{size_t(Count)};
    cuda::geluBackward(Count, Form == GeluForm::Tanh, X16.Data, DY16.Data, DX16.data(), Blas.stream());
    result(DX16, DX);
    return true;
  }

  bool rope(int64_t Rows, int64_t Groups, const RopeColumns &Columns, float *X, const int64_t *Positions, double Theta,
            bool Inverse) override {
    Charge Charged(Copies, "rope");
    const int64_t Count = Columns.positions(Rows);
    std::vector<int32_t> Positions32(static_cast<size_t>(Count));
    for (int64_t I = 0; I < Count; ++I) {
      if (Positions[I] < 0 || Positions[I] >= (int64_t(1) << 31))
        return false;
      Positions32[size_t(I)] = int32_t(Positions[I]);
    }
    DeviceBuffer<bf16> X16 = ownCopy(X, Rows * Groups * Columns.Stride);
    UploadedIntegers::Shared P = integersOnDevice(Positions32);
    cuda::applyRope(Rows, Groups, Columns, X16.data(), P->data(), Theta, Inverse, Blas.stream());
    result(X16, X);
    return true;
  }

  bool attentionBlockForward(const AttentionBlockArgs &A) override {
    Charge Charged(Copies, "attention");
    if (!attentionKernelTakes(A))
      return false;
    DeviceBlock Block = deviceBlock(A);
    const int64_t OutWidth = A.QHeads * A.VHeadDim, Statistics = A.Batch * A.QHeads * A.LocalTokens;
    const bool Whole = A.QBegin == 0 && A.QLen == A.LocalTokens;
    // A fresh block's statistics, where they are held (wide) and the span
    // is all of them, are made and stay where the kernel writes them.
    HeldCopy *Kept = A.Fresh && Whole ? wide(A.Lse, Statistics) : nullptr;
    DeviceBuffer<float> Staged, Out;
    float *Lse = nullptr;
    // Where no key has reached the span yet (a fresh block, or every
    // log-sum-exp -inf), the merge weighs the running output by zero: it
    // starts from zeros and -inf on the device instead of crossing.
    bool Unreached = A.Fresh;
    if (Kept) {
      writeMaster(*Kept, A.Lse, Statistics);
      Lse = Kept->at(A.Lse);
    } else if (A.Fresh) {
      Staged.resize(size_t(A.Batch * A.QHeads * A.QLen));
      Lse = Staged.data();
    } else {
      hostValues(A.Lse, Statistics);
      const std::vector<float> Packed = packStat(A.Lse, A);
      Unreached = std::all_of(Packed.begin(), Packed.end(), [](float L) { return std::isinf(L) && L < 0; });
      Staged = Copies.upload(Packed);
      Lse = Staged.data();
    }
    if (Unreached) {
      Out.resize(size_t(A.Batch * A.QLen * OutWidth));
      attentionInit(Block.Shape, Out.data(), Lse, Blas.stream());
    } else {
      Out = Copies.upload(packSpan(A.Out, A.Batch, A.LocalTokens, A.QBegin, A.QLen, OutWidth));
    }
    attentionForwardBlock(Block.Shape, Block.Q.data(), Block.QPos->data(), Block.K.data(), Block.V.data(),
                          Block.KPos->data(), Out.data(), Lse, Blas.stream());
    if (!Kept) {
      unpackSpan(Copies.download(Staged), A.Lse, A.Batch * A.QHeads, A.LocalTokens, A.QBegin, A.QLen, 1);
      dropCopies(A.Lse, Statistics);
    }
    if (Whole) {
      // The span is the whole output, packed as it lies: a hold's copy of
      // it takes the result as an operation's.
      result(Out, A.Out);
      return true;
    }
    unpackSpan(Copies.download(Out), A.Out, A.Batch, A.LocalTokens, A.QBegin, A.QLen, OutWidth);
    dropCopies(A.Out, A.Batch * A.LocalTokens * OutWidth);
    return true;
  }

  bool attentionBlockBackward(const AttentionBlockArgs &A) override {
    Charge Charged(Copies, "attention");
    if (!attentionKernelTakes(A))
      return false;
    DeviceBlock Block = deviceBlock(A);
    int64_t QWidth = A.QHeads * A.HeadDim, KWidth = A.KvHeads * A.HeadDim, OutWidth = A.QHeads * A.VHeadDim,
            VWidth = A.KvHeads * A.VHeadDim;
    DeviceBuffer<bf16> DOut = span(A.DOut, A.Batch, A.LocalTokens, A.QBegin, A.QLen, OutWidth);
    DeviceBuffer<float> StagedLse, StagedDelta;
    const float *Lse = statistic(A, A.FinalLse, StagedLse), *Delta = statistic(A, A.Delta, StagedDelta);
    SumSpan DQ = sumSpan(A.DQ, A.Batch, A.LocalTokens, A.QBegin, A.QLen, QWidth);
    SumSpan DK = sumSpan(A.DK, A.Batch, A.LocalTokens, A.KBegin, A.KLen, KWidth);
    SumSpan DV = sumSpan(A.DV, A.Batch, A.LocalTokens, A.KBegin, A.KLen, VWidth);
    attentionBackwardBlock(Block.Shape, Block.Q.data(), Block.QPos->data(), Block.K.data(), Block.V.data(),
                           Block.KPos->data(), Lse, Delta, DOut.data(), DQ.Packed.data(), DK.Packed.data(),
                           DV.Packed.data(), Blas.stream());
    for (SumSpan *Sum : {&DQ, &DK, &DV})
      addedTo(*Sum);
    return true;
  }

  bool takesRouting(const RouterArgs &A) const override { return cuda::routerKernelTakes(A.Router); }

  // The logits come from where the router's product left them (its held
  // copy), or are drawn here from forced balance's keys, and the scores go
  // back there for the backward; only each token's experts and routing
  // weights and the statistics cross, for the host's dispatcher and the aux
  // loss's all-reduce.
  void routeTokens(const RouterArgs &A) override {
    Charge Charged(Copies, "router");
    const int64_t N = A.Tokens, E = A.Router.Experts, Copied = N * A.Router.TopK;
    DeviceBuffer<float> StagedLogits, Bias;
    const float *Logits = nullptr;
    if (A.BalanceKeys) {
      const DeviceBuffer<uint64_t> Keys = Copies.upload(std::vector<uint64_t>(A.BalanceKeys, A.BalanceKeys + N));
      StagedLogits.resize(size_t(N * E));
      cuda::balancedLogits(N, E, Keys.data(), StagedLogits.data(), Blas.stream());
      Logits = StagedLogits.data();
    } else {
      Logits = wideInput(A.Scores, N * E, StagedLogits);
    }
    if (A.Bias)
      Bias = Copies.floats(A.Bias, E);
    // The experts, their weights and the statistics come back as one copy
    // (each copy waits for the device): [experts as int32 | weights | stats].
    DeviceBuffer<float> Scores{size_t(N * E)}, Chosen{size_t(2 * Copied + 2 * E + 1)};
    static_assert(sizeof(int32_t) == sizeof(float));
    int32_t *TopIdx = reinterpret_cast<int32_t *>(Chosen.data());
    float *TopW = Chosen.data() + Copied, *Stats = TopW + Copied;
    DeviceBuffer<int32_t> Picks{size_t(Copied)};
    DeviceBuffer<double> Div{size_t(N)};
    cuda::routeTokens(A.Router, N, Logits, A.Bias ? Bias.data() : nullptr, Scores.data(), TopIdx, TopW, Blas.stream());
    cuda::routerStats(A.Router, N, Scores.data(), Picks.data(), Div.data(), Stats, Blas.stream());
    result(Scores, A.Scores);
    // The weights stay where the caller holds them (wide), for the combine
    // and the backward there.
    HeldCopy *Weights = wide(A.TopW, Copied);
    if (Weights) {
      writeMaster(*Weights, A.TopW, Copied);
      MOERT_CUDA_CHECK(cudaMemcpyAsync(Weights->at(A.TopW), TopW, size_t(Copied) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, Blas.stream()));
    }
    // The experts stay too, found by their values when the backward asks.
    DeviceBuffer<int32_t> Experts{size_t(Copied)};
    MOERT_CUDA_CHECK(cudaMemcpyAsync(Experts.data(), TopIdx, size_t(Copied) * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                     Blas.stream()));
    const std::vector<float> Back = Copies.download(Chosen);
    std::memcpy(A.TopIdx, Back.data(), size_t(Copied) * sizeof(int32_t));
    if (!Weights)
      std::copy(Back.begin() + Copied, Back.begin() + 2 * Copied, A.TopW);
    std::copy(Back.begin() + 2 * Copied, Back.end(), A.Stats);
    Integers.put(std::vector<int32_t>(A.TopIdx, A.TopIdx + Copied), std::move(Experts));
  }

  void routeTokensBackward(const RouterArgs &A) override {
    Charge Charged(Copies, "router");
    const int64_t N = A.Tokens, E = A.Router.Experts, Copied = N * A.Router.TopK;
    DeviceBuffer<float> StagedScores;
    const float *Scores = wideInput(A.Scores, N * E, StagedScores);
    // The experts are where the forward left them; the weights and their
    // gradients where the caller holds them (wide); the experts' fractions,
    // and what is not held, go as one copy: [fractions | weights |
    // gradients].
    const UploadedIntegers::Shared Experts = integersOnDevice(std::vector<int32_t>(A.TopIdx, A.TopIdx + Copied));
    HeldCopy *Weights = wide(A.TopW, Copied), *Gradients = wide(A.DTopW, Copied);
    std::vector<float> Sent(A.Fraction, A.Fraction + E);
    for (auto [Held, Values] : {std::pair<HeldCopy *, const float *>{Weights, A.TopW}, {Gradients, A.DTopW}})
      if (!Held) {
        hostValues(Values, Copied);
        Sent.insert(Sent.end(), Values, Values + Copied);
      }
    const DeviceBuffer<float> Given = Copies.upload(Sent);
    const float *TopW = Weights ? inMaster(*Weights, A.TopW) : Given.data() + E;
    const float *DTopW = Gradients ? inMaster(*Gradients, A.DTopW) : Given.data() + E + (Weights ? 0 : Copied);
    DeviceBuffer<float> DLogits{size_t(N * E)};
    cuda::routerBackward(A.Router, N, Scores, Experts->data(), TopW, DTopW, Given.data(), A.AuxPerScore, DLogits.data(),
                         Blas.stream());
    result(DLogits, A.DLogits);
  }

  bool gatedDeltaRuleForward(const DeltaRuleArgs &A) override {
    Charge Charged(Copies, "delta rule");
    const DeltaRuleOperands R(A);
    if (!cuda::deltaRuleKernelTakes(R.Shape))
      return false;
    DeviceBuffer<float> SQ, SK, SV, SG, SBeta;
    DeviceBuffer<float> O{size_t(R.VCount)};
    cuda::gatedDeltaRuleForward(R.Shape, wideInput(A.Q, R.QkCount, SQ), wideInput(A.K, R.QkCount, SK),
                                wideInput(A.V, R.VCount, SV), wideInput(A.G, R.GCount, SG),
                                wideInput(A.Beta, R.GCount, SBeta), O.data(), Blas.stream());
    result(O, A.O);
    return true;
  }

  bool gatedDeltaRuleBackward(const DeltaRuleArgs &A) override {
    Charge Charged(Copies, "delta rule");
    const DeltaRuleOperands R(A);
    if (!cuda::deltaRuleKernelTakes(R.Shape))
      return false;
    DeviceBuffer<float> SQ, SK, SV, SG, SBeta, SDO;
    DeviceBuffer<float> DQ{size_t(R.QkCount)}, DK{size_t(R.QkCount)}, DV{size_t(R.VCount)}, DG{size_t(R.GCount)},
        DBeta{size_t(R.GCount)}, Scratch{size_t(cuda::deltaRuleScratch(R.Shape))};
    cuda::gatedDeltaRuleBackward(R.Shape, wideInput(A.Q, R.QkCount, SQ), wideInput(A.K, R.QkCount, SK),
                                 wideInput(A.V, R.VCount, SV), wideInput(A.G, R.GCount, SG),
                                 wideInput(A.Beta, R.GCount, SBeta), wideInput(A.DO, R.VCount, SDO), DQ.data(),
                                 DK.data(), DV.data(), DG.data(), DBeta.data(), Scratch.data(), Blas.stream());
    result(DQ, A.DQ);
    result(DK, A.DK);
    result(DV, A.DV);
    result(DG, A.DG);
    result(DBeta, A.DBeta);
    return true;
  }

  bool takesCpAttention(const CpAttentionArgs &A) const override {
    if (!dynamic_cast<DeviceCommunicator *>(A.Device) || A.SeqLen >= PositionBound)
      return false;
    if (A.Kind != CpAttentionArgs::AllToAll)
      return attentionKernelTakesHeads(A.QHeads, A.KvHeads, A.HeadDim, A.VHeadDim);
    // Each rank attends over QHeads / CP and KvHeads / CP heads.
    const int64_t Cp = A.Device->size();
    return A.QHeads % Cp == 0 && A.KvHeads % Cp == 0 &&
           attentionKernelTakesHeads(A.QHeads / Cp, A.KvHeads / Cp, A.HeadDim, A.VHeadDim);
  }

  // The blocks travel (or are gathered) between the ranks' device copies of
  // K and V; the queries, keys and values come from where the layer keeps
  // them, and the outputs go to where the caller holds them (on the device,
  // where held).
  void cpAttentionForward(const CpAttentionArgs &A) override {
    Charge Charged(Copies, "attention");
    RingShape R(A);
    Operand Q = input(A.Q, R.QCount), K = input(A.K, R.KCount), V = input(A.V, R.VCount);
    DeviceBuffer<float> Out{size_t(R.OutCount)}, Lse{size_t(R.LseCount)};
    auto *Attend = A.Kind == CpAttentionArgs::AllGather  ? cuda::gatheredAttentionForward
                   : A.Kind == CpAttentionArgs::AllToAll ? cuda::headShardedAttentionForward
                                                         : cuda::ringAttentionForward;
    Attend(R.Cp, R.Dims, Q.Data, K.Data, V.Data, Out.data(), Lse.data(), Blas.stream(), ringPositions(R)->data());
    result(Out, A.Out);
    result(Lse, A.Lse);
  }

  void cpAttentionBackward(const CpAttentionArgs &A) override {
    Charge Charged(Copies, "attention");
    RingShape R(A);
    Operand Q = input(A.Q, R.QCount), K = input(A.K, R.KCount), V = input(A.V, R.VCount);
    Operand Out16 = input(A.Out, R.OutCount), DOut16 = input(A.DOut, R.OutCount);
    // Delta reads the output as the blocks' kernels see their operands.
    DeviceBuffer<float> Out32{size_t(R.OutCount)}, StagedLse;
    castToF32(R.OutCount, Out16.Data, Out32.data(), Blas.stream());
    const float *Lse = wideInput(A.Lse, R.LseCount, StagedLse);
    DeviceBuffer<float> DQ{size_t(R.QCount)}, DK{size_t(R.KCount)}, DV{size_t(R.VCount)};
    auto *Attend = A.Kind == CpAttentionArgs::AllGather  ? cuda::gatheredAttentionBackward
                   : A.Kind == CpAttentionArgs::AllToAll ? cuda::headShardedAttentionBackward
                                                         : cuda::ringAttentionBackward;
    Attend(R.Cp, R.Dims, Q.Data, K.Data, V.Data, Out32.data(), Lse, DOut16.Data, DQ.data(), DK.data(), DV.data(),
           Blas.stream(), ringPositions(R)->data());
    result(DQ, A.DQ);
    result(DK, A.DK);
    result(DV, A.DV);
  }

  void mlpForward(const MlpArgs &A) override {
    Charge Charged(Copies, "mlp");
    const int64_t Rows = A.rows(), H = A.Hidden, F = A.Ffn;
    if (Rows == 0)
      return;
    Operand X = input(A.X, Rows * H);
    DeviceBuffer<bf16> G{size_t(Rows * F)}, U{size_t(Rows * F)}, Act{size_t(Rows * F)};
    std::vector<Operand> Weights; // staged weights live until their group has run
    GemmGroup GateUp;
    A.forEachGroup([&](size_t E, int64_t Begin, int64_t M) {
      const Operand &Gate = Weights.emplace_back(operand(A.Gate[E], H, F, F));
      GateUp.add(false, false, M, F, H, X.Data + Begin * H, H, Gate.Data, Gate.Ld, 0.0f, G.data() + Begin * F, F);
      const Operand &Up = Weights.emplace_back(operand(A.Up[E], H, F, F));
      GateUp.add(false, false, M, F, H, X.Data + Begin * H, H, Up.Data, Up.Ld, 0.0f, U.data() + Begin * F, F);
    });
    GateUp.run(Blas, GroupedMode::Auto, OutType::BF16);
    cuda::swiGluForward(Rows * F, G.data(), U.data(), Act.data(), Blas.stream());
    result(G, A.G);
    result(U, A.U);
    result(Act, A.Act);
    if (!A.Y)
      return;
    DeviceBuffer<float> Y{size_t(Rows * H)};
    GemmGroup Down;
    A.forEachGroup([&](size_t E, int64_t Begin, int64_t M) {
      const Operand &W = Weights.emplace_back(operand(A.Down[E], F, H, H));
      Down.add(false, false, M, H, F, Act.data() + Begin * F, F, W.Data, W.Ld, 0.0f, Y.data() + Begin * H, H);
    });
    Down.run(Blas, GroupedMode::Auto, OutType::F32);
    result(Y, A.Y);
  }

  void mlpBackward(const MlpArgs &A) override {
    Charge Charged(Copies, "mlp");
    const int64_t Rows = A.rows(), H = A.Hidden, F = A.Ffn;
    if (Rows == 0)
      return;
    Operand X = input(A.X, Rows * H), G = input(A.G, Rows * F), U = input(A.U, Rows * F), DY = input(A.DY, Rows * H);
    DeviceBuffer<bf16> Act{size_t(Rows * F)}, DAct{size_t(Rows * F)}, DG{size_t(Rows * F)}, DU{size_t(Rows * F)};
    cuda::swiGluForward(Rows * F, G.Data, U.Data, Act.data(), Blas.stream()); // not read back from the host
    std::vector<Operand> Weights; // staged weights live until their group has run
    GemmGroup ThroughDown;
    A.forEachGroup([&](size_t E, int64_t Begin, int64_t M) {
      const Operand &Down = Weights.emplace_back(operand(A.Down[E], F, H, H));
      ThroughDown.add(false, true, M, F, H, DY.Data + Begin * H, H, Down.Data, Down.Ld, 0.0f, DAct.data() + Begin * F,
                      F);
    });
    ThroughDown.run(Blas, GroupedMode::Auto, OutType::BF16);
    A.forEachGroup([&](size_t E, int64_t Begin, int64_t M) {
      productInto(true, false, F, H, M, 1.0f, onDevice(Act.data() + Begin * F, F), onDevice(DY.Data + Begin * H, H),
                  1.0f, A.DDown[E], H);
    });
    cuda::swiGluBackward(Rows * F, G.Data, U.Data, DAct.data(), DG.data(), DU.data(), Blas.stream());
    // DX = DG Gate^T, then += DU Up^T: two groups, as both write DX's rows.
    DeviceBuffer<float> DX{size_t(Rows * H)};
    GemmGroup ThroughGate, ThroughUp;
    A.forEachGroup([&](size_t E, int64_t Begin, int64_t M) {
      const Operand &Gate = Weights.emplace_back(operand(A.Gate[E], H, F, F));
      ThroughGate.add(false, true, M, H, F, DG.data() + Begin * F, F, Gate.Data, Gate.Ld, 0.0f, DX.data() + Begin * H,
                      H);
      const Operand &Up = Weights.emplace_back(operand(A.Up[E], H, F, F));
      ThroughUp.add(false, true, M, H, F, DU.data() + Begin * F, F, Up.Data, Up.Ld, 1.0f, DX.data() + Begin * H, H);
    });
    ThroughGate.run(Blas, GroupedMode::Auto, OutType::F32);
    ThroughUp.run(Blas, GroupedMode::Auto, OutType::F32);
    A.forEachGroup([&](size_t E, int64_t Begin, int64_t M) {
      Operand XRows = onDevice(X.Data + Begin * H, H);
      productInto(true, false, H, F, M, 1.0f, XRows, onDevice(DG.data() + Begin * F, F), 1.0f, A.DGate[E], F);
      productInto(true, false, H, F, M, 1.0f, XRows, onDevice(DU.data() + Begin * F, F), 1.0f, A.DUp[E], F);
    });
    result(DX, A.DX);
  }

  void attentionDelta(int64_t Batch, int64_t Tokens, int64_t QHeads, int64_t VDim, const float *Out, const float *DOut,
                      float *Delta) override {
    Charge Charged(Copies, "attention");
    const int64_t Count = Batch * Tokens * QHeads * VDim;
    if (Count == 0)
      return;
    Operand Out16 = input(Out, Count), DOut16 = input(DOut, Count);
    DeviceBuffer<float> Out32{size_t(Count)}, Delta32{size_t(Batch * QHeads * Tokens)};
    castToF32(Count, Out16.Data, Out32.data(), Blas.stream());
    DeviceAttentionShape Shape;
    Shape.Batch = Batch;
    Shape.QTokens = Tokens;
    Shape.QHeads = QHeads;
    Shape.HeadDim = Shape.VHeadDim = VDim;
    cuda::attentionDelta(Shape, DOut16.Data, Out32.data(), Delta32.data(), Blas.stream());
    result(Delta32, Delta);
  }

  void permutationRouted(const PermuteArgs &A, const int32_t *Chosen, int64_t Experts) override {
    Charge Charged(Copies, "permute");
    const int64_t Copied = A.copies();
    if (Copied == 0 || Experts > cuda::MaxPermuteExperts)
      return;
    const UploadedIntegers::Shared Made = Integers.find(std::vector<int32_t>(Chosen, Chosen + Copied));
    if (!Made)
      return; // experts the host chose: the moves upload the dispatcher's indices
    // The kernel sorts as the dispatcher does (by expert, then by copy), so
    // its arrays are the host's values and stand in for them.
    DeviceBuffer<int32_t> Permutation{size_t(Copied)}, RowOfCopy{size_t(Copied)},
        Scratch{cuda::permutationScratch(Copied, Experts)};
    DeviceBuffer<int64_t> Counts{size_t(Experts)};
    cuda::buildPermutation(A.Tokens, A.TopK, Experts, Made->data(), Permutation.data(), RowOfCopy.data(), Counts.data(),
                           Scratch.data(), Blas.stream());
    Integers.put(narrowIndices(A.Permutation, Copied), std::move(Permutation));
    Integers.put(narrowIndices(A.RowOfCopy, Copied), std::move(RowOfCopy));
  }

  void permuteRows(const PermuteArgs &A, const float *X, float *Rows) override {
    Charge Charged(Copies, "permute");
    if (A.copies() == 0)
      return;
    Operand X16 = input(X, A.Tokens * A.Hidden);
    UploadedIntegers::Shared Permutation = indices(A.Permutation, A.copies());
    DeviceBuffer<bf16> Out{size_t(A.copies() * A.Hidden)};
    cuda::permuteTokens(A.Tokens, A.TopK, A.Hidden, X16.Data, Permutation->data(), Out.data(), Blas.stream());
    result(Out, Rows);
  }

  void permuteRowsBackward(const PermuteArgs &A, const float *DRows, float *DX) override {
    Charge Charged(Copies, "permute");
    if (A.Tokens == 0)
      return;
    Operand D16 = input(DRows, A.copies() * A.Hidden);
    UploadedIntegers::Shared RowOfCopy = indices(A.RowOfCopy, A.copies());
    DeviceBuffer<bf16> DX16{size_t(A.Tokens * A.Hidden)};
    cuda::permuteTokensBackward(A.Tokens, A.TopK, A.Hidden, D16.Data, RowOfCopy->data(), DX16.data(), Blas.stream());
    result(DX16, DX);
  }

  void unpermuteRows(const PermuteArgs &A, const float *Rows, float *Y) override {
    Charge Charged(Copies, "permute");
    if (A.Tokens == 0)
      return;
    Operand R16 = input(Rows, A.copies() * A.Hidden);
    UploadedIntegers::Shared RowOfCopy = indices(A.RowOfCopy, A.copies());
    DeviceBuffer<float> StagedWeights;
    const float *W = wideInput(A.Weights, A.copies(), StagedWeights);
    DeviceBuffer<bf16> Y16{size_t(A.Tokens * A.Hidden)};
    cuda::unpermuteTokens(A.Tokens, A.TopK, A.Hidden, R16.Data, RowOfCopy->data(), W, Y16.data(), Blas.stream());
    result(Y16, Y);
  }

  void unpermuteRowsBackward(const PermuteArgs &A, const float *DY, const float *Rows, float *DRows,
                             float *DWeights) override {
    Charge Charged(Copies, "permute");
    if (A.Tokens == 0)
      return;
    Operand DY16 = input(DY, A.Tokens * A.Hidden), R16 = input(Rows, A.copies() * A.Hidden);
    UploadedIntegers::Shared RowOfCopy = indices(A.RowOfCopy, A.copies());
    DeviceBuffer<float> StagedWeights, DW{size_t(A.copies())};
    const float *W = wideInput(A.Weights, A.copies(), StagedWeights);
    DeviceBuffer<bf16> DR16{size_t(A.copies() * A.Hidden)};
    cuda::unpermuteTokensBackward(A.Tokens, A.TopK, A.Hidden, DY16.Data, R16.Data, RowOfCopy->data(), W, DR16.data(),
                                  DW.data(), Blas.stream());
    result(DR16, DRows);
    result(DW, DWeights);
  }

  bool fusesLossHead() const override { return true; }

  void lossHead(const LossHeadArgs &A) override {
    Charge Charged(Copies, "loss head");
    if (A.Rows == 0)
      return;
    const int64_t Rows = A.Rows, Vocab = A.Vocab, Hidden = A.Hidden;
    // The statistics combined on the host (a tp group without a device
    // counterpart) come back at once; the others behind the queued work.
    const bool Later = A.LossesLater && (A.Device || !A.SumOverGroup);
    Operand X = operand(A.X, Rows, Hidden, Hidden);
    Operand W = operand(A.W, Hidden, Vocab, Vocab);
    DeviceBuffer<int32_t> Labels = Copies.upload(std::vector<int32_t>(A.Labels, A.Labels + Rows));
    Operand DLogits;
    DLogits.Staged.resize(size_t(Rows * Vocab));
    DLogits.Data = DLogits.Staged.data();
    DLogits.Ld = Vocab;
    std::vector<float> Stats;
    {
      DeviceBuffer<float> Logits{size_t(Rows * Vocab)};
      cuda::gemm(Blas, false, false, Rows, Vocab, Hidden, 1.0f, X.Data, X.Ld, W.Data, W.Ld, 0.0f, Logits.data(),
                 OutType::F32, Vocab);
      // The group's statistics: per-row figures, combined between the
      // phases over the group's device communicator where they are, else
      // through the host; the logits stay.
      DeviceBuffer<float> RowMax{size_t(Rows)};
      crossEntropyRowMax(Rows, Vocab, Logits.data(), RowMax.data(), Blas.stream());
      if (A.Device) {
        Communicator &Group = onComputeStream(*A.Device);
        DeviceBuffer<float> Maxima{size_t(Group.size() * Rows)};
        Group.allGather(RowMax.data(), Maxima.data(), size_t(Rows), DType::F32);
        maxOverSlices(Group.size(), Rows, Maxima.data(), RowMax.data(), Blas.stream());
      } else if (A.MaxOverGroup) {
        std::vector<float> Max = Copies.download(RowMax);
        A.MaxOverGroup(Max.data(), Rows);
        RowMax = Copies.upload(Max);
      }
      DeviceBuffer<float> DeviceStats{size_t(2 * Rows)};
      crossEntropyExpSum(Rows, Vocab, Logits.data(), RowMax.data(), Labels.data(), A.VocabStart, DeviceStats.data(),
                         Blas.stream());
      if (A.Device)
        onComputeStream(*A.Device).allReduceSum(DeviceStats.data(), size_t(2 * Rows), DType::F32);
      if (Later) {
        Losses.queue(A.Losses, A.Labels, Rows, DeviceStats.data(), Blas.stream());
        Copies.queuedDownload(int64_t(DeviceStats.bytes()));
      } else {
        Stats = Copies.download(DeviceStats);
        if (A.SumOverGroup && !A.Device) {
          A.SumOverGroup(Stats.data(), 2 * Rows);
          DeviceStats = Copies.upload(Stats);
        }
      }
      crossEntropyGrad(Rows, Vocab, Logits.data(), DeviceStats.data(), Labels.data(), A.VocabStart, A.Scale,
                       DLogits.Staged.data(), Blas.stream());
    }
    if (!Later)
      lossesFromStatistics(Rows, A.Labels, Stats.data(), A.Losses);
    DeviceBuffer<float> DX{size_t(Rows * Hidden)};
    cuda::gemm(Blas, false, true, Rows, Hidden, Vocab, 1.0f, DLogits.Data, DLogits.Ld, W.Data, W.Ld, 0.0f, DX.data(),
               OutType::F32, Hidden);
    result(DX, A.DX);
    productInto(true, false, Hidden, Vocab, Rows, 1.0f, X, DLogits, 1.0f, A.DW, Vocab);
  }

  void lossesRead(const double *Read) override { Losses.read(Read); }

  void holdArrays(const std::vector<HeldArray> &Arrays) override {
    for (const HeldArray &A : Arrays)
      if (A.Wide && A.Kind != HeldArray::BackendOnly)
        throw std::logic_error("the CUDA backend keeps only BackendOnly arrays wide");
    std::vector<const float *> &Level = Levels.emplace_back();
    for (const HeldArray &A : Arrays)
      if (A.Count > 0 && !overlapsHeld(A.Data, A.Count)) {
        HeldCopy &H = Held[A.Data];
        H.Count = A.Count;
        H.Kind = A.Kind;
        H.Wide = A.Wide;
        H.Unset = A.Unset && A.Kind == HeldArray::BackendOnly && !A.Wide;
        H.Host = A.Data;
        H.Depth = Levels.size() - 1;
        Level.push_back(A.Data);
      }
  }
  void releaseArrays() override {
    if (Levels.empty())
      return;
    for (const float *Begin : Levels.back()) {
      auto It = Held.find(Begin);
#ifdef MOERT_CUDA_EMULATION
      checkUnwritten(It->second);
#endif
      flush(It->second);
      unspecified(It->second);
      Held.erase(It);
    }
    Levels.pop_back();
  }

  void hostWrote(const float *Data, int64_t Count) override { dropCopies(Data, Count); }

  void embeddingForward(const EmbeddingArgs &A, const float *Table, float *Out) override {
    Charge Charged(Copies, "embedding");
    HeldCopy *T = resident(Table, A.VocabRows * A.Hidden);
    if (!T || A.Tokens == 0) { // a host table: looked up where it is
      flushOverlapping(Table, A.VocabRows * A.Hidden);
      ComputeBackend::embeddingForward(A, Table, Out);
      dropCopies(Out, A.Tokens * A.Hidden);
      return;
    }
    master(*T);
    const UploadedIntegers::Shared Ids = tokenIds(A);
    DeviceBuffer<float> Rows{size_t(A.Tokens * A.Hidden)};
    cuda::embeddingGather(A.Tokens, A.Hidden, T->at(Table), A.VocabStart, A.VocabRows, Ids->data(), Rows.data(),
                          Blas.stream());
    result(Rows, Out);
  }

  void embeddingBackward(const EmbeddingArgs &A, const float *D, float *DTable) override {
    Charge Charged(Copies, "embedding");
    HeldCopy *Sum = A.Tokens ? heldSum(DTable, A.VocabRows * A.Hidden) : nullptr;
    if (!Sum) {
      hostValues(D, A.Tokens * A.Hidden);
      ComputeBackend::embeddingBackward(A, D, DTable);
      dropCopies(DTable, A.VocabRows * A.Hidden);
      return;
    }
    const UploadedIntegers::Shared Ids = tokenIds(A);
    DeviceBuffer<float> Staged;
    const float *Rows = wideInput(D, A.Tokens * A.Hidden, Staged);
    cuda::embeddingScatterAdd(A.Tokens, A.Hidden, Rows, A.VocabStart, A.VocabRows, Ids->data(), Sum->at(DTable),
                              Blas.stream());
  }

  void adamW(const AdamWArgs &A) override {
    Charge Charged(Copies, "optimizer");
    if (A.Count == 0)
      return;
    if (!resident(A.Param, A.Count) && !resident(A.M, A.Count) && !resident(A.V, A.Count) &&
        !resident(A.Grad, A.Count)) {
      // Host arrays (what a host communicator sums, what host code reads)
      // are stepped where they are: staging them would move four arrays.
      for (const float *X : std::initializer_list<const float *>{A.Param, A.M, A.V, A.Grad})
        flushOverlapping(X, A.Count);
      ComputeBackend::adamW(A);
      for (const float *X : {A.Param, A.M, A.V})
        dropCopies(X, A.Count);
      return;
    }
    // Each array on the device: in place where resident, else staged and
    // its result copied back.
    struct Array {
      float *Host;
      HeldCopy *Resident;
      DeviceBuffer<float> Staged;
      float *data() { return Resident ? Resident->at(Host) : Staged.data(); }
    };
    auto On = [&](const float *Host, bool Written, bool CopyInStep = false) {
      Array X{const_cast<float *>(Host), resident(Host, A.Count), {}};
      if (X.Resident) {
        master(*X.Resident);
        if (Written)
          aheadOfHost(*X.Resident, CopyInStep);
      } else {
        flushOverlapping(Host, A.Count);
        X.Staged = Copies.floats(Host, A.Count);
      }
      return X;
    };
    // The update refreshes the parameter's bf16 copy, where it has one.
    HeldCopy *ParamHeld = resident(A.Param, A.Count);
    bf16 *ParamCopy =
        ParamHeld && ParamHeld->Copy.size() ? ParamHeld->Copy.data() + (A.Param - ParamHeld->Host) : nullptr;
    Array Param = On(A.Param, true, ParamCopy != nullptr), M = On(A.M, true), V = On(A.V, true),
          Grad = On(A.Grad, false);
    AdamWConstants C{A.Beta1, A.Beta2, A.Eps, A.StepSize, A.Bc2Sqrt, A.Scale, A.Decay};
    cuda::adamWUpdate(A.Count, C, Param.data(), M.data(), V.data(), Grad.data(), ParamCopy, Blas.stream());
    for (Array *Out : {&Param, &M, &V})
      if (!Out->Resident)
        result(Out->Staged, Out->Host);
  }

  double sumSquares(const std::vector<ConstArray> &Arrays) override {
    Charge Charged(Copies, "optimizer");
    // Resident arrays are summed on the device (one figure comes back),
    // host arrays on the host.
    std::vector<ConstArray> OnHost;
    DeviceBuffer<double> Scratch{size_t(SumSquaresScratch)}, Sum{1};
    bool Accumulate = false;
    for (const ConstArray &A : Arrays) {
      HeldCopy *H = A.Count ? resident(A.Data, A.Count) : nullptr;
      if (!H) {
        flushOverlapping(A.Data, A.Count);
        OnHost.push_back(A);
        continue;
      }
      master(*H);
      cuda::sumSquares(A.Count, H->at(A.Data), Scratch.data(), Sum.data(), Accumulate, Blas.stream());
      Accumulate = true;
    }
    const double Host = ComputeBackend::sumSquares(OnHost);
    return Accumulate ? Copies.download(Sum)[0] + Host : Host;
  }

  void zero(float *Data, int64_t Count) override {
    HeldCopy *H = wide(Data, Count);
    if (!H) {
      ComputeBackend::zero(Data, Count);
      hostWrote(Data, Count);
      return;
    }
    writeMaster(*H, Data, Count);
    MOERT_CUDA_CHECK(cudaMemsetAsync(H->at(Data), 0, size_t(Count) * sizeof(float), Blas.stream()));
  }

  void add(int64_t Count, const float *A, const float *B, float *Out) override {
    Charge Charged(Copies, "add");
    HeldCopy *To = wide(Out, Count);
    if (Count == 0 || (!To && !wide(A, Count) && !wide(B, Count))) {
      for (const float *X : {A, B, const_cast<const float *>(Out)})
        hostValues(X, Count);
      ComputeBackend::add(Count, A, B, Out);
      dropCopies(Out, Count);
      return;
    }
    // Where one of them is on the device, the others come to it (a sum
    // the host reads comes back, as an operation's result).
    DeviceBuffer<float> StagedA, StagedB;
    const float *DA = wideInput(A, Count, StagedA), *DB = wideInput(B, Count, StagedB);
    if (To) {
      writeMaster(*To, Out, Count);
      cuda::addF32(Count, DA, DB, To->at(Out), Blas.stream());
      return;
    }
    DeviceBuffer<float> Sum{size_t(Count)};
    cuda::addF32(Count, DA, DB, Sum.data(), Blas.stream());
    result(Sum, Out);
  }

  void copy(const float *Src, float *Dst, int64_t Count) override {
    Charge Charged(Copies, "copy");
    if (Count == 0)
      return;
    HeldCopy *From = wide(Src, Count), *To = wide(Dst, Count);
    if (From && !From->Master.size())
      From = nullptr; // the host's values are the array's
    if (!From)
      hostValues(Src, Count);
    if (!To) {
      if (From)
        Copies.toHost(From->at(Src), Dst, Count);
      else
        std::copy_n(Src, Count, Dst);
      dropCopies(Dst, Count);
      return;
    }
    writeMaster(*To, Dst, Count);
    if (From)
      MOERT_CUDA_CHECK(cudaMemcpyAsync(To->at(Dst), From->at(Src), size_t(Count) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, Blas.stream()));
    else
      Copies.toDevice(Src, To->at(Dst), Count);
  }

  void copyColumns(const ColumnBlocks &Blocks, const float *Src, float *Dst) override {
    Charge Charged(Copies, "copy columns");
    const int64_t SrcExtent = Blocks.srcExtent(), DstExtent = Blocks.dstExtent();
    HeldCopy *To = Blocks.empty() ? nullptr : containing(Dst, DstExtent);
    const bool IntoWide = To && To->Wide,
               IntoCopy = To && !To->Wide && To->Kind == HeldArray::BackendOnly && !Blocks.Accumulate;
    if (!IntoWide && !IntoCopy) { // the host's, where its readers are
      hostValues(Src, SrcExtent);
      hostReads(Dst, DstExtent);
      ComputeBackend::copyColumns(Blocks, Src, Dst);
      hostWrote(Dst, DstExtent);
      return;
    }
    // The source where the backend has it: fp32 where held wide, its bf16
    // copy where held, else the host's values staged in fp32.
    DeviceBuffer<float> Staged;
    const void *From = nullptr;
    bool FromBf16 = false;
    if (HeldCopy *H = wide(Src, SrcExtent)) {
      From = inMaster(*H, Src);
    } else if (const bf16 *Copy = heldCopy(Src, SrcExtent)) {
      From = Copy;
      FromBf16 = true;
    } else {
      hostValues(Src, SrcExtent);
      Staged = Copies.floats(Src, SrcExtent);
      From = Staged.data();
    }
    if (IntoWide) {
      master(*To); // the columns between the blocks keep their values
      aheadOfHost(*To);
      cuda::copyColumns(Blocks, From, FromBf16, To->at(Dst), /*DstBf16=*/false, Blas.stream());
      return;
    }
    bf16 *Copy = const_cast<bf16 *>(heldCopy(To->Host, To->Count)) + (Dst - To->Host);
    cuda::copyColumns(Blocks, From, FromBf16, Copy, /*DstBf16=*/true, Blas.stream());
    To->Ahead = true;
#ifdef MOERT_CUDA_EMULATION
    Blocks.forEach([&](int64_t, int64_t At) { Dst[At] = std::numeric_limits<float>::quiet_NaN(); });
#endif
  }

  void copyRows(const RowPairs &Pairs, const float *Src, float *Dst, bool Accumulate) override {
    rowsBetween(Pairs, const_cast<float *>(Src), Dst, Accumulate, /*ClearSource=*/false);
  }
  void moveRows(const RowPairs &Pairs, float *Src, float *Dst) override {
    rowsBetween(Pairs, Src, Dst, /*Accumulate=*/false, /*ClearSource=*/true);
  }

  void allReduceSum(float *Data, int64_t Count, Communicator &Group) override {
    collective(
        Data, Count, Data, Count, Group.device(),
        [&](Communicator &Device, const float *, float *Out) { Device.allReduceSum(Out, size_t(Count)); },
        [&] { Group.allReduceSum(Data, size_t(Count)); });
  }

  void reduceScatterSum(const float *In, float *Out, int64_t PerRank, Communicator &Group) override {
    collective(
        In, PerRank * Group.size(), Out, PerRank, Group.device(),
        [&](Communicator &Device, const float *From, float *To) { Device.reduceScatterSum(From, To, size_t(PerRank)); },
        [&] { Group.reduceScatterSum(In, Out, size_t(PerRank)); });
  }

  void allGather(const float *In, float *Out, int64_t PerRank, Communicator &Group) override {
    collective(
        In, PerRank, Out, PerRank * Group.size(), Group.device(),
        [&](Communicator &Device, const float *From, float *To) { Device.allGather(From, To, size_t(PerRank)); },
        [&] { Group.allGather(In, Out, size_t(PerRank)); });
  }

  // Activations cross the group in fp32 whatever each member holds (a
  // collective's members must agree on its type): a wide array's own
  // values, a held copy widened on the device, else the host's; a gather
  // that products alone read crosses in bf16, which every member has.
  void gatherActivations(const float *In, float *Out, int64_t PerRank, Communicator &Group, ReadBy Readers) override {
    if (Readers == ReadBy::Products && Group.device()) {
      // The products read the bf16 of every element: moved in bf16, the
      // shards' operand copies give the same copy of the whole.
      Charge Charged(Copies, "tp exchange");
      Operand Send = PerRank ? input(In, PerRank) : Operand();
      DeviceBuffer<bf16> Recv{size_t(PerRank * Group.size())};
      onComputeStream(*Group.device()).allGather(Send.Data, Recv.data(), size_t(PerRank), DType::BF16);
      if (PerRank)
        result(Recv, Out);
      return;
    }
    activations(
        In, PerRank, Out, PerRank * Group.size(), Group,
        [&](Communicator &Device, const float *From, float *To) {
          Device.allGather(From, To, size_t(PerRank), DType::F32);
        },
        [&] { Group.allGather(In, Out, size_t(PerRank)); });
  }

  void reduceScatterActivations(const float *In, float *Out, int64_t PerRank, Communicator &Group) override {
    activations(
        In, PerRank * Group.size(), Out, PerRank, Group,
        [&](Communicator &Device, const float *From, float *To) {
          Device.reduceScatterSum(From, To, size_t(PerRank), DType::F32);
        },
        [&] { Group.reduceScatterSum(In, Out, size_t(PerRank)); });
  }

  void allToAllV(const float *In, const std::vector<size_t> &InCounts, const std::vector<size_t> &InOffsets, float *Out,
                 const std::vector<size_t> &OutCounts, const std::vector<size_t> &OutOffsets,
                 Communicator &Group) override {
    Charge Charged(Copies, "exchange");
    const int64_t InCount = extent(InCounts, InOffsets), OutCount = extent(OutCounts, OutOffsets);
    Communicator *Device = Group.device();
    if (!Device) {
      hostValues(In, InCount);
      hostReads(Out, OutCount);
      Group.allToAllV(In, InCounts, InOffsets, Out, OutCounts, OutOffsets);
      hostWrote(Out, OutCount);
      return;
    }
    // The rows are operands' (bf16) on both sides.
    Operand Send = InCount ? input(In, InCount) : Operand();
    DeviceBuffer<bf16> Recv{size_t(OutCount)};
    onComputeStream(*Device).allToAllV(Send.Data, InCounts, InOffsets, Recv.data(), OutCounts, OutOffsets, DType::BF16);
    if (OutCount)
      result(Recv, Out);
  }

  std::unique_ptr<Request> sendActivations(const float *Data, int64_t Count, int Peer, int Tag,
                                           Communicator &Group) override {
    Charge Charged(Copies, "pp exchange");
    Communicator *Device = Group.device();
    if (!Device) {
      hostValues(Data, Count);
      releaseKeptArray(Data);
      return Group.isend(Data, size_t(Count), Peer, Tag);
    }
    // The transfer reads a buffer of its own, so that the array's copy is
    // released now and the next stage's work may reuse its memory.
    auto Sent = std::make_unique<Transfer>();
    const float *Values = f32Input(Data, Count, Sent->Buffer);
    if (Values != Sent->Buffer.data()) {
      Sent->Buffer.resize(size_t(Count));
      MOERT_CUDA_CHECK(cudaMemcpyAsync(Sent->Buffer.data(), Values, size_t(Count) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, Blas.stream()));
    }
    releaseKeptArray(Data);
    Sent->Posted = onComputeStream(*Device).isend(Sent->Buffer.data(), size_t(Count), Peer, Tag, DType::F32);
    return Sent;
  }

  std::unique_ptr<Request> receiveActivations(float *Data, int64_t Count, int Peer, int Tag,
                                              Communicator &Group) override {
    Communicator *Device = Group.device();
    if (!Device)
      return std::make_unique<HostReceive>(*this, Data, Count, Group.irecv(Data, size_t(Count), Peer, Tag));
    if (overlapsHeld(Data, Count))
      throw std::logic_error("a pipeline receive into an array the CUDA backend holds");
    auto Received = std::make_unique<Transfer>();
    Received->Buffer.resize(size_t(Count));
    Received->Posted = onComputeStream(*Device).irecv(Received->Buffer.data(), size_t(Count), Peer, Tag, DType::F32);
    // Completed, the received values become Data's copy, kept under Data.
    Received->OnArrival = [this, Data, Count, Buffer = &Received->Buffer] {
      HeldCopy &H = Held[Data];
      H.Count = Count;
      H.Kind = HeldArray::BackendOnly;
      H.Wide = true;
      H.Host = Data;
      H.Depth = Levels.size();
      H.KeptBy = Data;
      H.Master = std::move(*Buffer);
      aheadOfHost(H);
    };
    return Received;
  }

  void passKept(const void *From, const void *To) override {
    for (auto &[Begin, H] : Held)
      if (H.KeptBy == From)
        H.KeptBy = To;
  }

  void makeResident(const std::vector<HostArray> &Arrays) override {
    for (const HostArray &A : Arrays)
      if (A.Count > 0 && !overlapsHeld(A.Data, A.Count)) {
        HeldCopy &H = Held[A.Data];
        H.Count = A.Count;
        H.Kind = HeldArray::Read; // operands read its bf16 copy
        H.Host = A.Data;
        H.Resident = H.Wide = true;
      }
  }
  void releaseResident() override {
    for (auto It = Held.begin(); It != Held.end();) {
      if (!It->second.Resident) {
        ++It;
        continue;
      }
      settle(It->second);
      It = Held.erase(It);
    }
  }

  void hostReads(const float *Data, int64_t Count) override {
    for (HeldCopy *H : readCopiesOverlapping(Data, Count))
      if (H->Wide)
        settle(*H);
      else if (H->Ahead) {
        Charge Charged(Copies, "host reads");
        Copies.downloadTo(H->Copy, H->Host);
        H->Ahead = false;
      }
  }

  void keepArrays(const void *Key, const std::vector<HeldArray> &Arrays) override {
    for (const HeldArray &A : Arrays) {
      auto It = Held.find(A.Data);
      // A Read array without a copy is the host's alone; a BackendOnly one
      // is kept all the same, as its holder relies on it (a copy is made
      // from the host's values on its next use).
      if (It == Held.end())
        continue;
      const HeldCopy &H = It->second;
      if (!hasCopy(H.Kind) || H.Count != A.Count || H.KeptBy || (!H.Copy.size() && H.Kind != HeldArray::BackendOnly))
        continue;
      It->second.KeptBy = Key;
      for (std::vector<const float *> &Level : Levels) // its hold no longer ends it
        Level.erase(std::remove(Level.begin(), Level.end(), A.Data), Level.end());
    }
  }
  void releaseKept(const void *Key) override {
    if (!Key)
      return;
    for (auto It = Held.begin(); It != Held.end();)
      It = It->second.KeptBy == Key ? releaseKept(It) : std::next(It);
  }
  void releaseKeptBut(const void *Key, const float *Retained) override {
    if (!Key)
      return;
    for (auto It = Held.begin(); It != Held.end();)
      It = It->second.KeptBy == Key && It->first != Retained ? releaseKept(It) : std::next(It);
  }
  void releaseKept(const void *Key, const float *Array) override {
    auto It = Held.find(Array);
    if (Key && It != Held.end() && It->second.KeptBy == Key)
      releaseKept(It);
  }

  BackendTraffic traffic() const override {
    BackendTraffic T = Copies.Moved;
    T.DevicePeakBytes = int64_t(deviceMemoryStats().PeakAllocatedBytes);
    return T;
  }
  void resetPeak() override { resetDevicePeak(); }

private:
  /// The delta rule's shape and element counts.
  struct DeltaRuleOperands {
    cuda::DeltaRuleShape Shape;
    int64_t QkCount, VCount, GCount;
    explicit DeltaRuleOperands(const DeltaRuleArgs &A)
        : Shape{A.Sequences, A.SeqLen, A.KeyHeads, A.ValueHeads, A.HeadDim} {
      const int64_t Rows = A.Sequences * A.SeqLen;
      QkCount = Rows * A.KeyHeads * A.HeadDim;
      VCount = Rows * A.ValueHeads * A.HeadDim;
      GCount = Rows * A.ValueHeads;
    }
  };

  /// A ring's group, its dimensions and this rank's element counts.
  struct RingShape {
    DeviceCommunicator &Cp;
    AttentionDims Dims;
    int64_t QCount, KCount, VCount, OutCount, LseCount;
    explicit RingShape(const CpAttentionArgs &A)
        : Cp(dynamic_cast<DeviceCommunicator &>(*A.Device)), Dims{A.Batch,   A.SeqLen,  A.QHeads,
                                                                  A.KvHeads, A.HeadDim, A.VHeadDim} {
      const int64_t Rows = A.Batch * (A.SeqLen / Cp.size());
      QCount = Rows * A.QHeads * A.HeadDim;
      KCount = Rows * A.KvHeads * A.HeadDim;
      VCount = Rows * A.KvHeads * A.VHeadDim;
      OutCount = Rows * A.QHeads * A.VHeadDim;
      LseCount = Rows * A.QHeads;
    }
  };

  /// Every rank's positions, which each layer's blocks read forward and
  /// backward: uploaded once, found again by their values.
  UploadedIntegers::Shared ringPositions(const RingShape &R) {
    return integersOnDevice(cuda::ringPositions(R.Cp.size(), R.Dims.SeqLen));
  }

  /// A pipeline transfer between the backend's copies: the device buffer it
  /// reads or fills lives until it completes; a receive's values become the
  /// array's kept copy then.
  struct Transfer final : Request {
    DeviceBuffer<float> Buffer;
    std::unique_ptr<Request> Posted;
    std::function<void()> OnArrival;
    void wait() override {
      if (!Posted)
        return;
      Posted->wait();
      Posted.reset();
      if (OnArrival)
        OnArrival();
    }
  };
  /// A receive over the host group into an array the backend may copy: the
  /// copies it overlaps are stale once it arrives.
  struct HostReceive final : Request {
    HostReceive(ComputeBackend &Backend, float *Data, int64_t Count, std::unique_ptr<Request> Posted)
        : Backend(Backend), Data(Data), Count(Count), Posted(std::move(Posted)) {}
    ComputeBackend &Backend;
    float *Data;
    int64_t Count;
    std::unique_ptr<Request> Posted;
    void wait() override {
      if (!Posted)
        return;
      Posted->wait();
      Posted.reset();
      Backend.hostWrote(Data, Count);
    }
  };

  /// A held array's device copy, made on its first use: the bf16 values of
  /// a Read array, the backend's share of an Accumulate array's sum (fp32,
  /// from zero).
  struct HeldCopy {
    int64_t Count = 0;
    HeldArray::Use Kind = HeldArray::Read;
    float *Host = nullptr;
    /// Holds in force outside the one that made it.
    size_t Depth = 0;
    /// The keepArrays() key that keeps it past its hold, if any.
    const void *KeptBy = nullptr;
    /// The copy has results the host array lacks (BackendOnly, resident).
    bool Ahead = false;
    /// Kept across holds (makeResident).
    bool Resident = false;
    /// Resident or held wide (HeldArray::Wide): Master is the fp32 array,
    /// from which Copy (bf16, for operands) is made on the device.
    bool Wide = false;
    /// HeldArray::Unset, until its first copy is made.
    bool Unset = false;
    DeviceBuffer<bf16> Copy;
    DeviceBuffer<float> Sum, Master;
    /// The fp32 element of Data an operation adds to: the Accumulate
    /// array's share, or the wide array itself.
    float *at(const float *Data) { return (Wide ? Master : Sum).data() + (Data - Host); }
    /// What its copies are charged to: the trainer's parameters and
    /// gradients are the outermost hold, or resident.
    const char *holdName() const { return Resident ? "resident" : Depth == 0 ? "outermost hold" : "nested holds"; }
  };

  /// Rows x Cols of a row-major host matrix (leading dimension Ld) on the
  /// device in bf16: inside the held array that contains all of it, else
  /// staged.
  Operand operand(const float *Data, int64_t Rows, int64_t Cols, int64_t Ld) {
    Operand O;
    const int64_t Extent = (Rows - 1) * Ld + Cols;
    if (const bf16 *Copy = heldCopy(Data, Extent)) {
      O.Data = Copy;
      O.Ld = Ld;
      return O;
    }
    flushOverlapping(Data, Extent); // a partial sum read as an operand
    O.Staged = Copies.matrix(Data, Rows, Cols, Ld);
    O.Data = O.Staged.data();
    O.Ld = Cols;
    return O;
  }

  /// C = Alpha op(A) op(B) + Beta C for a host C (leading dimension LdC) and
  /// device operands: summed on the device where C lies in a held
  /// Accumulate array and Beta is 1, else staged.
  void productInto(bool TransA, bool TransB, int64_t M, int64_t N, int64_t K, float Alpha, const Operand &A,
                   const Operand &B, float Beta, float *C, int64_t LdC) {
    const int64_t Extent = (M - 1) * LdC + N;
    if (HeldCopy *Sum = Beta == 1.0f ? heldSum(C, Extent) : nullptr) {
      cuda::gemm(Blas, TransA, TransB, M, N, K, Alpha, A.Data, A.Ld, B.Data, B.Ld, 1.0f, Sum->at(C), OutType::F32, LdC);
      return;
    }
    flushOverlapping(C, Extent);
    const bool Dense = LdC == N || M == 1;
    DeviceBuffer<float> Staged{size_t(M * N)};
    if (Beta != 0.0f) {
      if (Dense) {
        Staged = Copies.floats(C, M * N);
      } else {
        std::vector<float> Packed(size_t(M * N));
        for (int64_t R = 0; R < M; ++R)
          std::copy(C + R * LdC, C + R * LdC + N, Packed.begin() + R * N);
        Staged = Copies.upload(Packed);
      }
    }
    cuda::gemm(Blas, TransA, TransB, M, N, K, Alpha, A.Data, A.Ld, B.Data, B.Ld, Beta, Staged.data(), OutType::F32, N);
    if (Dense) {
      result(Staged, C);
      return;
    }
    std::vector<float> Host = Copies.download(Staged);
    for (int64_t R = 0; R < M; ++R)
      std::copy(Host.begin() + R * N, Host.begin() + (R + 1) * N, C + R * LdC);
    dropCopies(C, Extent);
  }

  /// Row indices (a permutation of token copies) as the kernels take them.
  UploadedIntegers::Shared indices(const int64_t *Host, int64_t Count) {
    return integersOnDevice(narrowIndices(Host, Count));
  }
  static std::vector<int32_t> narrowIndices(const int64_t *Host, int64_t Count) {
    std::vector<int32_t> Narrow(static_cast<size_t>(Count));
    for (int64_t I = 0; I < Count; ++I) {
      if (Host[I] < 0 || Host[I] > std::numeric_limits<int32_t>::max())
        throw std::out_of_range("a micro batch routes " + std::to_string(Count) +
                                " token copies; the CUDA backend's permutation kernels index at most 2^31 - 1 rows: "
                                "use a smaller micro batch or sequence shard");
      Narrow[size_t(I)] = int32_t(Host[I]);
    }
    return Narrow;
  }

  /// Before host code (or a copy to the device) reads [Data, Data + Count):
  /// an Accumulate array's device share added in, a copy the device is
  /// ahead with brought back.
  void hostValues(const float *Data, int64_t Count) {
    flushOverlapping(Data, Count);
    hostReads(Data, Count);
  }

  /// copyRows and moveRows: on the device where what they write is held
  /// wide there (the source too where its rows are cleared), else on the
  /// host.
  void rowsBetween(const RowPairs &Pairs, float *Src, float *Dst, bool Accumulate, bool ClearSource) {
    Charge Charged(Copies, "copy rows");
    if (!Pairs.valid())
      throw std::invalid_argument("copyRows: a row outside its array, or one twice");
    if (Pairs.count() == 0 || Pairs.Cols == 0) // a rank whose rows no image reaches: nothing moves
      return;
    const int64_t SrcExtent = Pairs.SrcRows * Pairs.Cols, DstExtent = Pairs.DstRows * Pairs.Cols;
    HeldCopy *To = wide(Dst, DstExtent), *From = wide(Src, SrcExtent);
    if (!To || (ClearSource && !From)) {
      hostValues(Src, SrcExtent);
      hostReads(Dst, DstExtent);
      if (ClearSource)
        ComputeBackend::moveRows(Pairs, Src, Dst);
      else
        ComputeBackend::copyRows(Pairs, Src, Dst, Accumulate);
      hostWrote(Dst, DstExtent);
      if (ClearSource)
        hostWrote(Src, SrcExtent);
      return;
    }
    DeviceBuffer<float> Staged;
    float *SrcRows = const_cast<float *>(wideInput(Src, SrcExtent, Staged));
    if (ClearSource)
      aheadOfHost(*From);
    master(*To); // the rows no pair writes keep their values
    aheadOfHost(*To);
    // The same pairs move the forward's rows and, reversed, their
    // gradients: found on the device the second time.
    const UploadedIntegers::Shared FromRows = integersOnDevice(Pairs.From), ToRows = integersOnDevice(Pairs.To);
    cuda::copyRows(Pairs.count(), Pairs.Cols, FromRows->data(), ToRows->data(), SrcRows, To->at(Dst), Accumulate,
                   ClearSource, Blas.stream());
  }

  /// Count contiguous elements in fp32 on the device: a wide array's own,
  /// else the host's values staged in Staged.
  const float *wideInput(const float *Data, int64_t Count, DeviceBuffer<float> &Staged) {
    if (HeldCopy *H = wide(Data, Count))
      return inMaster(*H, Data);
    hostValues(Data, Count);
    Staged = Copies.floats(Data, Count);
    return Staged.data();
  }

  /// Count contiguous elements as a bf16 operand (not to be written).
  Operand input(const float *Data, int64_t Count) { return operand(Data, 1, Count, Count); }

  /// Count contiguous elements in bf16 on the device, in a buffer of their
  /// own that an operation may write in place.
  DeviceBuffer<bf16> ownCopy(const float *Data, int64_t Count) {
    if (const bf16 *Copy = heldCopy(Data, Count)) {
      DeviceBuffer<bf16> Own{size_t(Count)};
      MOERT_CUDA_CHECK(cudaMemcpyAsync(Own.data(), Copy, Own.bytes(), cudaMemcpyDeviceToDevice, Blas.stream()));
      return Own;
    }
    flushOverlapping(Data, Count);
    return Copies.bf16s(Data, Count);
  }

  /// An operation's dense result for the host array at Out: copied there,
  /// and into the copy of a held Read array it lies in, so that later
  /// operations read it from the device; into the copy alone where Out lies
  /// in a BackendOnly array.
  template <typename T> void result(const DeviceBuffer<T> &Device, float *Out) {
    const int64_t Count = int64_t(Device.size());
    HeldCopy *Only = containing(Out, Count);
    if (Only && Only->Wide) {
      writeMaster(*Only, Out, Count);
      float *Dst = Only->at(Out);
      if constexpr (std::is_same_v<T, bf16>)
        castToF32(Count, Device.data(), Dst, Blas.stream());
      else
        MOERT_CUDA_CHECK(cudaMemcpyAsync(Dst, Device.data(), size_t(Count) * sizeof(float), cudaMemcpyDeviceToDevice,
                                         Blas.stream()));
      return;
    }
    if (!Only || Only->Kind != HeldArray::BackendOnly) {
      Copies.downloadTo(Device, Out);
      keepInStep(Out, Count, Device.data());
      return;
    }
    if (!Only->Copy.size() && (Out != Only->Host || Count != Only->Count))
      heldCopy(Only->Host, Only->Count); // the rest of it, from the host
    keepInStep(Out, Count, Device.data());
    Only->Ahead = true;
#ifdef MOERT_CUDA_EMULATION
    std::fill_n(Out, Count, std::numeric_limits<float>::quiet_NaN());
#endif
  }

  /// After the host array [Host, Host + Count) received Src's values: the
  /// copy of a held Read array that contains it gets them too (made from
  /// them where the result is the whole array and no copy exists yet); a
  /// copy the result only overlaps is dropped, to be made again from the
  /// host on its next use.
  template <typename T> void keepInStep(const float *Host, int64_t Count, const T *Src) {
    for (HeldCopy *H : readCopiesOverlapping(Host, Count)) {
      const bool Inside = Host >= H->Host && Host + Count <= H->Host + H->Count;
      if (!Inside) {
        dropCopy(*H);
        continue;
      }
      if (!H->Copy.size()) {
        if (Host != H->Host || Count != H->Count)
          continue; // made from the host, which has the result, on first use
        H->Copy.resize(size_t(Count));
      }
      bf16 *Dst = H->Copy.data() + (Host - H->Host);
      if constexpr (std::is_same_v<T, bf16>)
        MOERT_CUDA_CHECK(
            cudaMemcpyAsync(Dst, Src, size_t(Count) * sizeof(bf16), cudaMemcpyDeviceToDevice, Blas.stream()));
      else
        castToBf16(Count, Src, Dst, Blas.stream());
    }
  }

  /// After an operation wrote host memory in [Host, Host + Extent) in a way
  /// keepInStep does not follow (strided rows, packed spans).
  void dropCopies(const float *Host, int64_t Extent) {
    for (HeldCopy *H : readCopiesOverlapping(Host, Extent))
      dropCopy(*H);
  }
  /// A copy the host array no longer matches. Where the copy is ahead of
  /// the host (a BackendOnly array's results), the host's values are no
  /// whole array either: the writer should have asked for them first
  /// (hostReads).
  void dropCopy(HeldCopy &H) {
    if (H.Ahead)
      throw std::logic_error("the CUDA backend cannot keep an array held " +
                             std::string(H.Resident ? "resident" : "BackendOnly") + " (" + std::to_string(H.Count) +
                             " elements) up to date: host code or an operation wrote part of it without reading "
                             "it back first");
    H.Copy = DeviceBuffer<bf16>();
    H.Master = DeviceBuffer<float>(); // the host's values are the newer
    H.Unset = false;                  // and its next copy is made from them
  }
  static bool hasCopy(HeldArray::Use Kind) { return Kind == HeldArray::Read || Kind == HeldArray::BackendOnly; }

  /// A released BackendOnly array's host values, which are unspecified
  /// where the device was ahead of them: NaNs in the emulation, so that a
  /// host reader shows in the results.
  void unspecified(HeldCopy &H) {
#ifdef MOERT_CUDA_EMULATION
    if (H.Kind == HeldArray::BackendOnly && H.Ahead)
      std::fill_n(H.Host, H.Count, std::numeric_limits<float>::quiet_NaN());
#else
    (void)H;
#endif
  }

  std::vector<HeldCopy *> readCopiesOverlapping(const float *Host, int64_t Extent) {
    std::vector<HeldCopy *> Found;
    if (Extent <= 0)
      return Found;
    for (auto It = Held.lower_bound(Host + Extent); It != Held.begin();) {
      --It;
      HeldCopy &H = It->second;
      if (H.Host + H.Count <= Host)
        break;
      if (hasCopy(H.Kind))
        Found.push_back(&H);
    }
    return Found;
  }

  /// Rows [Begin, Begin + Len) of each batch row of a [Batch, LocalTokens,
  /// Width] host tensor, packed in bf16 on the device: from a held copy of
  /// the whole tensor where there is one.
  DeviceBuffer<bf16> span(const float *Src, int64_t Batch, int64_t LocalTokens, int64_t Begin, int64_t Len,
                          int64_t Width) {
    if (const bf16 *Copy = heldCopy(Src, Batch * LocalTokens * Width)) {
      DeviceBuffer<bf16> Packed{size_t(Batch * Len * Width)};
      copyRows(Packed.data(), Len * Width, Copy + Begin * Width, LocalTokens * Width, Len * Width, Batch);
      return Packed;
    }
    return packed(Copies, packSpan(Src, Batch, LocalTokens, Begin, Len, Width));
  }

  /// Rows of Width elements from one device matrix to another.
  template <typename T>
  void copyRows(T *Dst, int64_t DstPitch, const T *Src, int64_t SrcPitch, int64_t Width, int64_t Rows) {
    MOERT_CUDA_CHECK(cudaMemcpy2DAsync(Dst, size_t(DstPitch) * sizeof(T), Src, size_t(SrcPitch) * sizeof(T),
                                       size_t(Width) * sizeof(T), size_t(Rows), cudaMemcpyDeviceToDevice,
                                       Blas.stream()));
  }

  /// Rows [Begin, Begin + Len) of each batch row of a [Batch, LocalTokens,
  /// Width] fp32 sum an operation adds to, packed on the device: the held
  /// sum's share where the sum is held (HeldArray::Accumulate), else the
  /// host's values; addedTo() puts them back.
  struct SumSpan {
    float *Host;
    int64_t Batch, LocalTokens, Begin, Len, Width;
    float *Share = nullptr; ///< the held sum's element of Host[0]
    DeviceBuffer<float> Packed;
  };
  SumSpan sumSpan(float *Host, int64_t Batch, int64_t LocalTokens, int64_t Begin, int64_t Len, int64_t Width) {
    SumSpan S{Host, Batch, LocalTokens, Begin, Len, Width, nullptr, {}};
    if (HeldCopy *Sum = heldSum(Host, Batch * LocalTokens * Width)) {
      S.Share = Sum->at(Host);
      S.Packed.resize(size_t(Batch * Len * Width));
      copyRows(S.Packed.data(), Len * Width, S.Share + Begin * Width, LocalTokens * Width, Len * Width, Batch);
    } else {
      S.Packed = Copies.upload(packSpan(Host, Batch, LocalTokens, Begin, Len, Width));
    }
    return S;
  }
  void addedTo(SumSpan &S) {
    if (S.Share) {
      copyRows(S.Share + S.Begin * S.Width, S.LocalTokens * S.Width, S.Packed.data(), S.Len * S.Width, S.Len * S.Width,
               S.Batch);
      return;
    }
    unpackSpan(Copies.download(S.Packed), S.Host, S.Batch, S.LocalTokens, S.Begin, S.Len, S.Width);
    dropCopies(S.Host, S.Batch * S.LocalTokens * S.Width);
  }

  /// A [Batch, QHeads, LocalTokens] statistic's entries of A's query span
  /// on the device: where they lie in a wide copy when the span is all of
  /// it, else packed into Staged.
  const float *statistic(const AttentionBlockArgs &A, const float *Values, DeviceBuffer<float> &Staged) {
    const int64_t Count = A.Batch * A.QHeads * A.LocalTokens;
    if (A.QBegin == 0 && A.QLen == A.LocalTokens)
      return wideInput(Values, Count, Staged);
    hostValues(Values, Count);
    Staged = Copies.upload(packStat(Values, A));
    return Staged.data();
  }

  DeviceBlock deviceBlock(const AttentionBlockArgs &A) {
    DeviceBlock Block;
    DeviceAttentionShape &Shape = Block.Shape;
    Shape.Batch = A.Batch;
    Shape.QTokens = A.QLen;
    Shape.KTokens = A.KLen;
    Shape.QHeads = A.QHeads;
    Shape.KvHeads = A.KvHeads;
    Shape.HeadDim = A.HeadDim;
    Shape.VHeadDim = A.VHeadDim;
    Shape.Scale = A.Scale;
    Block.Q = span(A.Q, A.Batch, A.LocalTokens, A.QBegin, A.QLen, A.QHeads * A.HeadDim);
    Block.K = span(A.K, A.Batch, A.LocalTokens, A.KBegin, A.KLen, A.KvHeads * A.HeadDim);
    Block.V = span(A.V, A.Batch, A.LocalTokens, A.KBegin, A.KLen, A.KvHeads * A.VHeadDim);
    Block.QPos = integersOnDevice(positions(A.QPos, A.QLen));
    Block.KPos = integersOnDevice(positions(A.KPos, A.KLen));
    return Block;
  }

  UploadedIntegers::Shared integersOnDevice(const std::vector<int32_t> &Values) { return Integers.get(Copies, Values); }
  /// The tokens' ids, on the device once for the lookup and its scatter.
  UploadedIntegers::Shared tokenIds(const EmbeddingArgs &A) {
    return integersOnDevice(std::vector<int32_t>(A.Ids, A.Ids + A.Tokens));
  }

#ifdef MOERT_CUDA_EMULATION
  /// A Read hold's contract, checked where a check costs only host time:
  /// the host array still holds its copy's values, so no host code wrote it
  /// while it was held (which would leave later operations reading stale
  /// values on a GPU). Not counted as traffic.
  void checkUnwritten(const HeldCopy &H) {
    if (H.Kind != HeldArray::Read || !H.Copy.size())
      return;
    std::vector<bf16> Host = toBf16(H.Host, size_t(H.Count)), Copy = H.Copy.download();
    if (std::memcmp(Host.data(), Copy.data(), Host.size() * sizeof(bf16)) != 0) {
      std::fprintf(stderr, "moerun: internal error: host code wrote an array of %lld elements while it was held\n",
                   (long long)H.Count);
      std::abort();
    }
  }
#endif

  std::map<const float *, HeldCopy>::iterator releaseKept(std::map<const float *, HeldCopy>::iterator It) {
#ifdef MOERT_CUDA_EMULATION
    checkUnwritten(It->second);
#endif
    unspecified(It->second);
    return Held.erase(It);
  }

  /// Ends the keep of the array at Data, whichever key keeps it.
  void releaseKeptArray(const float *Data) {
    auto It = Held.find(Data);
    if (It != Held.end() && It->second.KeptBy)
      releaseKept(It);
  }

  /// The held array that contains all of [Data, Data + Extent), if any.
  HeldCopy *containing(const float *Data, int64_t Extent) {
    auto It = Held.upper_bound(Data);
    if (It == Held.begin())
      return nullptr;
    --It;
    HeldCopy &H = It->second;
    int64_t Offset =
        int64_t((reinterpret_cast<uintptr_t>(Data) - reinterpret_cast<uintptr_t>(It->first)) / sizeof(float));
    return Offset + Extent <= H.Count ? &H : nullptr;
  }

  bool overlapsHeld(const float *Data, int64_t Count) const {
    auto It = Held.lower_bound(Data + Count);
    if (It == Held.begin())
      return false;
    --It;
    return It->second.Host + It->second.Count > Data;
  }

  const bf16 *heldCopy(const float *Data, int64_t Extent) {
    HeldCopy *H = containing(Data, Extent);
    if (!H || !hasCopy(H->Kind))
      return nullptr;
    if (!H->Copy.size() && H->Wide) {
      H->Copy.resize(size_t(H->Count));
      castToBf16(H->Count, master(*H), H->Copy.data(), Blas.stream());
    } else if (!H->Copy.size() && H->Unset) {
      H->Copy.resize(size_t(H->Count)); // its operations write it first
    } else if (!H->Copy.size()) {
      Charge Charged(Copies, H->holdName());
      H->Copy = Copies.bf16s(H->Host, H->Count);
    }
    H->Unset = false; // a copy dropped from now on leaves the host's values
    return H->Copy.data() + (Data - H->Host);
  }

  /// The fp32 elements on the device that an operation adds to, for the
  /// host array [Data, Data + Count): a held sum's (heldSum) where it lies
  /// in one, else the host's values staged, which finish() brings back.
  class AddedTo {
  public:
    AddedTo(CudaBackend &Backend, float *Data, int64_t Count) : Backend(Backend), Data(Data) {
      Sum = Backend.heldSum(Data, Count);
      if (!Sum)
        Staged = Backend.Copies.floats(Data, Count);
    }
    float *get() { return Sum ? Sum->at(Data) : Staged.data(); }
    void finish() {
      if (!Sum)
        Backend.result(Staged, Data);
    }

  private:
    CudaBackend &Backend;
    float *Data;
    HeldCopy *Sum = nullptr;
    DeviceBuffer<float> Staged;
  };

  /// The held array an operation adds to in fp32 on the device (an
  /// Accumulate array's share, a wide array), if Data lies in one.
  HeldCopy *heldSum(const float *Data, int64_t Extent) {
    HeldCopy *H = containing(Data, Extent);
    if (H && H->Wide) {
      master(*H);
      aheadOfHost(*H);
      return H;
    }
    if (!H || H->Kind != HeldArray::Accumulate)
      return nullptr;
    if (!H->Sum.size()) {
      H->Sum.resize(size_t(H->Count));
      H->Sum.zero();
    }
    return H;
  }

  /// Data's element of a wide array's fp32 values on the device.
  float *inMaster(HeldCopy &H, const float *Data) { return master(H) + (Data - H.Host); }
  /// A wide array's fp32 values on the device, uploaded from the host where
  /// the host's are the newer.
  float *master(HeldCopy &H) {
    if (!H.Master.size()) {
      Charge Charged(Copies, H.holdName());
      H.Master = Copies.floats(H.Host, H.Count);
    }
    return H.Master.data();
  }
  /// A wide array an operation is about to write on the device: its
  /// bf16 copy is stale (unless the operation writes it too), its host
  /// values unspecified (NaNs in the emulation, so that a host reader that
  /// did not ask shows).
  void aheadOfHost(HeldCopy &H, bool CopyInStep = false) {
    if (!CopyInStep)
      H.Copy = DeviceBuffer<bf16>();
    if (H.Ahead)
      return;
    H.Ahead = true;
#ifdef MOERT_CUDA_EMULATION
    std::fill_n(H.Host, H.Count, std::numeric_limits<float>::quiet_NaN());
#endif
  }
  /// A wide array whose elements [Data, Data + Count) an operation is
  /// about to overwrite on the device: the rest of it comes from the host
  /// first where the device has none of it.
  /// The fp32 elements of a wide array at Data that an operation updates in
  /// place on the device (their current values first, the host's where the
  /// device has none).
  float *inPlace(HeldCopy &H, const float *Data) {
    master(H);
    aheadOfHost(H);
    return H.at(Data);
  }
  void writeMaster(HeldCopy &H, const float *Data, int64_t Count) {
    if (Count != H.Count)
      master(H);
    else if (!H.Master.size())
      H.Master.resize(size_t(Count));
    aheadOfHost(H);
  }
  /// A device group's later operations ordered after this backend's work
  /// (comm/nccl/NcclComm.h: the compute stream).
  Communicator &onComputeStream(Communicator &Device) {
    auto *Ordered = dynamic_cast<DeviceCommunicator *>(&Device);
    if (!Ordered)
      throw std::logic_error("the CUDA backend's device groups take device buffers: '" + Device.name() +
                             "' is not a DeviceCommunicator");
    Ordered->setComputeStream(Blas.stream());
    return Device;
  }
  /// A collective from In (InCount elements) into Out (OutCount; the same
  /// array for an all-reduce): over Device on their resident copies where
  /// both are resident and Device is given, else over the host group on the
  /// host arrays, asked for first.
  template <typename OnDevice, typename OnHost>
  void collective(const float *In, int64_t InCount, float *Out, int64_t OutCount, Communicator *Device,
                  OnDevice DeviceOp, OnHost HostOp) {
    HeldCopy *From = Device ? resident(In, InCount) : nullptr, *To = Device ? resident(Out, OutCount) : nullptr;
    if (From && To) {
      master(*From);
      writeMaster(*To, Out, OutCount);
      DeviceOp(onComputeStream(*Device), From->at(In), To->at(Out));
      return;
    }
    hostReads(In, InCount);
    hostReads(Out, OutCount);
    HostOp();
    hostWrote(Out, OutCount);
  }
  /// A collective of activations from In (InCount elements) into Out
  /// (OutCount), over Group's device counterpart between the backend's
  /// copies where it has one (OnDevice), else over Group on the host arrays
  /// (OnHost).
  template <typename DeviceOp, typename HostOp>
  void activations(const float *In, int64_t InCount, float *Out, int64_t OutCount, Communicator &Group,
                   DeviceOp OnDevice, HostOp OnHost) {
    Charge Charged(Copies, "tp exchange");
    if (!Group.device()) {
      hostValues(In, InCount);
      hostReads(Out, OutCount);
      OnHost();
      hostWrote(Out, OutCount);
      return;
    }
    DeviceBuffer<float> Staged, Recv{size_t(OutCount)};
    const float *Send = InCount ? f32Input(In, InCount, Staged) : nullptr;
    OnDevice(onComputeStream(*Group.device()), Send, Recv.data());
    if (OutCount)
      result(Recv, Out);
  }
  /// Count contiguous elements in fp32 on the device: a wide array's own,
  /// a held copy widened there, else the host's values staged in Staged.
  const float *f32Input(const float *Data, int64_t Count, DeviceBuffer<float> &Staged) {
    if (!wide(Data, Count))
      if (const bf16 *Copy = heldCopy(Data, Count)) {
        Staged.resize(size_t(Count));
        castToF32(Count, Copy, Staged.data(), Blas.stream());
        return Staged.data();
      }
    return wideInput(Data, Count, Staged);
  }
  /// The resident array that contains all of [Data, Data + Count), if any.
  HeldCopy *resident(const float *Data, int64_t Count) {
    HeldCopy *H = containing(Data, Count);
    return H && H->Resident ? H : nullptr;
  }
  /// The wide (or resident) array that contains all of [Data, Data + Count).
  HeldCopy *wide(const float *Data, int64_t Count) {
    HeldCopy *H = Count ? containing(Data, Count) : nullptr;
    return H && H->Wide ? H : nullptr;
  }
  /// Brings a wide array's device values back to the host.
  void settle(HeldCopy &H) {
    if (!H.Ahead)
      return;
    Charge Charged(Copies, "host reads");
    Copies.downloadTo(H.Master, H.Host);
    H.Ahead = false;
  }

  /// Adds an Accumulate array's device share to the host array.
  void flush(HeldCopy &H) {
    if (H.Resident)
      settle(H);
    if (H.Kind != HeldArray::Accumulate || !H.Sum.size())
      return;
    Charge Charged(Copies, H.holdName());
    std::vector<float> Share = Copies.download(H.Sum);
    for (int64_t I = 0; I < H.Count; ++I)
      H.Host[I] += Share[size_t(I)];
    H.Sum.zero();
  }

  /// Before host memory an Accumulate array overlaps is read or overwritten
  /// by an operation that does not accumulate into it.
  void flushOverlapping(const float *Data, int64_t Extent) {
    if (Extent <= 0) // an empty range overlaps nothing, wherever it points
      return;
    const float *End = Data + Extent;
    for (auto It = Held.lower_bound(End); It != Held.begin();) {
      --It;
      HeldCopy &H = It->second;
      if (H.Host + H.Count <= Data)
        break;
      flush(H);
    }
  }

  BlasHandle Blas;
  Stager Copies{Blas.stream()};
  LaterLosses Losses;
  UploadedIntegers Integers;
  std::map<const float *, HeldCopy> Held;
  /// The arrays each holdArrays() in force added, innermost last.
  std::vector<std::vector<const float *>> Levels;
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

bool ranksShareDevices() {
  return envInt("OMPI_COMM_WORLD_LOCAL_SIZE", envInt("SLURM_NTASKS_PER_NODE", 1)) > deviceCount();
}

} // namespace moert::cuda
