//===- comm/mpi/MpiComm.cpp - Communicator over MPI -----------------------===//
#include "comm/mpi/MpiComm.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <limits>

namespace moert {

namespace {

class MpiRequest final : public Request {
public:
  MPI_Request Handle = MPI_REQUEST_NULL;
  ~MpiRequest() override {
    if (Handle != MPI_REQUEST_NULL)
      wait();
  }
  void wait() override;
};

[[noreturn]] void mpiFailed(const char *Call, int Code) {
  char Text[MPI_MAX_ERROR_STRING];
  int Len = 0;
  MPI_Error_string(Code, Text, &Len);
  int Rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &Rank);
  std::fprintf(stderr, "moerun: rank %d: %s failed: %.*s\n", Rank, Call, Len, Text);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

#define MOERT_MPI(Call)                                                                                                \
  do {                                                                                                                 \
    int Code_ = (Call);                                                                                                \
    if (Code_ != MPI_SUCCESS)                                                                                          \
      mpiFailed(#Call, Code_);                                                                                         \
  } while (false)

void MpiRequest::wait() { MOERT_MPI(MPI_Wait(&Handle, MPI_STATUS_IGNORE)); }

int checkedCount(size_t Count) {
  if (Count > size_t(std::numeric_limits<int>::max())) {
    std::fprintf(stderr, "moerun: message of %zu elements exceeds MPI's int count\n", Count);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  return int(Count);
}

MPI_Datatype mpiType(DType T) {
  switch (T) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::BF16:
    return MPI_UINT16_T; // moved as bits; summed by bf16Sum
  case DType::I32:
    return MPI_INT32_T;
  case DType::I64:
    return MPI_INT64_T;
  }
  return MPI_BYTE;
}

/// MPI has no bf16 arithmetic: partial sums in fp32, rounded back to bf16 at
/// each step, as NCCL's bf16 reductions do.
void bf16Sum(void *In, void *InOut, int *Len, MPI_Datatype *) {
  const uint16_t *A = static_cast<const uint16_t *>(In);
  uint16_t *B = static_cast<uint16_t *>(InOut);
  for (int I = 0; I < *Len; ++I)
    B[I] = bf16FromFloat(floatFromBf16(A[I]) + floatFromBf16(B[I]));
}

MPI_Op sumOp(DType T) {
  if (T != DType::BF16)
    return MPI_SUM;
  // Created once per process and left to MPI_Finalize.
  static MPI_Op Bf16 = [] {
    MPI_Op Op;
    MOERT_MPI(MPI_Op_create(&bf16Sum, /*commute=*/1, &Op));
    return Op;
  }();
  return Bf16;
}

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(MPI_Comm Comm, std::string Name, bool Owned) : Comm(Comm), Name(std::move(Name)), Owned(Owned) {
    MOERT_MPI(MPI_Comm_rank(Comm, &Rank));
    MOERT_MPI(MPI_Comm_size(Comm, &Size));
  }
  ~MpiCommunicator() override {
    int Finalized = 0;
    MPI_Finalized(&Finalized);
    if (Owned && !Finalized)
      MPI_Comm_free(&Comm);
  }

  int rank() const override { return Rank; }
  int size() const override { return Size; }
  const std::string &name() const override { return Name; }

  void broadcast(void *Bytes, size_t Size, int Root) override {
    MOERT_MPI(MPI_Bcast(Bytes, checkedCount(Size), MPI_BYTE, Root, Comm));
  }
  void barrier() override { MOERT_MPI(MPI_Barrier(Comm)); }

protected:
  void doAllReduceSum(void *Data, size_t Count, DType T) override {
    if (Size == 1 || Count == 0)
      return;
    MOERT_MPI(MPI_Allreduce(MPI_IN_PLACE, Data, checkedCount(Count), mpiType(T), sumOp(T), Comm));
  }
  void doReduceScatterSum(const void *In, void *Out, size_t CountPerRank, DType T) override {
    MOERT_MPI(MPI_Reduce_scatter_block(In, Out, checkedCount(CountPerRank), mpiType(T), sumOp(T), Comm));
  }
  void doAllGather(const void *In, void *Out, size_t CountPerRank, DType T) override {
    MOERT_MPI(
        MPI_Allgather(In, checkedCount(CountPerRank), mpiType(T), Out, checkedCount(CountPerRank), mpiType(T), Comm));
  }
  void doAllToAllV(const void *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                   void *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets,
                   DType T) override {
    std::vector<int> SC(Size), SD(Size), RC(Size), RD(Size);
    for (int P = 0; P < Size; ++P) {
      SC[P] = checkedCount(SendCounts[P]);
      SD[P] = checkedCount(SendOffsets[P]);
      RC[P] = checkedCount(RecvCounts[P]);
      RD[P] = checkedCount(RecvOffsets[P]);
    }
    MOERT_MPI(MPI_Alltoallv(Send, SC.data(), SD.data(), mpiType(T), Recv, RC.data(), RD.data(), mpiType(T), Comm));
  }
  void doAllToAll(const void *Send, void *Recv, size_t CountPerRank, DType T) override {
    MOERT_MPI(
        MPI_Alltoall(Send, checkedCount(CountPerRank), mpiType(T), Recv, checkedCount(CountPerRank), mpiType(T), Comm));
  }
  void doSendRecv(const void *Send, size_t SendCount, int Dest, void *Recv, size_t RecvCount, int Source,
                  DType T) override {
    MOERT_MPI(MPI_Sendrecv(Send, checkedCount(SendCount), mpiType(T), Dest < 0 ? MPI_PROC_NULL : Dest, /*tag=*/0, Recv,
                           checkedCount(RecvCount), mpiType(T), Source < 0 ? MPI_PROC_NULL : Source, 0, Comm,
                           MPI_STATUS_IGNORE));
  }
  void doSend(const void *Data, size_t Count, int Dest, DType T) override {
    MOERT_MPI(MPI_Send(Data, checkedCount(Count), mpiType(T), Dest, 0, Comm));
  }
  void doRecv(void *Data, size_t Count, int Source, DType T) override {
    MOERT_MPI(MPI_Recv(Data, checkedCount(Count), mpiType(T), Source, 0, Comm, MPI_STATUS_IGNORE));
  }
  std::unique_ptr<Request> doIsend(const void *Data, size_t Count, int Dest, int Tag, DType T) override {
    auto R = std::make_unique<MpiRequest>();
    MOERT_MPI(MPI_Isend(Data, checkedCount(Count), mpiType(T), Dest, Tag, Comm, &R->Handle));
    return R;
  }
  std::unique_ptr<Request> doIrecv(void *Data, size_t Count, int Source, int Tag, DType T) override {
    auto R = std::make_unique<MpiRequest>();
    MOERT_MPI(MPI_Irecv(Data, checkedCount(Count), mpiType(T), Source, Tag, Comm, &R->Handle));
    return R;
  }

private:
  MPI_Comm Comm;
  std::string Name;
  bool Owned;
  int Rank = 0, Size = 1;
};

class MpiWorld final : public CommWorld {
public:
  MpiWorld(int *Argc, char ***Argv) {
    int Initialized = 0;
    MPI_Initialized(&Initialized);
    if (!Initialized) {
      MPI_Init(Argc, Argv);
      OwnsMpi = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    World = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", false);
  }
  ~MpiWorld() override {
    World.reset();
    if (OwnsMpi)
      MPI_Finalize();
  }
  int rank() const override { return World->rank(); }
  int size() const override { return World->size(); }
  Communicator &world() override { return *World; }

  std::unique_ptr<Communicator> split(const std::string &Name, const std::vector<std::vector<int>> &Groups) override {
    int Color = -1, Key = 0;
    for (size_t G = 0; G < Groups.size(); ++G)
      for (size_t I = 0; I < Groups[G].size(); ++I)
        if (Groups[G][I] == rank()) {
          Color = int(G);
          Key = int(I);
        }
    if (Color < 0)
      abort("rank " + std::to_string(rank()) + " is in no '" + Name + "' group of the plan", 2);
    MPI_Comm Comm;
    MOERT_MPI(MPI_Comm_split(MPI_COMM_WORLD, Color, Key, &Comm));
    MPI_Comm_set_errhandler(Comm, MPI_ERRORS_RETURN);
    return std::make_unique<MpiCommunicator>(Comm, Name, true);
  }

  [[noreturn]] void abort(const std::string &Message, int ExitCode) override {
    std::fprintf(stderr, "moerun: rank %d: %s\n", rank(), Message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, ExitCode);
    std::exit(ExitCode);
  }

private:
  std::unique_ptr<MpiCommunicator> World;
  bool OwnsMpi = false;
};

} // namespace

std::unique_ptr<CommWorld> createMpiWorld(int *Argc, char ***Argv) { return std::make_unique<MpiWorld>(Argc, Argv); }

} // namespace moert
