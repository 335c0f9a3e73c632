//===- DpTest.cpp - Gradient reduction and AdamW over every split ---------===//
//
// The world of W ranks is split into P pipeline stages, each split as tp x
// dp-cp with experts split E ways (see Layout), for every P, T and E that
// divide. Odd stages hold no experts, so the global norm spans stages with
// different parameters and empty buckets. Each rank builds fake parameters
// of every kind whose values and per-rank gradients are hash functions of
// (name, shard, rank, step), so every expected sum can be computed by hand on
// any rank.
//
//===----------------------------------------------------------------------===//
#include "MpiTestEnv.h"
#include "comm/ForwardingComm.h"

#include "parallel/dp/AdamW.h"
#include "parallel/dp/GradientReducer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

using namespace moert;

namespace {

uint64_t mix(uint64_t X) {
  X += 0x9e3779b97f4a7c15ULL;
  X = (X ^ (X >> 30)) * 0xbf58476d1ce4e5b9ULL;
  X = (X ^ (X >> 27)) * 0x94d049bb133111ebULL;
  return X ^ (X >> 31);
}

uint64_t nameHash(const std::string &S) {
  uint64_t H = 1469598103934665603ULL;
  for (char C : S)
    H = (H ^ uint64_t(uint8_t(C))) * 1099511628211ULL;
  return H;
}

/// A value in [-1, 1) from a tuple, exactly representable in fp32.
double unit(uint64_t A, uint64_t B, uint64_t C, uint64_t D) {
  uint64_t H = mix(mix(mix(mix(A) ^ B) ^ C) ^ D);
  return double(int64_t(H >> 40) - (int64_t(1) << 23)) / double(1 << 23);
}

struct Spec {
  std::string Name;
  ParamKind Kind;
  std::vector<int64_t> Shape;
};

/// Sizes chosen so no bucket divides evenly by 2 or 4: dp-cp 53 elements,
/// tp 18, edp 29; "empty" has no elements at all.
const std::vector<Spec> &baseSpecs() {
  static const std::vector<Spec> S = {
      {"dense.w", ParamKind::Dense, {5, 3}},
      {"dense.b", ParamKind::Dense, {7}},
      {"norm", ParamKind::SequenceParallelReplicated, {6}},
      {"empty", ParamKind::Dense, {0}},
      {"experts.fc1", ParamKind::Expert, {4, 5}},
      {"dense.v", ParamKind::Dense, {13}},
      {"router", ParamKind::SequenceParallelReplicated, {3, 4}},
      {"experts.fc2", ParamKind::Expert, {9}},
  };
  return S;
}

/// The parameters of pipeline stage Stage, named after it: odd stages hold
/// dense layers only, so their edp bucket is empty.
std::vector<Spec> stageSpecs(int Stage) {
  std::vector<Spec> R;
  for (Spec S : baseSpecs())
    if (Stage % 2 == 0 || S.Kind != ParamKind::Expert) {
      S.Name = "stage" + std::to_string(Stage) + "." + S.Name;
      R.push_back(S);
    }
  return R;
}

int64_t numel(const Spec &S) {
  int64_t N = 1;
  for (int64_t D : S.Shape)
    N *= D;
  return N;
}

/// World rank Q = stage * S + d * T + t with S = W / P ranks per stage;
/// experts split E ways inside a stage (ep rank (Q % S) % E).
struct Layout {
  int W, P, T, E;
  int perStage() const { return W / P; }
  int D() const { return perStage() / T; }
  int edp() const { return perStage() / E; }
  int stageOf(int Q) const { return Q / perStage(); }
  int tOf(int Q) const { return Q % perStage() % T; }
  int eOf(int Q) const { return Q % perStage() % E; }
  int rank() const { return test::world().rank(); }
  int stage() const { return stageOf(rank()); }
  std::vector<Spec> specs() const { return stageSpecs(stage()); }
  bool hasExperts() const { return stage() % 2 == 0; }
  /// The shard of a parameter kind a rank holds: its tp shard for dense
  /// weights, its experts for expert weights, the only copy otherwise.
  int shardOf(int Q, ParamKind K) const { return K == ParamKind::Dense ? tOf(Q) : K == ParamKind::Expert ? eOf(Q) : 0; }
  int shard(ParamKind K) const { return shardOf(rank(), K); }
  /// How many distinct shards of kind K a stage has.
  int shards(ParamKind K) const { return K == ParamKind::Dense ? T : K == ParamKind::Expert ? E : 1; }
  /// The world ranks holding shard Shard of kind K on stage Stage: those
  /// whose gradients its reduction sums.
  std::vector<int> holders(int Stage, ParamKind K, int Shard) const {
    std::vector<int> R;
    for (int Q = 0; Q < W; ++Q)
      if (stageOf(Q) == Stage && shardOf(Q, K) == Shard)
        R.push_back(Q);
    return R;
  }
  std::vector<int> reducedOver(ParamKind K) const { return holders(stage(), K, shard(K)); }
};

double initialValue(const Spec &S, int Shard, int64_t I) {
  return unit(nameHash(S.Name), uint64_t(Shard), 77, uint64_t(I));
}

/// Rank Q's local gradient at Step; expert gradients are larger so the kinds
/// weigh differently in the norm.
double localGrad(const Spec &S, int Shard, int Q, int Step, int64_t I) {
  double Scale = S.Kind == ParamKind::Expert ? 3.0 : 1.0;
  return Scale * unit(nameHash(S.Name) + uint64_t(Step), uint64_t(Shard), uint64_t(Q), uint64_t(I));
}

/// The hand sum of the gradient of element I of shard Shard over ranks.
double reducedGrad(const Layout &L, const Spec &S, int Shard, const std::vector<int> &Ranks, int Step, int64_t I) {
  double Sum = 0;
  for (int Q : Ranks)
    Sum += double(float(localGrad(S, Shard, Q, Step, I)));
  return Sum;
}

struct Groups {
  std::unique_ptr<Communicator> Tp, DpCp, Edp;
  GradientGroups get() const { return {DpCp.get(), Tp.get(), Edp.get()}; }
};

Groups split(const Layout &L) {
  CommWorld &World = test::world();
  std::vector<std::vector<int>> Tp(size_t(L.P * L.D())), DpCp(size_t(L.P * L.T)), Edp(size_t(L.P * L.E));
  for (int Q = 0; Q < L.W; ++Q) {
    int Stage = L.stageOf(Q), D = Q % L.perStage() / L.T;
    Tp[size_t(Stage * L.D() + D)].push_back(Q);
    DpCp[size_t(Stage * L.T + L.tOf(Q))].push_back(Q);
    Edp[size_t(Stage * L.E + L.eOf(Q))].push_back(Q);
  }
  Groups G;
  G.Tp = World.split("tp", Tp);
  G.DpCp = World.split("dp-cp", DpCp);
  G.Edp = World.split("edp", Edp);
  return G;
}

using Params = std::vector<std::unique_ptr<Parameter>>;

Params makeParams(const Layout &L) {
  Params Ps;
  for (const Spec &S : L.specs()) {
    auto P = std::make_unique<Parameter>();
    P->Name = S.Name;
    P->Kind = S.Kind;
    P->Value = Tensor(S.Shape);
    P->Grad = Tensor(S.Shape);
    for (int64_t I = 0; I < numel(S); ++I)
      P->Value[I] = float(initialValue(S, L.shard(S.Kind), I));
    Ps.push_back(std::move(P));
  }
  return Ps;
}

void setLocalGrads(const Layout &L, Params &Ps, int Step) {
  const std::vector<Spec> Specs = L.specs();
  for (size_t K = 0; K < Ps.size(); ++K) {
    const Spec &S = Specs[K];
    for (int64_t I = 0; I < numel(S); ++I)
      Ps[K]->Grad[I] = float(localGrad(S, L.shard(S.Kind), L.rank(), Step, I));
  }
}

std::vector<Parameter *> pointers(Params &Ps) {
  std::vector<Parameter *> R;
  for (auto &P : Ps)
    R.push_back(P.get());
  return R;
}

/// Every split of the world: P pipeline stages, T-way tp and E-way ep
/// inside a stage.
std::vector<Layout> layouts() {
  int W = test::world().size();
  std::vector<Layout> R;
  for (int P = 1; P <= W; ++P)
    for (int T = 1; T <= W; ++T)
      for (int E = 1; E <= W; ++E)
        if (W % P == 0 && (W / P) % T == 0 && (W / P) % E == 0)
          R.push_back({W, P, T, E});
  return R;
}

std::string describe(const Layout &L) {
  return "pp " + std::to_string(L.P) + " tp " + std::to_string(L.T) + " dp-cp " + std::to_string(L.D()) + " ep " +
         std::to_string(L.E) + " edp " + std::to_string(L.edp());
}

/// Forwards to a real group and counts the collectives issued on it.
class CountingComm final : public ForwardingCommunicator {
public:
  using ForwardingCommunicator::ForwardingCommunicator;
  int AllReduces = 0, ReduceScatters = 0, AllGathers = 0;

protected:
  void doAllReduceSum(void *Data, size_t Count, DType T) override {
    ++AllReduces;
    ForwardingCommunicator::doAllReduceSum(Data, Count, T);
  }
  void doReduceScatterSum(const void *In, void *Out, size_t N, DType T) override {
    ++ReduceScatters;
    ForwardingCommunicator::doReduceScatterSum(In, Out, N, T);
  }
  void doAllGather(const void *In, void *Out, size_t N, DType T) override {
    ++AllGathers;
    ForwardingCommunicator::doAllGather(In, Out, N, T);
  }
};

} // namespace

