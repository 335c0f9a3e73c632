//===- Navigation.cpp - Hover and go-to-definition ------------------------===//
//
// Both walk the main file's syntax tree to the thing under the cursor: a
// definition's name, its `extends` target, an entry's path (a field or a
// section), a name in an entry's value, or an import.
//
//===----------------------------------------------------------------------===//
#include "Features.h"

#include "moec/Rules/RuleEngine.h"
#include "moec/Sema/Schema.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include <cfloat>
#include <fmt/format.h>

using namespace moec;
using namespace moec::lsp;
namespace json = llvm::json;
using llvm::SMRange;
using llvm::StringRef;

namespace {

bool within(SMRange R, const char *P) {
  return R.Start.isValid() && R.End.isValid() && R.Start.getPointer() <= P && P <= R.End.getPointer();
}

std::string joinPath(StringRef Prefix, llvm::ArrayRef<std::string> Parts) {
  std::string Path = Prefix.str();
  for (const std::string &Part : Parts)
    Path += (Path.empty() ? "" : ".") + Part;
  return Path;
}

/// The innermost entry whose range holds P, with the section path around it.
struct EntryHit {
  const ast::Entry *E = nullptr;
  std::string Prefix;
};

void findEntry(const std::vector<ast::Entry> &Entries, const std::string &Prefix, const char *P, EntryHit &Hit) {
  for (const ast::Entry &E : Entries) {
    if (!within(E.Range, P))
      continue;
    Hit = {&E, Prefix};
    if (E.isSection())
      findEntry(E.Children, joinPath(Prefix, E.Path), P, Hit);
    return;
  }
}

/// How many components of E's path reach the one under P (`parallel.tp`
/// with the cursor on `parallel` is 1); the range of that component.
std::pair<size_t, SMRange> pathComponentAt(const ast::Entry &E, const char *P) {
  const char *Start = E.PathRange.Start.getPointer(), *End = E.PathRange.End.getPointer();
  size_t Index = 0;
  const char *I = Start;
  std::pair<size_t, SMRange> Best{E.Path.size(), E.PathRange};
  while (I < End) {
    if (!llvm::isAlnum(*I) && *I != '_') {
      ++I;
      continue;
    }
    const char *WordStart = I;
    while (I < End && (llvm::isAlnum(*I) || *I == '_'))
      ++I;
    ++Index;
    if (WordStart <= P && P <= I)
      return {std::min(Index, E.Path.size()),
              SMRange(llvm::SMLoc::getFromPointer(WordStart), llvm::SMLoc::getFromPointer(I))};
  }
  return Best;
}

/// The name (a one-part path) at P inside an expression.
const ast::PathExpr *nameAt(const ast::Expr *E, const char *P) {
  if (!E || !within(E->getRange(), P))
    return nullptr;
  if (auto *Path = llvm::dyn_cast<ast::PathExpr>(E))
    return Path->Parts.size() == 1 ? Path : nullptr;
  if (auto *List = llvm::dyn_cast<ast::ListExpr>(E)) {
    for (const ast::ExprPtr &El : List->Elements)
      if (const ast::PathExpr *Found = nameAt(El.get(), P))
        return Found;
  } else if (auto *Call = llvm::dyn_cast<ast::CallExpr>(E)) {
    for (const ast::Argument &Arg : Call->Args)
      if (const ast::PathExpr *Found = nameAt(Arg.Value.get(), P))
        return Found;
  } else if (auto *U = llvm::dyn_cast<ast::UnaryExpr>(E)) {
    return nameAt(U->Operand.get(), P);
  } else if (auto *B = llvm::dyn_cast<ast::BinaryExpr>(E)) {
    if (const ast::PathExpr *Found = nameAt(B->LHS.get(), P))
      return Found;
    return nameAt(B->RHS.get(), P);
  }
  return nullptr;
}

bool isReferenceType(FieldType T) {
  return T == FieldType::ModelRef || T == FieldType::GpuRef || T == FieldType::ClusterRef;
}

StringRef bufferName(const Analysis &A, const ast::Definition &D) {
  const llvm::SourceMgr &SM = A.sourceMgr();
  unsigned Buf = SM.FindBufferContainingLoc(D.NameRange.Start);
  return Buf ? SM.getMemoryBuffer(Buf)->getBufferIdentifier() : StringRef();
}

bool isBuiltin(const Analysis &A, const ast::Definition &D) { return bufferName(A, D).startswith("<builtin>/"); }

/// The comment block right above a definition (the catalog documents each
/// model and GPU there), without the '#'.
std::string leadingComment(const Analysis &A, const ast::Definition &D) {
  const llvm::SourceMgr &SM = A.sourceMgr();
  unsigned Buf = SM.FindBufferContainingLoc(D.Range.Start);
  if (!Buf)
    return "";
  StringRef Text = SM.getMemoryBuffer(Buf)->getBuffer();
  size_t Pos = D.Range.Start.getPointer() - Text.data();
  size_t LineStart = Text.rfind('\n', Pos == 0 ? 0 : Pos - 1);
  if (LineStart == StringRef::npos || Pos == 0)
    return "";
  std::vector<std::string> Lines;
  while (LineStart != StringRef::npos && LineStart > 0 && Lines.size() < 12) {
    size_t Prev = Text.rfind('\n', LineStart - 1);
    size_t From = Prev == StringRef::npos ? 0 : Prev + 1;
    StringRef Line = Text.slice(From, LineStart).trim();
    if (!Line.startswith("#"))
      break;
    Lines.push_back(Line.drop_front().trim().str());
    if (Prev == StringRef::npos)
      break;
    LineStart = Prev;
  }
  std::reverse(Lines.begin(), Lines.end());
  return llvm::join(Lines, "\n");
}

std::string whereDefined(const Analysis &A, const ast::Definition &D) {
  std::string Where = A.describe(D.NameRange.Start);
  return isBuiltin(A, D) ? "built in, " + Where : Where;
}

std::string definitionSummary(const Analysis &A, const ast::Definition &D) {
  std::string S = fmt::format("**{} `{}`**", ast::defKindName(D.Kind).str(), D.Name);
  if (!D.Base.empty())
    S += fmt::format(" extends `{}`", D.Base);
  S += fmt::format(" — {}", whereDefined(A, D));
  std::string Comment = leadingComment(A, D);
  if (!Comment.empty())
    S += "\n\n" + Comment;
  // A user's definition: what it sets itself, then (models and GPUs) the
  // figures it ends up with after `extends`.
  if (!isBuiltin(A, D) && !D.Entries.empty()) {
    std::vector<std::string> Own;
    for (const ast::Entry &E : D.Entries)
      Own.push_back("`" + A.sourceText(E.Range) + "`");
    S += fmt::format("\n\nSets {}{}", llvm::join(Own, ", "), D.Base.empty() ? "" : " (over its base)");
  }
  std::string Figures;
  llvm::raw_string_ostream OS(Figures);
  if (const ModelSpec *M = A.sema().loweredModel(&D))
    printModelSummary(*M, OS);
  else if (const GpuSpec *G = A.sema().loweredGpu(&D))
    printGpuSummary(*G, OS);
  else if ((D.Kind == ast::DefKind::Model || D.Kind == ast::DefKind::Gpu) && !isBuiltin(A, D))
    S += "\n\nIts values are unknown: the definition did not check.";
  if (!OS.str().empty())
    S += "\n\n```\n" + OS.str() + "\n```";
  return S;
}

std::string presenceText(const FieldSpec &F) {
  switch (F.Req) {
  case Presence::Required:
    return "required";
  case Presence::RequiredInSection:
    return "required once its section is given";
  case Presence::Optional:
    return "optional";
  case Presence::Default:
    return fmt::format("default `{}`", F.DefaultText.str());
  case Presence::Derived:
    return fmt::format("derived when unset: `{}`", F.DefaultText.str());
  }
  return "";
}

/// Where the value of Path in recipe R came from.
std::string provenanceText(const Analysis &A, const Recipe &R, StringRef Path, const FieldSpec &F) {
  const Provenance &O = R.origin(Path);
  if (O.IsDefault || !O.Range.Start.isValid()) {
    if (F.Req == Presence::Default)
      return fmt::format("`{}` (the default)", F.DefaultText.str());
    if (F.Req == Presence::Derived)
      return fmt::format("derived: `{}`", F.DefaultText.str());
    return "not set";
  }
  std::string S = fmt::format("`{}`", A.sourceText(O.Range));
  if (O.Chain.size() > 1)
    S += fmt::format(", set in recipe `{}` ({}) and inherited through {}", O.Chain.front(), A.describe(O.Range.Start),
                     llvm::join(O.Chain.begin() + 1, O.Chain.end(), " -> "));
  else
    S += fmt::format(", set at {}", A.describe(O.Range.Start));
  return S;
}

/// AsSection: the path is written as a section (`cluster { ... }`), which
/// matters for a name that is both a field and a section.
std::string fieldHover(const Analysis &A, const ast::Definition &Def, StringRef Path, bool AsSection = false) {
  const FieldSpec *F = AsSection && isSection(Def.Kind, Path) ? nullptr : lookupField(Def.Kind, Path);
  if (!F) {
    if (!isSection(Def.Kind, Path))
      return "";
    std::vector<std::string> Fields;
    for (const FieldSpec &S : schemaFor(Def.Kind))
      if (StringRef(S.Path).startswith((Path + ".").str()))
        Fields.push_back("`" + StringRef(S.Path).drop_front(Path.size() + 1).str() + "`");
    std::string S = fmt::format("**`{}`** — section of a {}\n\nFields: {}", Path.str(),
                                ast::defKindName(Def.Kind).str(), llvm::join(Fields, ", "));
    // In a recipe, the values the section ends up with and who set them.
    const Recipe *R = nullptr;
    for (const Recipe &Candidate : A.recipes())
      if (Candidate.Name == Def.Name && !R)
        R = &Candidate;
    if (Def.Kind != ast::DefKind::Recipe || !R)
      return S;
    S +=
        fmt::format("\n\n---\nIn recipe `{}`{}:", R->PointName, R->PointName != Def.Name ? " (first sweep point)" : "");
    for (const FieldSpec &F : schemaFor(Def.Kind))
      if (StringRef(F.Path).startswith((Path + ".").str()) && !R->origin(F.Path).IsDefault &&
          R->origin(F.Path).Range.Start.isValid())
        S += fmt::format("\n- `{}`: {}", F.Path.str(), provenanceText(A, *R, F.Path, F));
    return S;
  }
  std::string S = fmt::format("**`{}`** — {} field, {}; {}\n\n{}", Path.str(), ast::defKindName(Def.Kind).str(),
                              describeType(*F), presenceText(*F), F->Doc.str());
  bool Numeric = F->Type == FieldType::Count || F->Type == FieldType::Number || F->Type == FieldType::CountList;
  if (Numeric && (F->Min > 0 || F->Max < DBL_MAX)) {
    if (F->Max < DBL_MAX)
      S += fmt::format("\n\nRange: {} to {}", F->Min, F->Max);
    else
      S += fmt::format("\n\nRange: at least {}", F->Min);
  }
  if (Def.Kind != ast::DefKind::Recipe)
    return S;
  // The value and its provenance, in each sweep point of this recipe.
  std::vector<std::string> Seen;
  unsigned Points = 0;
  for (const Recipe &R : A.recipes()) {
    if (R.Name != Def.Name)
      continue;
    ++Points;
    std::string P = provenanceText(A, R, Path, *F);
    if (llvm::find(Seen, P) == Seen.end())
      Seen.push_back(P);
  }
  if (Seen.empty())
    return S + fmt::format("\n\n---\nRecipe `{}` did not check, so its values are unknown.", Def.Name);
  if (Seen.size() == 1)
    return S + fmt::format("\n\n---\nValue in recipe `{}`: {}", Def.Name, Seen.front());
  S += fmt::format("\n\n---\nValues across the {} sweep points of `{}`:", Points, Def.Name);
  for (size_t I = 0; I < Seen.size() && I < 10; ++I)
    S += "\n- " + Seen[I];
  return S;
}

std::string recipeHover(Analysis &A, const ast::Definition &Def) {
  std::string S = definitionSummary(A, Def);
  unsigned Points = 0;
  const Recipe *First = nullptr;
  for (const Recipe &R : A.recipes())
    if (R.Name == Def.Name && Points++ == 0)
      First = &R;
  if (!First)
    return S;
  std::string Dump;
  llvm::raw_string_ostream OS(Dump);
  printRecipe(*First, A.sourceMgr(), OS);
  OS.flush();
  if (Points > 1)
    S += fmt::format("\n\n{} sweep points; the first:", Points);
  return S + "\n\n```\n" + Dump + "```";
}

json::Value hoverResult(const Analysis &A, std::string Markdown, SMRange R) {
  if (Markdown.empty())
    return nullptr;
  json::Object H{{"contents", json::Object{{"kind", "markdown"}, {"value", jsonString(Markdown)}}}};
  if (auto Range = A.mainRange(R))
    H["range"] = rangeJSON(Range->first, Range->second);
  return H;
}

/// Over `@allow(ID, reason = "...")`: what moec explain says about ID.
/// Found tells the caller the cursor was on an annotation.
json::Value annotationHover(const Analysis &A, const std::vector<ast::Annotation> &As, const char *P, bool &Found) {
  for (const ast::Annotation &An : As) {
    if (!within(An.Range, P))
      continue;
    Found = true;
    if (An.Name != "allow")
      return nullptr;
    for (const ast::Argument &Arg : An.Args) {
      if (!Arg.Name.empty() || !Arg.Value)
        continue;
      // IDs are kebab-case, which parses as a subtraction: take the text.
      std::string Id;
      if (auto *S = llvm::dyn_cast<ast::StringLit>(Arg.Value.get()))
        Id = S->Value;
      else
        for (char C : A.sourceText(Arg.Value->getRange()))
          if (!llvm::isSpace(C))
            Id.push_back(C);
      llvm::Optional<diag::ID> ID = lookupDiagID(Id);
      if (!ID)
        return nullptr;
      const DiagInfo &Info = getDiagInfo(*ID);
      std::string Text = fmt::format("**`{}`** ({})\n\n{}", Info.Id.str(), severityName(Info.DefaultSeverity).str(),
                                     Info.Explanation.str());
      if (StringRef Source = ruleSource(*ID); !Source.empty())
        Text += fmt::format("\n\nSource: {}", Source.str());
      return hoverResult(A, Text, Arg.Value->getRange());
    }
    return nullptr;
  }
  return nullptr;
}

} // namespace

