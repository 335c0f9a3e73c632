//===- Target.h - The Megatron release a recipe is checked for ---*- C++ -*-===//
//
// Users run one container, one version: which checks Megatron applies at
// start-up, what the recipe's defaults mean and which configuration keys
// an export may write all follow the target. Targets are declared once in
// Targets.def; everything here is derived from that table.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_TARGET_TARGET_H
#define MOEC_TARGET_TARGET_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/Optional.h"
#include "llvm/ADT/StringRef.h"
#include <string>

namespace moec {

enum class Target : unsigned {
#define TARGET(Enum, Name, Framework, RunsValidateArgs, CoreMinor, Components, Sources) Enum,
#include "moec/Target/Targets.def"
};
constexpr unsigned NumTargets = 0
#define TARGET(Enum, Name, Framework, RunsValidateArgs, CoreMinor, Components, Sources) +1
#include "moec/Target/Targets.def"
    ;

enum class Framework { Bridge, MegatronLM };

struct TargetInfo {
  Target T;
  llvm::StringLiteral Name;
  Framework Kind;
  bool RunsValidateArgs;
  unsigned CoreMinor;
  llvm::StringLiteral Components;
  llvm::StringLiteral Sources;
};

llvm::ArrayRef<TargetInfo> allTargets();
const TargetInfo &getTargetInfo(Target T);
inline llvm::StringRef targetName(Target T) { return getTargetInfo(T).Name; }
/// The target of a recipe that names none: the first of Targets.def.
constexpr Target DefaultTarget = Target(0);
llvm::Optional<Target> lookupTarget(llvm::StringRef Name);
/// "megatron-bridge@main, megatron-bridge@0.3.1, ..." for messages.
std::string knownTargetList();

} // namespace moec

#endif