TEST(GradientReducer, AllReduceMatchesHandSumsWithOneCollectivePerGroup) {
  for (const Layout &L : layouts()) {
    SCOPED_TRACE(describe(L));
    Groups G = split(L);
    CountingComm Tp(*G.Tp), DpCp(*G.DpCp), Edp(*G.Edp);
    Params Ps = makeParams(L);
    GradientReducer R(pointers(Ps), {&DpCp, &Tp, &Edp});
    EXPECT_EQ(R.dpCpBucket().Numel, 53u);
    EXPECT_EQ(R.tpBucket().Numel, 18u);
    EXPECT_EQ(R.edpBucket().Numel, L.hasExperts() ? 29u : 0u);
    EXPECT_EQ(R.dpCpBucket().Padded % size_t(DpCp.size()), 0u);
    EXPECT_LT(R.dpCpBucket().Padded - 53, size_t(DpCp.size()));
    for (int Step = 1; Step <= 2; ++Step) {
      setLocalGrads(L, Ps, Step);
      R.allReduce();
      const std::vector<Spec> Specs = L.specs();
      for (size_t K = 0; K < Ps.size(); ++K) {
        const Spec &S = Specs[K];
        std::vector<int> Over = L.reducedOver(S.Kind);
        for (int64_t I = 0; I < numel(S); ++I)
          ASSERT_NEAR(Ps[K]->Grad[I], reducedGrad(L, S, L.shard(S.Kind), Over, Step, I), 1e-5)
              << S.Name << "[" << I << "] step " << Step;
      }
    }
    // Two steps: at most one all-reduce per group and step, none on a group
    // of one or for an empty bucket.
    EXPECT_EQ(Tp.AllReduces, Tp.size() > 1 ? 2 : 0);
    EXPECT_EQ(DpCp.AllReduces, DpCp.size() > 1 ? 2 : 0);
    EXPECT_EQ(Edp.AllReduces, Edp.size() > 1 && L.hasExperts() ? 2 : 0);
  }
}

