//===- DiagnosticEngine.cpp -----------------------------------------------===//
#include "moec/Diag/DiagnosticEngine.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include <algorithm>
#include <map>
#include <tuple>

using namespace moec;

static const DiagInfo DiagTable[] = {
#define DIAG(Enum, Id, Sev, Format, Explanation) {Id, Severity::Sev, Format, Explanation},
#include "moec/Diag/Diagnostics.def"
};

static const llvm::StringLiteral NoteTable[] = {
#define NOTE(Enum, Format) Format,
#include "moec/Diag/Diagnostics.def"
};

llvm::StringRef moec::severityName(Severity S) {
  switch (S) {
  case Severity::Remark:
    return "remark";
  case Severity::Warning:
    return "warning";
  case Severity::Error:
    return "error";
  }
  llvm_unreachable("unknown severity");
}

const DiagInfo &moec::getDiagInfo(diag::ID ID) { return DiagTable[ID]; }
llvm::ArrayRef<DiagInfo> moec::allDiagInfos() { return DiagTable; }

llvm::Optional<diag::ID> moec::lookupDiagID(llvm::StringRef KebabID) {
  static const llvm::StringMap<diag::ID> Index = [] {
    llvm::StringMap<diag::ID> M;
    for (unsigned I = 0; I < diag::NumDiags; ++I)
      M[DiagTable[I].Id] = diag::ID(I);
    return M;
  }();
  auto It = Index.find(KebabID);
  if (It == Index.end())
    return llvm::None;
  return It->second;
}

llvm::Optional<llvm::StringRef> moec::closestMatch(llvm::StringRef Typo, llvm::ArrayRef<llvm::StringRef> Candidates) {
  for (llvm::StringRef C : Candidates)
    if (C.equals_insensitive(Typo) && C != Typo)
      return C; // a case slip: gb for GB
  llvm::Optional<llvm::StringRef> Best;
  // A prefix of a longer name (h100 for h100_sxm, fp8.block) names the
  // intended entry better than a short edit distance to another one (b200).
  if (Typo.size() >= 3)
    for (llvm::StringRef C : Candidates)
      if (C.startswith(Typo) && C != Typo && (!Best || C.size() < Best->size()))
        Best = C;
  if (Best)
    return Best;
  // Allow about one edit in three characters, as clang's typo correction does.
  unsigned BestDistance = std::max<unsigned>(1, (Typo.size() + 2) / 3) + 1;
  for (llvm::StringRef C : Candidates) {
    unsigned D = Typo.edit_distance(C, /*AllowReplacements=*/true, BestDistance);
    if (D < BestDistance || (D == BestDistance - 1 && !Best)) {
      if (D < BestDistance) {
        BestDistance = D;
        Best = C;
      }
    }
  }
  if (!Best && Typo.size() >= 4) {
    // A fragment of a longer name: attn for core_attn.
    for (llvm::StringRef C : Candidates)
      if (C.size() > Typo.size() && C.contains(Typo)) {
        Best = C;
        break;
      }
  }
  if (Best && *Best == Typo)
    return llvm::None;
  return Best;
}

std::string moec::didYouMean(llvm::StringRef Typo, llvm::ArrayRef<llvm::StringRef> Candidates) {
  if (auto Best = closestMatch(Typo, Candidates))
    return fmt::format("; did you mean '{}'?", Best->str());
  return "";
}

llvm::StringRef DiagnosticBuilder::noteFormat(diag::NoteID ID) { return NoteTable[ID]; }

DiagnosticBuilder &DiagnosticBuilder::fixit(llvm::SMRange Range, std::string Replacement) {
  if (Index) {
    Diagnostic &D = (*Diags)[*Index];
    D.Notes.push_back({Range, fmt::format(runtimeFormat(noteFormat(diag::note_fixit)), Replacement)});
    D.FixIts.push_back({Range, std::move(Replacement)});
  }
  return *this;
}

DiagnosticBuilder DiagnosticEngine::add(diag::ID ID, llvm::SMRange Range, std::string Message,
                                        llvm::Optional<Severity> Sev) {
  Severity Level = Sev.getValueOr(getDiagInfo(ID).DefaultSeverity);
  if (Level == Severity::Error) {
    ++NumErrors;
    auto [It, New] = ErrorsSeen.try_emplace({ID, Range.Start.getPointer(), Range.End.getPointer(), Message}, true);
    // --error-limit keeps the first errors by position (finish()); this
    // only bounds what a runaway input can make the engine hold.
    constexpr unsigned HeldErrorCap = 100000;
    if (New && NumShownErrors >= HeldErrorCap) {
      It->second = false;
      ++NumDroppedErrors;
    } else if (New) {
      ++NumShownErrors;
    }
    if (!It->second)
      return DiagnosticBuilder(&Diags, llvm::None);
  }
  Diags.push_back({ID, Level, std::move(Message), Range, RecipeContext, {}, {}, {}});
  return DiagnosticBuilder(&Diags, Diags.size() - 1);
}

