//===- emu/CudaEmu.cpp - The emulated CUDA runtime, launches and cuBLAS ---===//
#include "CudaEmu.h"

#include <cublas_v2.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <ucontext.h>
#include <vector>

namespace moert::emu {

thread_local uint3 ThreadIdx, BlockIdx;
thread_local dim3 BlockDim, GridDim;

namespace {

// The CUDA threads of a block are fibers (ucontext) on the calling thread,
// scheduled round-robin; a fiber runs until it waits at a barrier. Much
// cheaper than an OS thread per CUDA thread, and deterministic.
struct Fiber {
  ucontext_t Context;
  std::vector<char> Stack;
  bool Done = false;
};
ucontext_t Scheduler;
Fiber *Running = nullptr;
const std::function<void()> *Body = nullptr;
constexpr size_t StackBytes = 256 * 1024;

void yieldToScheduler() { swapcontext(&Running->Context, &Scheduler); }

void fiberEntry() {
  (*Body)();
  Running->Done = true;
  swapcontext(&Running->Context, &Scheduler);
}

/// A barrier for a fixed number of fibers: the last to arrive releases the
/// others, which see the generation change when next scheduled.
class Barrier {
public:
  explicit Barrier(unsigned Count) : Count(Count) {}
  void wait() {
    uint64_t Gen = Generation;
    if (++Waiting == Count) {
      Waiting = 0;
      ++Generation;
      return;
    }
    while (Generation == Gen)
      yieldToScheduler();
  }

private:
  unsigned Count, Waiting = 0;
  uint64_t Generation = 0;
};

struct Warp {
  explicit Warp(unsigned Lanes) : Lanes(Lanes), All(Lanes) {}
  unsigned Lanes;
  Barrier All;
  float BufF[32];
  double BufD[32];
  std::map<unsigned, std::unique_ptr<Barrier>> Partial;
  Barrier &partial(unsigned Mask) {
    auto &B = Partial[Mask];
    if (!B)
      B = std::make_unique<Barrier>(unsigned(__builtin_popcount(Mask)));
    return *B;
  }
};

struct BlockState {
  explicit BlockState(unsigned Threads) : All(Threads) {
    for (unsigned W = 0; W * 32 < Threads; ++W)
      Warps.push_back(std::make_unique<Warp>(std::min(32u, Threads - W * 32)));
  }
  Barrier All;
  std::vector<std::unique_ptr<Warp>> Warps;
};

BlockState *Current = nullptr;
std::vector<Fiber> Fibers;

Warp &myWarp() { return *Current->Warps[ThreadIdx.x / 32]; }

template <typename T> T shfl(T V, int Offset, T *Buf) {
  Warp &W = myWarp();
  unsigned Lane = ThreadIdx.x % 32;
  Buf[Lane] = V;
  W.All.wait();
  T R = Buf[(Lane ^ unsigned(Offset)) % W.Lanes];
  W.All.wait(); // nobody overwrites Buf before everyone has read
  return R;
}

} // namespace

void syncThreads() { Current->All.wait(); }

void syncWarp(unsigned Mask) {
  Warp &W = myWarp();
  unsigned Full = W.Lanes == 32 ? 0xffffffffu : (1u << W.Lanes) - 1;
  if ((Mask & Full) == Full)
    W.All.wait();
  else
    W.partial(Mask & Full).wait();
}

float shflXor(float V, int Offset) { return shfl(V, Offset, myWarp().BufF); }
double shflXor(double V, int Offset) { return shfl(V, Offset, myWarp().BufD); }

float atomicAddFloat(float *Address, float Value) {
  float Old = *Address; // one fiber runs at a time
  *Address = Old + Value;
  return Old;
}

void launch(dim3 Grid, dim3 Block, const std::function<void()> &Kernel) {
  Body = &Kernel;
  if (Fibers.size() < Block.x)
    Fibers.resize(Block.x);
  for (unsigned Z = 0; Z < Grid.z; ++Z)
    for (unsigned Y = 0; Y < Grid.y; ++Y)
      for (unsigned X = 0; X < Grid.x; ++X) {
        BlockState State(Block.x);
        Current = &State;
        BlockIdx = uint3{X, Y, Z};
        BlockDim = Block;
        GridDim = Grid;
        for (unsigned T = 0; T < Block.x; ++T) {
          Fiber &F = Fibers[T];
          F.Stack.resize(StackBytes);
          F.Done = false;
          getcontext(&F.Context);
          F.Context.uc_stack.ss_sp = F.Stack.data();
          F.Context.uc_stack.ss_size = F.Stack.size();
          F.Context.uc_link = nullptr;
          makecontext(&F.Context, fiberEntry, 0);
        }
        for (unsigned Left = Block.x; Left;) {
          for (unsigned T = 0; T < Block.x; ++T) {
            Fiber &F = Fibers[T];
            if (F.Done)
              continue;
            Running = &F;
            ThreadIdx = uint3{T, 0, 0};
            swapcontext(&Scheduler, &F.Context);
            if (F.Done)
              --Left;
          }
        }
        Current = nullptr;
      }
}

DeviceMemory &deviceMemory() {
  static DeviceMemory M;
  return M;
}

} // namespace moert::emu

