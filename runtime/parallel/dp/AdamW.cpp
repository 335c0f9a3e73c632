//===- parallel/dp/AdamW.cpp - AdamW over data-parallel replicas ----------===//
#include "parallel/dp/AdamW.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace moert {

namespace {

/// The scalars of one step, shared by every element, in the precision the
/// element arithmetic runs in.
struct StepConstants {
  float Beta1, Beta2, Eps;
  float StepSize; ///< lr / (1 - beta1^t)
  float Bc2Sqrt;  ///< sqrt(1 - beta2^t)
  float Scale;    ///< gradient clipping factor
};

/// The AdamW update of N consecutive elements; both variants go through
/// here, so they differ only by the gradient sums they feed in. Decay is
/// lr * wd or 0. This is the hot loop of a step (every parameter element,
/// every step). The arithmetic is fp32, as in torch's and Apex's fused Adam
/// that Megatron-Core steps with (master weights, moments and gradients are
/// all fp32 there too), so a vector register holds twice the elements that
/// double arithmetic would. The arrays never overlap, so the compiler may
/// update several elements in one vector register; each element's arithmetic
/// is unchanged, operation for operation (the file is built with
/// -fno-math-errno, which lets sqrt vectorize without changing its result,
/// and -ffp-contract=off, so no FMA changes a rounding): the same bits as one
/// element at a time. On x86-64 with GCC, target_clones adds AVX-512 and AVX2
/// versions chosen at load time (not under ASan, whose shadow memory is not
/// set up yet when the loader runs the clones' resolver).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void updateRange(float *__restrict Param, float *__restrict M,
                 float *__restrict V, const float *__restrict Grad, size_t N,
                 float Decay, const StepConstants C) {
  const float KeepM = 1.0f - C.Beta1, KeepV = 1.0f - C.Beta2, Shrink = 1.0f - Decay;
  for (size_t K = 0; K < N; ++K) {
    float G = Grad[K] * C.Scale;
    float NewM = C.Beta1 * M[K] + KeepM * G;
    float NewV = C.Beta2 * V[K] + KeepV * G * G;
    M[K] = NewM;
    V[K] = NewV;
    Param[K] = Param[K] * Shrink - C.StepSize * NewM / (std::sqrt(NewV) / C.Bc2Sqrt + C.Eps);
  }
}

/// The sum of squares in eight independent double accumulators, so that the
/// loop is not one chain of dependent additions; the order is fixed, so the
/// sum is the same on every run.
double sumSquares(const float *X, size_t N) {
  constexpr size_t Lanes = 8;
  double S[Lanes] = {};
  size_t I = 0;
  for (; I + Lanes <= N; I += Lanes)
    for (size_t L = 0; L < Lanes; ++L)
      S[L] += double(X[I + L]) * double(X[I + L]);
  for (; I < N; ++I)
    S[0] += double(X[I]) * double(X[I]);
  double Total = 0;
  for (double Part : S)
    Total += Part;
  return Total;
}

/// The part [Lo, Hi) of slot S inside a shard [Begin, End), or Lo == Hi.
struct Overlap {
  size_t Lo, Hi;
};
Overlap overlap(const GradBucket::Slot &S, size_t Begin, size_t End) {
  size_t Lo = std::max(S.Offset, Begin);
  size_t Hi = std::min(S.Offset + S.Numel, End);
  return {Lo, std::max(Lo, Hi)};
}

} // namespace

struct AdamW::Impl {
  Impl(std::vector<Parameter *> Ps, const GradientGroups &Groups, Communicator &World)
      : Params(std::move(Ps)), Reducer(Params, Groups), World(World) {}

  std::vector<Parameter *> Params;
  GradientReducer Reducer;
  Communicator &World;
  /// Replicated variant: the moments of every parameter.
  std::vector<std::vector<float>> M, V;
  /// Distributed variant: the moments of this rank's shard of each bucket,
  /// and the shard's master values on their way to the all-gather.
  std::vector<float> DpCpM, DpCpV, EdpM, EdpV, Master;
};

AdamW::AdamW(std::vector<Parameter *> Params, const GradientGroups &Groups, Communicator &World,
             const AdamWOptions &Options)
    : P(std::make_unique<Impl>(std::move(Params), Groups, World)), Options(Options) {
  if (Options.Distributed) {
    P->DpCpM.assign(P->Reducer.dpCpBucket().shardSize(), 0.0f);
    P->DpCpV = P->DpCpM;
    P->EdpM.assign(P->Reducer.edpBucket().shardSize(), 0.0f);
    P->EdpV = P->EdpM;
  } else {
    for (Parameter *Param : P->Params) {
      P->M.emplace_back(size_t(Param->Value.numel()), 0.0f);
      P->V.emplace_back(size_t(Param->Value.numel()), 0.0f);
    }
  }
}

