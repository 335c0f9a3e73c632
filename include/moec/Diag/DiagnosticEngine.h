//===- DiagnosticEngine.h - The only path to the user -----------*- C++ -*-===//
//
// Every message moec shows a user is a Diagnostic declared in
// Diagnostics.def and reported through a DiagnosticEngine. The engine owns
// the policy (-Werror, -Wno-ID, @allow scopes, the error cap); renderers
// (DiagnosticRenderers.h) turn the final list into text, JSON or SARIF.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_DIAG_DIAGNOSTICENGINE_H
#define MOEC_DIAG_DIAGNOSTICENGINE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Optional.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SMLoc.h"
#include "llvm/Support/SourceMgr.h"
#include <fmt/format.h>
#include <map>
#include <string>
#include <tuple>
#include <vector>

// Let fmt print LLVM strings directly in diagnostic arguments.
template <> struct fmt::formatter<llvm::StringRef> : fmt::formatter<fmt::string_view> {
  template <typename Ctx> auto format(llvm::StringRef S, Ctx &C) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(S.data(), S.size()), C);
  }
};
template <> struct fmt::formatter<llvm::StringLiteral> : fmt::formatter<llvm::StringRef> {};

namespace moec {

/// A format string known only at run time (from Diagnostics.def).
inline auto runtimeFormat(llvm::StringRef S) { return fmt::runtime(fmt::string_view(S.data(), S.size())); }

namespace diag {
namespace detail {
enum ID : unsigned {
#define DIAG(Enum, Id, Severity, Format, Explanation) Enum,
#include "moec/Diag/Diagnostics.def"
  NumDiags
};

/// The highest positional argument a format uses, plus one ("{0} and {2}"
/// takes 3); "{{" is a literal brace. Evaluated at compile time.
constexpr unsigned formatArity(const char *F) {
  unsigned Arity = 0;
  for (unsigned I = 0; F[I]; ++I) {
    if (F[I] == '{' && F[I + 1] == '{') {
      ++I;
      continue;
    }
    if (F[I] != '{')
      continue;
    unsigned N = 0;
    unsigned J = I + 1;
    while (F[J] >= '0' && F[J] <= '9')
      N = N * 10 + unsigned(F[J++] - '0');
    if (J > I + 1 && N + 1 > Arity)
      Arity = N + 1;
  }
  return Arity;
}
constexpr unsigned Arities[] = {
#define DIAG(Enum, Id, Severity, Format, Explanation) formatArity(Format),
#include "moec/Diag/Diagnostics.def"
};
} // namespace detail

using ID = detail::ID;
constexpr unsigned NumDiags = detail::NumDiags;

/// A diagnostic named in code: diag::X is a Tag, so that report() knows at
/// compile time which message it formats and checks the argument count.
template <ID N> struct Tag {
  constexpr operator ID() const { return N; }
  static constexpr unsigned Arity = detail::Arities[N];
};
#define DIAG(Enum, Id, Severity, Format, Explanation) inline constexpr Tag<detail::Enum> Enum{};
#include "moec/Diag/Diagnostics.def"
enum NoteID : unsigned {
#define NOTE(Enum, Format) Enum,
#include "moec/Diag/Diagnostics.def"
  NumNotes
};
} // namespace diag

enum class Severity { Remark, Warning, Error };
llvm::StringRef severityName(Severity S);

struct DiagInfo {
  llvm::StringLiteral Id;
  Severity DefaultSeverity;
  llvm::StringLiteral Format;
  llvm::StringLiteral Explanation;
};
const DiagInfo &getDiagInfo(diag::ID ID);
llvm::ArrayRef<DiagInfo> allDiagInfos();
llvm::Optional<diag::ID> lookupDiagID(llvm::StringRef KebabID);
/// "; did you mean 'x'?" for the closest candidate within a small edit
/// distance, or "" when nothing is close. Used to build message arguments.
std::string didYouMean(llvm::StringRef Typo, llvm::ArrayRef<llvm::StringRef> Candidates);
llvm::Optional<llvm::StringRef> closestMatch(llvm::StringRef Typo, llvm::ArrayRef<llvm::StringRef> Candidates);

struct DiagNote {
  llvm::SMRange Range; // may be invalid: a note without a location
  std::string Message;
};

struct FixIt {
  llvm::SMRange Range;
  std::string Replacement;
};

struct Diagnostic {
  diag::ID ID;
  Severity Sev;
  std::string Message;
  llvm::SMRange Range;
  std::string Recipe; // the recipe (or sweep point) being checked, if any
  std::vector<DiagNote> Notes;
  std::vector<FixIt> FixIts;
  /// Every recipe or sweep point this diagnostic was reported for: a sweep
  /// checks each point, and the same message at the same place is shown once
  /// (Recipe then names the recipe, not a point), but only these points have it.
  std::vector<std::string> Points;
};

struct DiagnosticOptions {
  bool WarningsAsErrors = false;
  llvm::DenseSet<unsigned> Disabled; // diag::ID values silenced by -Wno-ID
  unsigned ErrorLimit = 50;
};

class DiagnosticEngine;

/// Adds notes and fix-its to the diagnostic just reported.
class DiagnosticBuilder {
public:
  /// Index is into Diags; a dropped diagnostic (past the error cap) has none.
  DiagnosticBuilder(std::vector<Diagnostic> *Diags, llvm::Optional<size_t> Index) : Diags(Diags), Index(Index) {}
  template <typename... Args> DiagnosticBuilder &note(diag::NoteID ID, llvm::SMRange Range, Args &&...A) {
    if (Index)
      (*Diags)[*Index].Notes.push_back({Range, fmt::format(runtimeFormat(noteFormat(ID)), std::forward<Args>(A)...)});
    return *this;
  }
  /// A fix-it replaces Range with Replacement; it is shown as a note too.
  DiagnosticBuilder &fixit(llvm::SMRange Range, std::string Replacement);

private:
  static llvm::StringRef noteFormat(diag::NoteID ID);
  std::vector<Diagnostic> *Diags;
  llvm::Optional<size_t> Index;
};

class DiagnosticEngine {
public:
  explicit DiagnosticEngine(llvm::SourceMgr &SM, DiagnosticOptions Opts = {}) : SM(SM), Opts(std::move(Opts)) {}