void DiagnosticEngine::addAllowScope(diag::ID ID, llvm::SMRange Scope, llvm::SMRange Annotation) {
  Allows.push_back({ID, Scope, Annotation});
}

static bool contains(llvm::SMRange Scope, llvm::SMLoc L) {
  return Scope.isValid() && L.isValid() && Scope.Start.getPointer() <= L.getPointer() &&
         L.getPointer() <= Scope.End.getPointer();
}

const std::vector<Diagnostic> &DiagnosticEngine::finish() {
  if (Finished)
    return Diags;
  Finished = true;

  std::vector<Diagnostic> Kept;
  Kept.reserve(Diags.size());
  for (Diagnostic &D : Diags) {
    if (D.Sev != Severity::Error) {
      if (Opts.Disabled.count(D.ID))
        continue;
      bool Allowed = false;
      for (AllowScope &A : Allows)
        if (A.ID == D.ID && contains(A.Scope, D.Range.Start)) {
          A.Used = true;
          Allowed = true;
        }
      if (Allowed)
        continue;
      if (Opts.WarningsAsErrors && D.Sev == Severity::Warning) {
        D.Sev = Severity::Error;
        ++NumErrors;
      }
    }
    Kept.push_back(std::move(D));
  }
  for (const AllowScope &A : Allows)
    if (!A.Used && !Opts.Disabled.count(diag::allow_unused))
      Kept.push_back({diag::allow_unused,
                      Severity::Remark,
                      fmt::format(runtimeFormat(getDiagInfo(diag::allow_unused).Format), getDiagInfo(A.ID).Id.str()),
                      A.Annotation,
                      "",
                      {},
                      {},
                      {}});

  // Stable order: by buffer position where known (buffers are compared by
  // address, which groups each file), keeping report order otherwise.
  std::stable_sort(Kept.begin(), Kept.end(), [&](const Diagnostic &A, const Diagnostic &B) {
    unsigned BufA = A.Range.Start.isValid() ? SM.FindBufferContainingLoc(A.Range.Start) : 0;
    unsigned BufB = B.Range.Start.isValid() ? SM.FindBufferContainingLoc(B.Range.Start) : 0;
    if (BufA != BufB)
      return BufA < BufB;
    return A.Range.Start.getPointer() < B.Range.Start.getPointer();
  });
  // A sweep checks every point; the same message at the same place is shown
  // once, for the recipe rather than a point when several points share it.
  std::map<std::tuple<unsigned, const char *, const char *, std::string>, size_t> Seen;
  std::vector<Diagnostic> Unique;
  for (Diagnostic &D : Kept) {
    auto [It, Inserted] =
        Seen.try_emplace({D.ID, D.Range.Start.getPointer(), D.Range.End.getPointer(), D.Message}, Unique.size());
    if (Inserted) {
      if (!D.Recipe.empty())
        D.Points.push_back(D.Recipe);
      Unique.push_back(std::move(D));
      continue;
    }
    Diagnostic &First = Unique[It->second];
    if (!D.Recipe.empty() && (First.Points.empty() || First.Points.back() != D.Recipe))
      First.Points.push_back(D.Recipe);
    if (First.Recipe != D.Recipe)
      First.Recipe = llvm::StringRef(First.Recipe).split('[').first.str();
  }
  Kept = std::move(Unique);
  // Text output names the failing point, as JSON's `recipe` does.
  for (Diagnostic &D : Kept)
    if (llvm::StringRef(D.Recipe).endswith("]"))
      D.Notes.push_back({llvm::SMRange(), fmt::format(runtimeFormat(NoteTable[diag::note_in_point]), D.Recipe)});

  // The first ErrorLimit errors in file order are shown, the others counted.
  if (Opts.ErrorLimit) {
    unsigned Errors = 0;
    std::vector<Diagnostic> Limited;
    Limited.reserve(Kept.size());
    for (Diagnostic &D : Kept) {
      if (D.Sev == Severity::Error && ++Errors > Opts.ErrorLimit) {
        ++NumDroppedErrors;
        continue;
      }
      Limited.push_back(std::move(D));
    }
    Kept = std::move(Limited);
  }
  if (NumDroppedErrors) {
    Kept.push_back({diag::too_many_errors,
                    Severity::Error,
                    fmt::format(runtimeFormat(getDiagInfo(diag::too_many_errors).Format), Opts.ErrorLimit),
                    llvm::SMRange(),
                    "",
                    {},
                    {},
                    {}});
    Kept.back().Notes.push_back(
        {llvm::SMRange(), fmt::format(runtimeFormat(NoteTable[diag::note_errors_capped]), NumDroppedErrors)});
  }
  Diags = std::move(Kept);
  return Diags;
}