AdamW::~AdamW() = default;

void AdamW::zeroGrads() {
  for (Parameter *Param : P->Params)
    Param->Grad.zero();
}

int64_t AdamW::stateElements() const {
  int64_t N = int64_t(P->DpCpM.size() + P->DpCpV.size() + P->EdpM.size() + P->EdpV.size());
  for (size_t I = 0; I < P->M.size(); ++I)
    N += int64_t(P->M[I].size() + P->V[I].size());
  return N;
}

std::vector<ParameterMoments> AdamW::moments() {
  std::vector<ParameterMoments> Out(P->Params.size());
  if (!Options.Distributed) {
    for (size_t I = 0; I < P->Params.size(); ++I)
      Out[I] = {P->M[I], P->V[I]};
    return Out;
  }
  std::map<const Parameter *, size_t> Index;
  for (size_t I = 0; I < P->Params.size(); ++I) {
    Index[P->Params[I]] = I;
    Out[I].ExpAvg.resize(size_t(P->Params[I]->Value.numel()));
    Out[I].ExpAvgSq.resize(Out[I].ExpAvg.size());
  }
  auto Gather = [&](GradBucket &B, const std::vector<float> &M, const std::vector<float> &V) {
    if (B.empty())
      return;
    std::vector<float> FullM(B.Padded), FullV(B.Padded);
    B.Group->allGather(M.data(), FullM.data(), B.shardSize());
    B.Group->allGather(V.data(), FullV.data(), B.shardSize());
    for (const GradBucket::Slot &S : B.Slots) {
      ParameterMoments &Dst = Out[Index.at(S.Param)];
      std::copy_n(FullM.data() + S.Offset, S.Numel, Dst.ExpAvg.data());
      std::copy_n(FullV.data() + S.Offset, S.Numel, Dst.ExpAvgSq.data());
    }
  };
  Gather(P->Reducer.dpCpBucket(), P->DpCpM, P->DpCpV);
  Gather(P->Reducer.edpBucket(), P->EdpM, P->EdpV);
  return Out;
}

bool AdamW::setMoments(const std::vector<ParameterMoments> &In) {
  if (In.size() != P->Params.size())
    return false;
  for (size_t I = 0; I < In.size(); ++I)
    if (In[I].ExpAvg.size() != size_t(P->Params[I]->Value.numel()) || In[I].ExpAvgSq.size() != In[I].ExpAvg.size())
      return false;
  if (!Options.Distributed) {
    for (size_t I = 0; I < In.size(); ++I) {
      P->M[I] = In[I].ExpAvg;
      P->V[I] = In[I].ExpAvgSq;
    }
    return true;
  }
  std::map<const Parameter *, size_t> Index;
  for (size_t I = 0; I < P->Params.size(); ++I)
    Index[P->Params[I]] = I;
  auto Scatter = [&](GradBucket &B, std::vector<float> &M, std::vector<float> &V) {
    if (B.empty())
      return;
    size_t Begin = B.shardBegin(), End = Begin + B.shardSize();
    for (const GradBucket::Slot &S : B.Slots) {
      Overlap O = overlap(S, Begin, End);
      if (O.Lo == O.Hi)
        continue;
      const ParameterMoments &Src = In[Index.at(S.Param)];
      std::copy(Src.ExpAvg.begin() + ptrdiff_t(O.Lo - S.Offset), Src.ExpAvg.begin() + ptrdiff_t(O.Hi - S.Offset),
                M.begin() + ptrdiff_t(O.Lo - Begin));
      std::copy(Src.ExpAvgSq.begin() + ptrdiff_t(O.Lo - S.Offset), Src.ExpAvgSq.begin() + ptrdiff_t(O.Hi - S.Offset),
                V.begin() + ptrdiff_t(O.Lo - Begin));
    }
  };
  Scatter(P->Reducer.dpCpBucket(), P->DpCpM, P->DpCpV);
  Scatter(P->Reducer.edpBucket(), P->EdpM, P->EdpV);
  return true;
}