  template <typename... Args> DiagnosticBuilder report(diag::ID ID, llvm::SMRange Range, Args &&...A) {
    return add(ID, Range, fmt::format(runtimeFormat(getDiagInfo(ID).Format), std::forward<Args>(A)...));
  }
  /// A diagnostic named in code: its message's argument count is checked
  /// when this compiles.
  template <diag::ID N, typename... Args> DiagnosticBuilder report(diag::Tag<N> T, llvm::SMRange Range, Args &&...A) {
    static_assert(sizeof...(Args) == diag::Tag<N>::Arity, "wrong number of arguments for this diagnostic's message");
    return report(diag::ID(T), Range, std::forward<Args>(A)...);
  }
  /// Reports with a severity other than the ID's default: a rule's severity
  /// follows the target it is checked for (RuleTargets.def).
  template <diag::ID N, typename... Args> DiagnosticBuilder report(diag::Tag<N> T, llvm::SMLoc Loc, Args &&...A) {
    return report(T, llvm::SMRange(Loc, Loc), std::forward<Args>(A)...);
  }
  template <typename... Args> DiagnosticBuilder reportAs(diag::ID ID, Severity Sev, llvm::SMRange Range, Args &&...A) {
    return add(ID, Range, fmt::format(runtimeFormat(getDiagInfo(ID).Format), std::forward<Args>(A)...), Sev);
  }
  template <typename... Args> DiagnosticBuilder report(diag::ID ID, llvm::SMLoc Loc, Args &&...A) {
    return report(ID, llvm::SMRange(Loc, Loc), std::forward<Args>(A)...);
  }

  /// Sets the recipe name attached to the diagnostics reported from now on.
  void setRecipeContext(std::string Name) { RecipeContext = std::move(Name); }

  /// Silences warnings and remarks with ID inside Scope (from @allow).
  void addAllowScope(diag::ID ID, llvm::SMRange Scope, llvm::SMRange Annotation);

  /// Applies @allow scopes, -Wno-ID and -Werror, drops duplicates (a sweep
  /// reports the same problem once per point), and sorts by location.
  /// Returns the final list; call once, after all reporting is done.
  const std::vector<Diagnostic> &finish();

  bool hasErrors() const { return NumErrors > 0; }
  unsigned errorCount() const { return NumErrors; }
  llvm::SourceMgr &getSourceMgr() { return SM; }
  const DiagnosticOptions &getOptions() const { return Opts; }

private:
  DiagnosticBuilder add(diag::ID ID, llvm::SMRange Range, std::string Message,
                        llvm::Optional<Severity> Sev = llvm::None);

  struct AllowScope {
    diag::ID ID;
    llvm::SMRange Scope;
    llvm::SMRange Annotation;
    bool Used = false;
  };

  llvm::SourceMgr &SM;
  DiagnosticOptions Opts;
  std::vector<Diagnostic> Diags;
  std::vector<AllowScope> Allows;
  std::string RecipeContext;
  unsigned NumErrors = 0;
  unsigned NumDroppedErrors = 0;
  /// Each distinct error (ID, range, message), and whether it is shown: the
  /// cap counts distinct errors, as a sweep reports one once per point.
  std::map<std::tuple<unsigned, const char *, const char *, std::string>, bool> ErrorsSeen;
  unsigned NumShownErrors = 0;
  bool Finished = false;
};

} // namespace moec

#endif