const ast::Definition *moec::lsp::findDefinition(const Analysis &A, StringRef Name, const ast::Definition *Exclude) {
  const ast::Definition *Builtin = nullptr;
  for (const Sema::DefinitionRef &D : A.sema().definitions()) {
    if (D.AST->Name != Name || D.AST == Exclude)
      continue;
    if (!D.Builtin)
      return D.AST;
    Builtin = D.AST;
  }
  return Builtin;
}

json::Value moec::lsp::hoverAt(Analysis &A, size_t Offset) {
  const ast::File *F = A.file();
  if (!F)
    return nullptr;
  const char *P = A.pointerAt(Offset);
  for (const ast::Definition &Def : F->Definitions) {
    bool OnAnnotation = false;
    json::Value Annotation = annotationHover(A, Def.Annotations, P, OnAnnotation);
    if (OnAnnotation)
      return Annotation;
    if (within(Def.NameRange, P)) {
      std::string Text = Def.Kind == ast::DefKind::Recipe ? recipeHover(A, Def) : definitionSummary(A, Def);
      return hoverResult(A, Text, Def.NameRange);
    }
    if (!Def.Base.empty() && within(Def.BaseRange, P)) {
      const ast::Definition *Base = findDefinition(A, Def.Base, &Def);
      return Base ? hoverResult(A, definitionSummary(A, *Base), Def.BaseRange) : nullptr;
    }
    if (!within(Def.Range, P))
      continue;
    EntryHit Hit;
    findEntry(Def.Entries, "", P, Hit);
    if (!Hit.E)
      return nullptr;
    const ast::Entry &E = *Hit.E;
    bool OnEntryAnnotation = false;
    json::Value EntryAnnotation = annotationHover(A, E.Annotations, P, OnEntryAnnotation);
    if (OnEntryAnnotation)
      return EntryAnnotation;
    if (within(E.PathRange, P)) {
      auto [Count, Range] = pathComponentAt(E, P);
      std::string Path = joinPath(Hit.Prefix, llvm::makeArrayRef(E.Path).take_front(Count));
      bool AsSection = Count < E.Path.size() || E.isSection();
      return hoverResult(A, fieldHover(A, Def, Path, AsSection), Range);
    }
    if (E.isSection())
      return nullptr; // between a section's entries: nothing in particular
    std::string Path = joinPath(Hit.Prefix, E.Path);
    std::string Text = fieldHover(A, Def, Path);
    SMRange Range = E.Range;
    const FieldSpec *Spec = lookupField(Def.Kind, Path);
    if (const ast::PathExpr *Name = E.Value ? nameAt(E.Value.get(), P) : nullptr)
      if (Spec && isReferenceType(Spec->Type))
        if (const ast::Definition *Target = findDefinition(A, Name->Parts.front())) {
          Text = definitionSummary(A, *Target) + "\n\n---\n" + Text;
          Range = Name->getRange();
        }
    return hoverResult(A, Text, Range);
  }
  return nullptr;
}