AdamWStepInfo AdamW::step() {
  ++Step;
  GradientReducer &R = P->Reducer;
  const GradientGroups &G = R.groups();
  const bool TpOwner = G.Tp->rank() == 0;

  // Reduce, and add up the squares of the gradient elements this rank owns.
  double Local = 0;
  if (Options.Distributed) {
    R.reduceScatter();
    const GradBucket &D = R.dpCpBucket();
    size_t Begin = D.shardBegin(), End = Begin + D.shardSize();
    for (const GradBucket::Slot &S : D.Slots) {
      // A tied copy's gradient is its original's: count it once (Megatron
      // leaves shared parameters out of the norm).
      if ((S.Param->Kind == ParamKind::SequenceParallelReplicated && !TpOwner) || S.Param->TiedCopy)
        continue;
      Overlap O = overlap(S, Begin, End);
      Local += sumSquares(R.dpCpShard().data() + (O.Lo - Begin), O.Hi - O.Lo);
    }
    Local += sumSquares(R.edpShard().data(), R.edpShard().size());
  } else {
    R.allReduce();
    const bool DpCpOwner = G.DpCp->rank() == 0;
    for (Parameter *Param : P->Params) {
      bool Owner = false;
      switch (Param->Kind) {
      case ParamKind::Dense:
        Owner = DpCpOwner;
        break;
      case ParamKind::SequenceParallelReplicated:
        Owner = DpCpOwner && TpOwner;
        break;
      case ParamKind::Expert:
        Owner = G.Edp->rank() == 0;
        break;
      }
      if (Owner && !Param->TiedCopy)
        Local += sumSquares(Param->Grad.data(), size_t(Param->Grad.numel()));
    }
  }
  float Total = float(Local);
  P->World.allReduceSum(&Total, 1);

  AdamWStepInfo Info;
  Info.Step = Step;
  Info.GradNorm = std::sqrt(double(std::max(Total, 0.0f)));
  if (Options.ClipGradNorm > 0) {
    double Coef = Options.ClipGradNorm / (Info.GradNorm + 1e-6);
    if (Coef < 1)
      Info.ClipScale = Coef;
  }

  // The step's scalars in double, rounded once to the fp32 of the loop.
  StepConstants C;
  C.Beta1 = float(Options.Beta1);
  C.Beta2 = float(Options.Beta2);
  C.Eps = float(Options.Eps);
  C.StepSize = float(Options.Lr / (1 - std::pow(Options.Beta1, double(Step))));
  C.Bc2Sqrt = float(std::sqrt(1 - std::pow(Options.Beta2, double(Step))));
  C.Scale = float(Info.ClipScale);
  auto DecayOf = [&](const Parameter *Param) {
    bool Decays = Options.DecayVectors || Param->Value.rank() >= 2;
    return float(Decays ? Options.Lr * Options.WeightDecay : 0.0);
  };

  if (!Options.Distributed) {
    for (size_t I = 0; I < P->Params.size(); ++I) {
      Parameter *Param = P->Params[I];
      float Decay = DecayOf(Param);
      float *Value = Param->Value.data();
      const float *Grad = Param->Grad.data();
      updateRange(Value, P->M[I].data(), P->V[I].data(), Grad, P->M[I].size(), Decay, C);
    }
    return Info;
  }

  // Distributed: update this rank's shard of each bucket's master values,
  // then all-gather the shards into every replica's parameters.
  auto UpdateShard = [&](GradBucket &B, const std::vector<float> &Grad, std::vector<float> &M, std::vector<float> &V) {
    if (B.empty())
      return;
    if (B.Group->size() == 1) {
      // A group of one holds the whole bucket: update the parameters in
      // place, with the same arithmetic, instead of through the master copy
      // and the group's all-gather.
      for (const GradBucket::Slot &S : B.Slots)
        updateRange(S.Param->Value.data(), M.data() + S.Offset, V.data() + S.Offset, Grad.data() + S.Offset, S.Numel,
                    DecayOf(S.Param), C);
      return;
    }
    size_t Begin = B.shardBegin(), Size = B.shardSize();
    P->Master.assign(Size, 0.0f);
    for (const GradBucket::Slot &S : B.Slots) {
      Overlap O = overlap(S, Begin, Begin + Size);
      if (O.Lo == O.Hi)
        continue;
      float Decay = DecayOf(S.Param);
      const float *Value = S.Param->Value.data() + (O.Lo - S.Offset);
      size_t K = O.Lo - Begin, N = O.Hi - O.Lo;
      std::copy_n(Value, N, P->Master.data() + K);
      updateRange(P->Master.data() + K, M.data() + K, V.data() + K, Grad.data() + K, N, Decay, C);
    }
    B.Group->allGather(P->Master.data(), B.Flat.data(), Size);
    B.unpackValues();
  };
  UpdateShard(R.dpCpBucket(), R.dpCpShard(), P->DpCpM, P->DpCpV);
  UpdateShard(R.edpBucket(), R.edpShard(), P->EdpM, P->EdpV);
  return Info;
}

} // namespace moert