//===----------------------------------------------------------------------===//
// CUDA runtime: device memory is host memory; everything is synchronous.
//===----------------------------------------------------------------------===//
extern "C" {

cudaError_t CUDARTAPI cudaMalloc(void **Ptr, size_t Size) {
  moert::emu::DeviceMemory &M = moert::emu::deviceMemory();
  if (Size > M.Limit - M.LiveBytes)
    return cudaErrorMemoryAllocation;
  *Ptr = std::malloc(Size ? Size : 1);
  // Fresh device memory is garbage: NaN bytes make uninitialised reads show.
  std::memset(*Ptr, 0xff, Size);
  M.Live[*Ptr] = Size;
  M.LiveBytes += Size;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaFree(void *Ptr) {
  moert::emu::DeviceMemory &M = moert::emu::deviceMemory();
  auto It = M.Live.find(Ptr);
  if (It != M.Live.end()) {
    M.LiveBytes -= It->second;
    M.Live.erase(It);
  }
  std::free(Ptr);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetDevice(int *Device) {
  *Device = 0;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemcpy(void *Dst, const void *Src, size_t Size, enum cudaMemcpyKind) {
  std::memmove(Dst, Src, Size);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemcpyAsync(void *Dst, const void *Src, size_t Size, enum cudaMemcpyKind, cudaStream_t) {
  std::memmove(Dst, Src, Size);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemset(void *Ptr, int Value, size_t Size) {
  std::memset(Ptr, Value, Size);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemsetAsync(void *Ptr, int Value, size_t Size, cudaStream_t) {
  std::memset(Ptr, Value, Size);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetLastError(void) { return cudaSuccess; }
const char *CUDARTAPI cudaGetErrorName(cudaError_t) { return "emulated"; }
const char *CUDARTAPI cudaGetErrorString(cudaError_t) { return "emulated"; }
cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
// Work runs when it is launched, so every stream is already in order: streams
// and events are distinct tokens and waiting on one is a no-op.
cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *Stream, unsigned int) {
  *Stream = reinterpret_cast<cudaStream_t>(new char);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t Stream) {
  delete reinterpret_cast<char *>(Stream);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *Event, unsigned int) {
  *Event = reinterpret_cast<cudaEvent_t>(new char);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t Event) {
  delete reinterpret_cast<char *>(Event);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaGetDeviceCount(int *Count) {
  *Count = 1;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaSetDevice(int) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *Value, enum cudaDeviceAttr Attr, int) {
  *Value = Attr == cudaDevAttrMultiProcessorCount ? 132 : 0; // an H100's or H200's
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *Prop, int) {
  std::memset(Prop, 0, sizeof(*Prop));
  std::strcpy(Prop->name, "CPU emulation of the CUDA kernels");
  Prop->major = 9;
  return cudaSuccess;
}

} // extern "C"

//===----------------------------------------------------------------------===//
// cuBLAS: column-major GEMM with fp32 accumulation, as CUBLAS_COMPUTE_32F.
//===----------------------------------------------------------------------===//
namespace {
float load(const void *P, cudaDataType T, size_t I) {
  return T == CUDA_R_16BF ? __bfloat162float(static_cast<const __nv_bfloat16 *>(P)[I])
                          : static_cast<const float *>(P)[I];
}
void store(void *P, cudaDataType T, size_t I, float V) {
  if (T == CUDA_R_16BF)
    static_cast<__nv_bfloat16 *>(P)[I] = __float2bfloat16_rn(V);
  else
    static_cast<float *>(P)[I] = V;
}
void gemmColMajor(cublasOperation_t TA, cublasOperation_t TB, int M, int N, int K, float Alpha, const void *A,
                  cudaDataType AT, int LdA, const void *B, cudaDataType BT, int LdB, float Beta, void *C,
                  cudaDataType CT, int LdC) {
  for (int J = 0; J < N; ++J)
    for (int I = 0; I < M; ++I) {
      float Acc = 0.f;
      for (int L = 0; L < K; ++L) {
        float AV = load(A, AT, TA == CUBLAS_OP_N ? size_t(I) + size_t(L) * LdA : size_t(L) + size_t(I) * LdA);
        float BV = load(B, BT, TB == CUBLAS_OP_N ? size_t(L) + size_t(J) * LdB : size_t(J) + size_t(L) * LdB);
        Acc += AV * BV;
      }
      size_t CI = size_t(I) + size_t(J) * LdC;
      // Beta == 0: C is not read (it may be uninitialised), as in cuBLAS.
      float Old = Beta == 0.f ? 0.f : Beta * load(C, CT, CI);
      store(C, CT, CI, Alpha * Acc + Old);
    }
}
} // namespace

extern "C" {
cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *Handle) {
  static int Dummy;
  *Handle = reinterpret_cast<cublasHandle_t>(&Dummy);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
const char *CUBLASWINAPI cublasGetStatusName(cublasStatus_t) { return "emulated"; }
const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t) { return "emulated"; }
cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t, cublasOperation_t TA, cublasOperation_t TB, int M, int N,
                                         int K, const void *Alpha, const void *A, cudaDataType AT, int LdA,
                                         const void *B, cudaDataType BT, int LdB, const void *Beta, void *C,
                                         cudaDataType CT, int LdC, cublasComputeType_t, cublasGemmAlgo_t) {
  gemmColMajor(TA, TB, M, N, K, *static_cast<const float *>(Alpha), A, AT, LdA, B, BT, LdB,
               *static_cast<const float *>(Beta), C, CT, LdC);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasGemmGroupedBatchedEx(cublasHandle_t, const cublasOperation_t TA[],
                                                       const cublasOperation_t TB[], const int M[], const int N[],
                                                       const int K[], const void *Alpha, const void *const A[],
                                                       cudaDataType_t AT, const int LdA[], const void *const B[],
                                                       cudaDataType_t BT, const int LdB[], const void *Beta,
                                                       void *const C[], cudaDataType_t CT, const int LdC[], int Groups,
                                                       const int GroupSize[], cublasComputeType_t) {
  const float *Al = static_cast<const float *>(Alpha);
  const float *Be = static_cast<const float *>(Beta);
  int P = 0;
  for (int G = 0; G < Groups; ++G)
    for (int I = 0; I < GroupSize[G]; ++I, ++P)
      gemmColMajor(TA[G], TB[G], M[G], N[G], K[G], Al[G], A[P], AT, LdA[G], B[P], BT, LdB[G], Be[G], C[P], CT, LdC[G]);
  return CUBLAS_STATUS_SUCCESS;
}
} // extern "C"
