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

  void allReduceSum(float *Data, size_t Count) override {
    if (Size == 1 || Count == 0)
      return;
    MOERT_MPI(MPI_Allreduce(MPI_IN_PLACE, Data, checkedCount(Count), MPI_FLOAT, MPI_SUM, Comm));
  }
  void reduceScatterSum(const float *In, float *Out, size_t CountPerRank) override {
    MOERT_MPI(MPI_Reduce_scatter_block(In, Out, checkedCount(CountPerRank), MPI_FLOAT, MPI_SUM, Comm));
  }
  void allGather(const float *In, float *Out, size_t CountPerRank) override {
    MOERT_MPI(
        MPI_Allgather(In, checkedCount(CountPerRank), MPI_FLOAT, Out, checkedCount(CountPerRank), MPI_FLOAT, Comm));
  }
  void allToAllV(const float *Send, const std::vector<size_t> &SendCounts, const std::vector<size_t> &SendOffsets,
                 float *Recv, const std::vector<size_t> &RecvCounts, const std::vector<size_t> &RecvOffsets) override {
    std::vector<int> SC(Size), SD(Size), RC(Size), RD(Size);
    for (int P = 0; P < Size; ++P) {
      SC[P] = checkedCount(SendCounts[P]);
      SD[P] = checkedCount(SendOffsets[P]);
      RC[P] = checkedCount(RecvCounts[P]);
      RD[P] = checkedCount(RecvOffsets[P]);
    }
    MOERT_MPI(MPI_Alltoallv(Send, SC.data(), SD.data(), MPI_FLOAT, Recv, RC.data(), RD.data(), MPI_FLOAT, Comm));
  }
  void allToAll(const int64_t *Send, int64_t *Recv, size_t CountPerRank) override {
    MOERT_MPI(MPI_Alltoall(Send, checkedCount(CountPerRank), MPI_INT64_T, Recv, checkedCount(CountPerRank), MPI_INT64_T,
                           Comm));
  }
  void sendRecv(const float *Send, size_t SendCount, int Dest, float *Recv, size_t RecvCount, int Source) override {
    MOERT_MPI(MPI_Sendrecv(Send, checkedCount(SendCount), MPI_FLOAT, Dest < 0 ? MPI_PROC_NULL : Dest, /*tag=*/0, Recv,
                           checkedCount(RecvCount), MPI_FLOAT, Source < 0 ? MPI_PROC_NULL : Source, 0, Comm,
                           MPI_STATUS_IGNORE));
  }
  void send(const float *Data, size_t Count, int Dest) override {
    MOERT_MPI(MPI_Send(Data, checkedCount(Count), MPI_FLOAT, Dest, 0, Comm));
  }
  void recv(float *Data, size_t Count, int Source) override {
    MOERT_MPI(MPI_Recv(Data, checkedCount(Count), MPI_FLOAT, Source, 0, Comm, MPI_STATUS_IGNORE));
  }
  std::unique_ptr<Request> isend(const float *Data, size_t Count, int Dest, int Tag) override {
    auto R = std::make_unique<MpiRequest>();
    MOERT_MPI(MPI_Isend(Data, checkedCount(Count), MPI_FLOAT, Dest, Tag, Comm, &R->Handle));
    return R;
  }
  std::unique_ptr<Request> irecv(float *Data, size_t Count, int Source, int Tag) override {
    auto R = std::make_unique<MpiRequest>();
    MOERT_MPI(MPI_Irecv(Data, checkedCount(Count), MPI_FLOAT, Source, Tag, Comm, &R->Handle));
    return R;
  }
  void broadcast(void *Bytes, size_t Size, int Root) override {
    MOERT_MPI(MPI_Bcast(Bytes, checkedCount(Size), MPI_BYTE, Root, Comm));
  }
  void barrier() override { MOERT_MPI(MPI_Barrier(Comm)); }

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
