//===- parallel/dp/AdamW.cpp - AdamW over data-parallel replicas ----------===//
#include "parallel/dp/AdamW.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace moert {

namespace {

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
  Impl(std::vector<Parameter *> Ps, const GradientGroups &Groups, Communicator &World, ComputeBackend &Compute)
      : Params(std::move(Ps)), Reducer(Params, Groups, Compute), World(World), Compute(Compute) {}

  std::vector<Parameter *> Params;
  GradientReducer Reducer;
  Communicator &World;
  ComputeBackend &Compute;
  /// Replicated variant: the moments of every parameter.
  std::vector<std::vector<float>> M, V;
  /// Distributed variant: the moments of this rank's shard of each bucket,
  /// and the shard's master values on their way to the all-gather (sized
  /// once, so that they may be resident).
  std::vector<float> DpCpM, DpCpV, EdpM, EdpV, DpCpMaster, EdpMaster;
};

AdamW::AdamW(std::vector<Parameter *> Params, const GradientGroups &Groups, Communicator &World,
             const AdamWOptions &Options, ComputeBackend &Compute)
    : P(std::make_unique<Impl>(std::move(Params), Groups, World, Compute)), Options(Options) {
  if (Options.Distributed) {
    P->DpCpM.assign(P->Reducer.dpCpBucket().shardSize(), 0.0f);
    P->DpCpV = P->DpCpM;
    P->EdpM.assign(P->Reducer.edpBucket().shardSize(), 0.0f);
    P->EdpV = P->EdpM;
    if (!GradientReducer::inPlace(P->Reducer.dpCpBucket()))
      P->DpCpMaster.assign(P->Reducer.dpCpBucket().shardSize(), 0.0f);
    if (!GradientReducer::inPlace(P->Reducer.edpBucket()))
      P->EdpMaster.assign(P->Reducer.edpBucket().shardSize(), 0.0f);
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
    P->Compute.zero(Param->Grad.data(), Param->Grad.numel());
}

std::vector<HostArray> AdamW::residentArrays() {
  GradientReducer &R = P->Reducer;
  // A bucket's sum stays where its gradients lie: a group of one (the
  // rank's own gradient is the sum) or one with a device counterpart.
  auto SummedThere = [](const GradBucket &B) { return GradientReducer::inPlace(B) || B.Group->device(); };
  auto KindSummedThere = [&](const Parameter &Param) {
    switch (Param.Kind) {
    case ParamKind::Dense:
      return SummedThere(R.dpCpBucket());
    case ParamKind::SequenceParallelReplicated:
      return SummedThere(R.dpCpBucket()) && SummedThere(R.tpBucket());
    case ParamKind::Expert:
      return SummedThere(R.edpBucket());
    }
    return false;
  };
  std::vector<HostArray> Arrays;
  auto Keep = [&](std::vector<float> &A) {
    if (!A.empty())
      Arrays.push_back({A.data(), int64_t(A.size())});
  };
  auto Kept = [&](const Parameter &Param) {
    return !Param.ReadOnHost && !Param.TiedCopy && KindSummedThere(Param) && Param.Value.numel() > 0;
  };
  for (Parameter *Param : P->Params)
    if (Kept(*Param)) {
      Arrays.push_back({Param->Value.data(), Param->Value.numel()});
      Arrays.push_back({Param->Grad.data(), Param->Grad.numel()});
    }
  // The buckets a device group sums, whole (a host gradient among them is
  // copied in and out).
  for (GradBucket *B : {&R.tpBucket(), &R.dpCpBucket(), &R.edpBucket()})
    if (!GradientReducer::inPlace(*B) && B->Group->device())
      Keep(B->Flat);
  if (!Options.Distributed) {
    for (size_t I = 0; I < P->Params.size(); ++I)
      if (Kept(*P->Params[I])) {
        Keep(P->M[I]);
        Keep(P->V[I]);
      }
    return Arrays;
  }
  for (auto [B, Shard, M, V, Master] :
       {std::tuple{&R.dpCpBucket(), &R.dpCpShard(), &P->DpCpM, &P->DpCpV, &P->DpCpMaster},
        std::tuple{&R.edpBucket(), &R.edpShard(), &P->EdpM, &P->EdpV, &P->EdpMaster}}) {
    if (GradientReducer::inPlace(*B)) {
      // A group of one holds each slot's moments whole, at its offset.
      for (const GradBucket::Slot &S : B->Slots)
        if (Kept(*S.Param))
          for (std::vector<float> *Moment : {M, V})
            Arrays.push_back({Moment->data() + S.Offset, int64_t(S.Numel)});
    } else if (B->Group->device()) {
      for (std::vector<float> *A : {Shard, M, V, Master})
        Keep(*A);
    }
  }
  return Arrays;
}

std::vector<HostArray> AdamW::stateArrays() {
  std::vector<HostArray> State;
  auto Add = [&](std::vector<float> &A) {
    if (!A.empty())
      State.push_back({A.data(), int64_t(A.size())});
  };
  for (std::vector<float> *A : {&P->DpCpM, &P->DpCpV, &P->EdpM, &P->EdpV})
    Add(*A);
  for (size_t I = 0; I < P->M.size(); ++I) {
    Add(P->M[I]);
    Add(P->V[I]);
  }
  return State;
}

int64_t AdamW::stateElements() const {
  int64_t N = int64_t(P->DpCpM.size() + P->DpCpV.size() + P->EdpM.size() + P->EdpV.size());
  for (size_t I = 0; I < P->M.size(); ++I)
    N += int64_t(P->M[I].size() + P->V[I].size());
  return N;
}

std::vector<ParameterMoments> AdamW::moments() {
  for (const HostArray &A : stateArrays())
    P->Compute.hostReads(A.Data, A.Count);
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
  const std::vector<HostArray> State = stateArrays();
  for (const HostArray &A : State)
    P->Compute.hostReads(A.Data, A.Count);
  setMomentsOnHost(In);
  for (const HostArray &A : State)
    P->Compute.hostWrote(A.Data, A.Count);
  return true;
}

void AdamW::setMomentsOnHost(const std::vector<ParameterMoments> &In) {
  if (!Options.Distributed) {
    for (size_t I = 0; I < In.size(); ++I) {
      std::copy(In[I].ExpAvg.begin(), In[I].ExpAvg.end(), P->M[I].begin());
      std::copy(In[I].ExpAvgSq.begin(), In[I].ExpAvgSq.end(), P->V[I].begin());
    }
    return;
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
}

AdamWStepInfo AdamW::step() {
  ++Step;
  GradientReducer &R = P->Reducer;
  const GradientGroups &G = R.groups();
  const bool TpOwner = G.Tp->rank() == 0;
  ComputeBackend &Compute = P->Compute;

  // Reduce, and add up the squares of the gradient elements this rank owns.
  std::vector<ConstArray> Owned;
  if (Options.Distributed) {
    R.reduceScatter();
    // A tied copy's gradient is its original's: count it once (Megatron
    // leaves shared parameters out of the norm).
    auto Counted = [&](const Parameter &Param) {
      return !(Param.Kind == ParamKind::SequenceParallelReplicated && !TpOwner) && !Param.TiedCopy;
    };
    const GradBucket &D = R.dpCpBucket();
    if (GradientReducer::inPlace(D)) {
      for (const GradBucket::Slot &S : D.Slots)
        if (Counted(*S.Param))
          Owned.push_back({S.Param->Grad.data(), int64_t(S.Numel)});
    } else {
      size_t Begin = D.shardBegin(), End = Begin + D.shardSize();
      for (const GradBucket::Slot &S : D.Slots) {
        if (!Counted(*S.Param))
          continue;
        Overlap O = overlap(S, Begin, End);
        Owned.push_back({R.dpCpShard().data() + (O.Lo - Begin), int64_t(O.Hi - O.Lo)});
      }
    }
    if (GradientReducer::inPlace(R.edpBucket()))
      for (const GradBucket::Slot &S : R.edpBucket().Slots)
        Owned.push_back({S.Param->Grad.data(), int64_t(S.Numel)});
    else
      Owned.push_back({R.edpShard().data(), int64_t(R.edpShard().size())});
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
        Owned.push_back({Param->Grad.data(), Param->Grad.numel()});
    }
  }
  float Total = float(Compute.sumSquares(Owned));
  P->World.allReduceSum(&Total, 1);

  AdamWStepInfo Info;
  Info.Step = Step;
  Info.GradNorm = std::sqrt(double(std::max(Total, 0.0f)));
  if (Options.ClipGradNorm > 0) {
    double Coef = Options.ClipGradNorm / (Info.GradNorm + 1e-6);
    if (Coef < 1)
      Info.ClipScale = Coef;
  }

  // The step's scalars in double, rounded once to the fp32 of the update.
  AdamWArgs C;
  C.Beta1 = float(Options.Beta1);
  C.Beta2 = float(Options.Beta2);
  C.Eps = float(Options.Eps);
  C.StepSize = float(Options.Lr / (1 - std::pow(Options.Beta1, double(Step))));
  C.Bc2Sqrt = float(std::sqrt(1 - std::pow(Options.Beta2, double(Step))));
  C.Scale = float(Info.ClipScale);
  // The update of N elements of Param from Grad, with its moments.
  auto Update = [&](const Parameter *Param, float *Value, float *M, float *V, const float *Grad, size_t N) {
    AdamWArgs A = C;
    bool Decays = Options.DecayVectors || Param->Value.rank() >= 2;
    A.Decay = float(Decays ? Options.Lr * Options.WeightDecay : 0.0);
    A.Count = int64_t(N);
    A.Param = Value;
    A.M = M;
    A.V = V;
    A.Grad = Grad;
    Compute.adamW(A);
  };

  if (!Options.Distributed) {
    for (size_t I = 0; I < P->Params.size(); ++I) {
      Parameter *Param = P->Params[I];
      Update(Param, Param->Value.data(), P->M[I].data(), P->V[I].data(), Param->Grad.data(), P->M[I].size());
    }
    return Info;
  }

  // Distributed: update this rank's shard of each bucket's master values,
  // then all-gather the shards into every replica's parameters.
  auto UpdateShard = [&](GradBucket &B, const std::vector<float> &Grad, std::vector<float> &M, std::vector<float> &V,
                         std::vector<float> &Master) {
    if (B.empty())
      return;
    if (GradientReducer::inPlace(B)) {
      // A group of one holds the whole bucket: update the parameters in
      // place, with the same arithmetic, instead of through the master copy
      // and the group's all-gather.
      for (const GradBucket::Slot &S : B.Slots)
        Update(S.Param, S.Param->Value.data(), M.data() + S.Offset, V.data() + S.Offset, S.Param->Grad.data(), S.Numel);
      return;
    }
    // Master's padding past the last slot stays the zeros it was made with.
    size_t Begin = B.shardBegin(), Size = B.shardSize();
    for (const GradBucket::Slot &S : B.Slots) {
      Overlap O = overlap(S, Begin, Begin + Size);
      if (O.Lo == O.Hi)
        continue;
      size_t K = O.Lo - Begin, N = O.Hi - O.Lo;
      Compute.copy(S.Param->Value.data() + (O.Lo - S.Offset), Master.data() + K, int64_t(N));
      Update(S.Param, Master.data() + K, M.data() + K, V.data() + K, Grad.data() + K, N);
    }
    Compute.allGather(Master.data(), B.Flat.data(), int64_t(Size), *B.Group);
    B.unpackValues();
  };
  UpdateShard(R.dpCpBucket(), R.dpCpShard(), P->DpCpM, P->DpCpV, P->DpCpMaster);
  UpdateShard(R.edpBucket(), R.edpShard(), P->EdpM, P->EdpV, P->EdpMaster);
  return Info;
}

} // namespace moert
