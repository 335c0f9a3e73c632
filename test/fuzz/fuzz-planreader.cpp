//===- fuzz-planreader.cpp - The runtime's plan reader --------------------===//
//
// parsePlan (readPlan without the file) on any text: a LaunchPlan that
// passed validation, or an error naming the field. A plan that validates
// must be safe to index the way the runtime does (stage(), Ranks, Groups).
//
//===----------------------------------------------------------------------===//
#include "moec/PlanFormat/PlanReader.h"

#include "llvm/Support/raw_ostream.h"
#include <cstdlib>

using namespace moec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  llvm::StringRef Text(reinterpret_cast<const char *>(Data), Size);
  llvm::Expected<LaunchPlan> P = parsePlan(Text, "fuzz.toml");
  if (!P) {
    if (llvm::toString(P.takeError()).empty())
      abort();
    return 0;
  }
  // What the runtime relies on after a successful read.
  const LaunchParallel &L = P->Parallel;
  if (int64_t(P->Ranks.size()) != P->WorldSize || int64_t(P->Schedule.size()) != L.PP ||
      int64_t(P->Stages.size()) != L.PP * L.VPP)
    abort();
  for (int64_t Chunk = 0; Chunk < L.VPP; ++Chunk)
    for (int64_t Pp = 0; Pp < L.PP; ++Pp)
      (void)P->stage(Pp, Chunk).DecoderLayers;
  for (const LaunchRank &R : P->Ranks)
    for (const auto &[Kind, Index] : R.Groups) {
      auto It = P->Groups.find(Kind);
      if (It == P->Groups.end() || Index < 0 || size_t(Index) >= It->second.size())
        abort();
    }
  return 0;
}