json::Value moec::lsp::definitionAt(Analysis &A, size_t Offset, StringRef URI, CatalogFiles &Catalog) {
  json::Array Result;
  const ast::File *F = A.file();
  if (!F)
    return Result;
  const char *P = A.pointerAt(Offset);
  auto Add = [&](const ast::Definition *D) {
    if (!D)
      return;
    if (auto L = A.locate(D->NameRange, URI, Catalog))
      Result.push_back(json::Object{{"uri", L->URI}, {"range", rangeJSON(L->Start, L->End)}});
  };
  for (const ast::Import &I : F->Imports) {
    if (!within(I.Range, P))
      continue;
    llvm::SourceMgr &SM = A.sourceMgr();
    for (unsigned Buf = 1; Buf <= SM.getNumBuffers(); ++Buf) {
      if (SM.getParentIncludeLoc(Buf) != I.Range.Start)
        continue;
      llvm::SmallString<256> Path(SM.getMemoryBuffer(Buf)->getBufferIdentifier());
      if (llvm::sys::fs::make_absolute(Path))
        continue;
      llvm::sys::path::remove_dots(Path, /*remove_dot_dot=*/true);
      Result.push_back(json::Object{{"uri", pathToURI(Path)}, {"range", rangeJSON({0, 0}, {0, 0})}});
      break;
    }
    return Result;
  }
  for (const ast::Definition &Def : F->Definitions) {
    if (within(Def.NameRange, P)) {
      Add(&Def);
      return Result;
    }
    if (!Def.Base.empty() && within(Def.BaseRange, P)) {
      Add(findDefinition(A, Def.Base, &Def));
      return Result;
    }
    if (!within(Def.Range, P))
      continue;
    EntryHit Hit;
    findEntry(Def.Entries, "", P, Hit);
    if (!Hit.E || !Hit.E->Value)
      return Result;
    const FieldSpec *Spec = lookupField(Def.Kind, joinPath(Hit.Prefix, Hit.E->Path));
    if (!Spec || !isReferenceType(Spec->Type))
      return Result;
    if (const ast::PathExpr *Name = nameAt(Hit.E->Value.get(), P))
      Add(findDefinition(A, Name->Parts.front()));
    return Result;
  }
  return Result;
}
