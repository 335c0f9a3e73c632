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

// The CUDA threads of a block are fibers on the calling thread, scheduled
// round-robin; a fiber runs until it waits at a barrier. Much cheaper than an
// OS thread per CUDA thread, and deterministic. On x86-64 a switch saves the
// callee-saved registers and swaps stacks (FastSwitch below): ucontext's
// swapcontext also saves and restores the signal mask, two system calls per
// switch, which were 90% of an emulated training step (perf). Elsewhere, and
// under AddressSanitizer (which must be told of every stack switch and knows
// swapcontext's), fibers use ucontext.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define MOERT_EMU_FAST_SWITCH 1
#else
#define MOERT_EMU_FAST_SWITCH 0
#endif

#if MOERT_EMU_FAST_SWITCH
// moert_emu_switch(Save, To): pushes the callee-saved registers, stores the
// stack pointer in *Save, continues on the stack To (a stack this function
// stored, or one made by FastContext::start) by popping its registers and
// returning into it.
extern "C" void moert_emu_switch(void **Save, void *To);
asm(R"(
  .text
  .p2align 4
  .globl moert_emu_switch
  .type moert_emu_switch, @function
moert_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size moert_emu_switch, .-moert_emu_switch
)");

struct FastContext {
  void *Sp = nullptr;
  /// A fresh context on Stack that enters Entry (which never returns).
  void start(std::vector<char> &Stack, void (*Entry)()) {
    auto Top = reinterpret_cast<uintptr_t>(Stack.data() + Stack.size()) & ~uintptr_t(15);
    auto *Frame = reinterpret_cast<void **>(Top);
    *--Frame = nullptr;                         // Entry's return address: none
    *--Frame = reinterpret_cast<void *>(Entry); // where the switch returns
    for (int Register = 0; Register < 6; ++Register)
      *--Frame = nullptr; // rbp, rbx, r12-r15
    Sp = Frame;
  }
};
using Context = FastContext;
void switchContext(Context &From, Context &To) { moert_emu_switch(&From.Sp, To.Sp); }
#else
struct UContext {
  ucontext_t Context;
  void start(std::vector<char> &Stack, void (*Entry)()) {
    getcontext(&Context);
    Context.uc_stack.ss_sp = Stack.data();
    Context.uc_stack.ss_size = Stack.size();
    Context.uc_link = nullptr;
    makecontext(&Context, Entry, 0);
  }
};
using Context = UContext;
void switchContext(Context &From, Context &To) { swapcontext(&From.Context, &To.Context); }
#endif

struct Fiber {
  Context Saved;
  std::vector<char> Stack;
  bool Done = false;
};
Context Scheduler;
Fiber *Running = nullptr;
const std::function<void()> *Body = nullptr;
constexpr size_t StackBytes = 256 * 1024;

void yieldToScheduler() { switchContext(Running->Saved, Scheduler); }

void fiberEntry() {
  (*Body)();
  Running->Done = true;
  switchContext(Running->Saved, Scheduler);
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
          F.Saved.start(F.Stack, fiberEntry);
        }
        for (unsigned Left = Block.x; Left;) {
          for (unsigned T = 0; T < Block.x; ++T) {
            Fiber &F = Fibers[T];
            if (F.Done)
              continue;
            Running = &F;
            ThreadIdx = uint3{T, 0, 0};
            switchContext(Scheduler, F.Saved);
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
cudaError_t CUDARTAPI cudaMemcpy2DAsync(void *Dst, size_t DPitch, const void *Src, size_t SPitch, size_t Width,
                                        size_t Height, enum cudaMemcpyKind, cudaStream_t) {
  for (size_t R = 0; R < Height; ++R)
    std::memmove(static_cast<char *>(Dst) + R * DPitch, static_cast<const char *>(Src) + R * SPitch, Width);
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
cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
// Pinned host memory is host memory; NaN bytes, as fresh device memory.
cudaError_t CUDARTAPI cudaHostAlloc(void **Ptr, size_t Size, unsigned int) {
  *Ptr = std::malloc(Size ? Size : 1);
  std::memset(*Ptr, 0xff, Size);
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaFreeHost(void *Ptr) {
  std::free(Ptr);
  return cudaSuccess;
}
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
