//===- parallel/dp/GradientReducer.cpp - Bucketed gradient reduction ------===//
#include "parallel/dp/GradientReducer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moert {

namespace {

[[noreturn]] void fail(const std::string &Message) {
  std::fprintf(stderr, "moert: gradient reducer: %s\n", Message.c_str());
  std::abort();
}

void addSlot(GradBucket &B, Parameter *P) {
  size_t N = size_t(P->Value.numel());
  B.Slots.push_back({P, B.Numel, N});
  B.Numel += N;
}

void finishLayout(GradBucket &B, Communicator *Group, ComputeBackend &Compute) {
  if (!Group)
    fail("a gradient group is null (use a group of one)");
  B.Group = Group;
  B.Compute = &Compute;
  size_t Size = size_t(Group->size());
  B.Padded = (B.Numel + Size - 1) / Size * Size;
  B.Flat.assign(B.Padded, 0.0f);
}

} // namespace

void GradBucket::packGrads() {
  for (const Slot &S : Slots)
    Compute->copy(S.Param->Grad.data(), Flat.data() + S.Offset, int64_t(S.Numel));
  if (Padded > Numel)
    Compute->zero(Flat.data() + Numel, int64_t(Padded - Numel));
}

void GradBucket::unpackGrads() {
  for (const Slot &S : Slots)
    Compute->copy(Flat.data() + S.Offset, S.Param->Grad.data(), int64_t(S.Numel));
}

void GradBucket::packValues() {
  for (const Slot &S : Slots)
    Compute->copy(S.Param->Value.data(), Flat.data() + S.Offset, int64_t(S.Numel));
  if (Padded > Numel)
    Compute->zero(Flat.data() + Numel, int64_t(Padded - Numel));
}

void GradBucket::unpackValues() {
  for (const Slot &S : Slots)
    Compute->copy(Flat.data() + S.Offset, S.Param->Value.data(), int64_t(S.Numel));
}

GradientReducer::GradientReducer(std::vector<Parameter *> Params, const GradientGroups &Groups, ComputeBackend &Compute)
    : Groups(Groups) {
  for (Parameter *P : Params) {
    if (P->Grad.numel() != P->Value.numel())
      fail("parameter '" + P->Name + "' has " + std::to_string(P->Value.numel()) + " values but " +
           std::to_string(P->Grad.numel()) + " gradient elements");
    if (P->Value.numel() == 0)
      continue;
    switch (P->Kind) {
    case ParamKind::Dense:
      addSlot(DpCp, P);
      break;
    case ParamKind::SequenceParallelReplicated:
      addSlot(Tp, P);
      addSlot(DpCp, P);
      break;
    case ParamKind::Expert:
      addSlot(Edp, P);
      break;
    }
  }
  finishLayout(Tp, Groups.Tp, Compute);
  finishLayout(DpCp, Groups.DpCp, Compute);
  finishLayout(Edp, Groups.Edp, Compute);
  if (!inPlace(DpCp))
    DpCpShard.assign(DpCp.shardSize(), 0.0f);
  if (!inPlace(Edp))
    EdpShard.assign(Edp.shardSize(), 0.0f);
}

namespace {
/// One all-reduce of a bucket, skipped for empty buckets and groups of one.
void allReduceBucket(GradBucket &B) {
  if (B.empty() || B.Group->size() == 1)
    return;
  B.packGrads();
  B.Compute->allReduceSum(B.Flat.data(), int64_t(B.Numel), *B.Group);
  B.unpackGrads();
}

void reduceScatterBucket(GradBucket &B, std::vector<float> &Shard) {
  // A group of one: the sum is this rank's gradient, read where it lies
  // (on the compute backend, where resident) instead of copied.
  if (GradientReducer::inPlace(B) || B.empty())
    return;
  B.packGrads();
  B.Compute->reduceScatterSum(B.Flat.data(), Shard.data(), int64_t(B.shardSize()), *B.Group);
}
} // namespace

void GradientReducer::allReduce() {
  // tp first: the dp-cp sum of a SequenceParallelReplicated gradient must
  // start from the whole sequence's gradient.
  allReduceBucket(Tp);
  allReduceBucket(DpCp);
  allReduceBucket(Edp);
}

void GradientReducer::reduceScatter() {
  allReduceBucket(Tp);
  reduceScatterBucket(DpCp, DpCpShard);
  reduceScatterBucket(Edp, EdpShard);
}

} // namespace moert