TEST(GradientReducer, ReduceScatterLeavesEachRankItsShardOfTheSums) {
  for (const Layout &L : layouts()) {
    SCOPED_TRACE(describe(L));
    Groups G = split(L);
    CountingComm Tp(*G.Tp), DpCp(*G.DpCp), Edp(*G.Edp);
    Params Ps = makeParams(L);
    GradientReducer R(pointers(Ps), {&DpCp, &Tp, &Edp});
    setLocalGrads(L, Ps, 1);
    R.reduceScatter();
    // None on a group of one: its sum is each gradient where it lies.
    EXPECT_EQ(DpCp.ReduceScatters, DpCp.size() > 1 ? 1 : 0);
    EXPECT_EQ(Edp.ReduceScatters, Edp.size() > 1 && L.hasExperts() ? 1 : 0);
    EXPECT_EQ(DpCp.AllReduces + Edp.AllReduces, 0);
    EXPECT_EQ(Tp.AllReduces, Tp.size() > 1 ? 1 : 0);
    for (GradBucket *B : {&R.dpCpBucket(), &R.edpBucket()}) {
      const std::vector<float> &Shard = B == &R.dpCpBucket() ? R.dpCpShard() : R.edpShard();
      const bool InPlace = GradientReducer::inPlace(*B);
      ASSERT_EQ(Shard.size(), InPlace ? 0 : B->shardSize());
      // Expected flat bucket: the hand sums, zero padding.
      std::vector<double> Flat(B->Padded, 0.0);
      for (const GradBucket::Slot &S : B->Slots) {
        size_t K = 0;
        while (Ps[K].get() != S.Param)
          ++K;
        const Spec Sp = L.specs()[K];
        for (size_t I = 0; I < S.Numel; ++I)
          Flat[S.Offset + I] = reducedGrad(L, Sp, L.shard(Sp.Kind), L.reducedOver(Sp.Kind), 1, int64_t(I));
      }
      if (InPlace) {
        for (const GradBucket::Slot &S : B->Slots)
          for (size_t I = 0; I < S.Numel; ++I)
            ASSERT_NEAR(S.Param->Grad.data()[I], Flat[S.Offset + I], 1e-5) << S.Param->Name << "[" << I << "]";
        continue;
      }
      for (size_t I = 0; I < Shard.size(); ++I)
        ASSERT_NEAR(Shard[I], Flat[B->shardBegin() + I], 1e-5) << I;
    }
  }
}

