//===- Target.cpp - The target table --------------------------------------===//
#include "moec/Target/Target.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace moec;

static const TargetInfo TargetTable[] = {
#define TARGET(Enum, Name, Kind, RunsValidateArgs, CoreMinor, Components, Sources)                                     \
  {Target::Enum, Name, Framework::Kind, RunsValidateArgs, CoreMinor, Components, Sources},
#include "moec/Target/Targets.def"
};
static_assert(std::size(TargetTable) == NumTargets, "one TargetInfo per Target");

llvm::ArrayRef<TargetInfo> moec::allTargets() { return TargetTable; }
const TargetInfo &moec::getTargetInfo(Target T) { return TargetTable[unsigned(T)]; }

llvm::Optional<Target> moec::lookupTarget(llvm::StringRef Name) {
  for (const TargetInfo &I : TargetTable)
    if (I.Name == Name)
      return I.T;
  return llvm::None;
}

std::string moec::knownTargetList() {
  return llvm::join(llvm::map_range(llvm::makeArrayRef(TargetTable), [](const TargetInfo &I) { return I.Name.str(); }),
                    ", ");
}