namespace {

/// The global norm of step Step's summed gradients, from every shard of
/// every stage of the model, each counted once.
double referenceNorm(const Layout &L, int Step) {
  double Sum = 0;
  for (int Stage = 0; Stage < L.P; ++Stage)
    for (const Spec &S : stageSpecs(Stage))
      for (int Shard = 0; Shard < L.shards(S.Kind); ++Shard) {
        std::vector<int> Over = L.holders(Stage, S.Kind, Shard);
        for (int64_t I = 0; I < numel(S); ++I) {
          double G = reducedGrad(L, S, Shard, Over, Step, I);
          Sum += G * G;
        }
      }
  return std::sqrt(Sum);
}

/// Runs Steps AdamW steps and checks every value against a double-precision
/// evaluation of the same update on this rank.
void checkAgainstReference(const Layout &L, const AdamWOptions &O, int Steps) {
  Groups G = split(L);
  Params Ps = makeParams(L);
  AdamW Opt(pointers(Ps), G.get(), test::world().world(), O);
  std::vector<std::vector<double>> P(Ps.size()), M(Ps.size()), V(Ps.size());
  const std::vector<Spec> Specs = L.specs();
  for (size_t K = 0; K < Ps.size(); ++K) {
    const Spec &S = Specs[K];
    for (int64_t I = 0; I < numel(S); ++I)
      P[K].push_back(double(Ps[K]->Value[I]));
    M[K].assign(P[K].size(), 0.0);
    V[K].assign(P[K].size(), 0.0);
  }
  bool Clipped = false;
  for (int Step = 1; Step <= Steps; ++Step) {
    setLocalGrads(L, Ps, Step);
    AdamWStepInfo Info = Opt.step();
    Opt.zeroGrads();
    double Norm = referenceNorm(L, Step);
    double Scale = 1;
    if (O.ClipGradNorm > 0 && O.ClipGradNorm / (Norm + 1e-6) < 1)
      Scale = O.ClipGradNorm / (Norm + 1e-6);
    Clipped |= Scale < 1;
    EXPECT_EQ(Info.Step, Step);
    EXPECT_NEAR(Info.GradNorm, Norm, 1e-5 * Norm);
    EXPECT_NEAR(Info.ClipScale, Scale, 1e-5 * Scale);
    double Bc1 = 1 - std::pow(O.Beta1, Step), Bc2 = 1 - std::pow(O.Beta2, Step);
    for (size_t K = 0; K < Ps.size(); ++K) {
      const Spec &S = Specs[K];
      bool Decays = O.DecayVectors || S.Shape.size() >= 2;
      std::vector<int> Over = L.reducedOver(S.Kind);
      for (int64_t I = 0; I < numel(S); ++I) {
        double Gr = Scale * reducedGrad(L, S, L.shard(S.Kind), Over, Step, I);
        double &Pk = P[K][size_t(I)], &Mk = M[K][size_t(I)], &Vk = V[K][size_t(I)];
        Mk = O.Beta1 * Mk + (1 - O.Beta1) * Gr;
        Vk = O.Beta2 * Vk + (1 - O.Beta2) * Gr * Gr;
        if (Decays)
          Pk -= O.Lr * O.WeightDecay * Pk;
        Pk -= O.Lr * (Mk / Bc1) / (std::sqrt(Vk / Bc2) + O.Eps);
        ASSERT_NEAR(Ps[K]->Value[I], Pk, 2e-6 * std::max(1.0, std::fabs(Pk)))
            << S.Name << "[" << I << "] step " << Step;
      }
    }
  }
  if (O.ClipGradNorm > 0) {
    EXPECT_TRUE(Clipped) << "the test's clip threshold should bite";
  }
}

AdamWOptions testOptions(bool Distributed, double Clip) {
  AdamWOptions O;
  O.Lr = 0.01;
  O.Beta1 = 0.9;
  O.Beta2 = 0.95;
  O.Eps = 1e-8;
  O.WeightDecay = 0.1;
  O.ClipGradNorm = Clip;
  O.Distributed = Distributed;
  return O;
}

} // namespace

TEST(AdamW, MatchesDoublePrecisionReference) {
  for (const Layout &L : layouts())
    for (bool Distributed : {false, true})
      for (double Clip : {0.0, 1.5}) {
        SCOPED_TRACE(describe(L) + (Distributed ? " distributed" : "") + " clip " + std::to_string(Clip));
        checkAgainstReference(L, testOptions(Distributed, Clip), 3);
      }
}

TEST(AdamW, DecayVectorsDecaysOneDimensionalParameters) {
  for (const Layout &L : layouts()) {
    SCOPED_TRACE(describe(L));
    AdamWOptions O = testOptions(false, 0);
    O.DecayVectors = true;
    O.WeightDecay = 0.5;
    checkAgainstReference(L, O, 2);
  }
}

TEST(AdamW, DistributedEqualsReplicated) {
  for (const Layout &L : layouts()) {
    SCOPED_TRACE(describe(L));
    Groups G = split(L);
    Params A = makeParams(L), B = makeParams(L);
    AdamW Replicated(pointers(A), G.get(), test::world().world(), testOptions(false, 1.5));
    AdamW Distributed(pointers(B), G.get(), test::world().world(), testOptions(true, 1.5));
    for (int Step = 1; Step <= 3; ++Step) {
      setLocalGrads(L, A, Step);
      setLocalGrads(L, B, Step);
      AdamWStepInfo IA = Replicated.step(), IB = Distributed.step();
      EXPECT_NEAR(IA.GradNorm, IB.GradNorm, 1e-6 * IA.GradNorm);
      Replicated.zeroGrads();
      Distributed.zeroGrads();
      for (size_t K = 0; K < A.size(); ++K)
        for (int64_t I = 0; I < A[K]->Value.numel(); ++I)
          ASSERT_NEAR(A[K]->Value[I], B[K]->Value[I], 1e-6 * std::max(1.0f, std::fabs(A[K]->Value[I])))
              << A[K]->Name << "[" << I << "] step " << Step;
    }
    // The distributed variant holds only its shards of the moments.
    int64_t ExpertElems = L.hasExperts() ? 29 : 0;
    int64_t Full = 2 * (53 + ExpertElems);
    EXPECT_EQ(Replicated.stateElements(), Full);
    auto Ceil = [](int64_t N, int64_t D) { return (N + D - 1) / D; };
    int64_t Sharded = 2 * (Ceil(53, L.D()) + Ceil(ExpertElems, L.edp()));
    EXPECT_EQ(Distributed.stateElements(), Sharded);
    // Every replica in a dp-cp group ends with bit-identical values.
    std::vector<float> Mine;
    for (auto &P : B)
      if (P->Kind != ParamKind::Expert)
        Mine.insert(Mine.end(), P->Value.data(), P->Value.data() + P->Value.numel());
    std::vector<float> All(Mine.size() * size_t(G.DpCp->size()));
    G.DpCp->allGather(Mine.data(), All.data(), Mine.size());
    for (size_t I = 0; I < All.size(); ++I)
      ASSERT_EQ(All[I], Mine[I % Mine.size()]) << I;
  }
}
