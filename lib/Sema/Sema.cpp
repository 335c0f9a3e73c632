//===- Sema.cpp - Loading, imports, names and extends ---------------------===//
#include "SemaImpl.h"

#include "moec/Catalog/Catalog.h"
#include "moec/Import/HFConfig.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace moec;
using llvm::SMRange;
using llvm::StringRef;

Sema::Sema(DiagnosticEngine &Diags, SemaOptions Opts) : Impl(std::make_unique<SemaImpl>(Diags, std::move(Opts))) {
  Impl->loadCatalog();
}
Sema::~Sema() = default;

Sema::LoadResult Sema::loadFile(StringRef Path) {
  auto Buffer = Path == "-" ? llvm::MemoryBuffer::getSTDIN()
                            : llvm::MemoryBuffer::getFile(Path, /*IsText=*/false,
                                                          /*RequiresNullTerminator=*/true);
  if (!Buffer) {
    Impl->Diags.report(diag::file_unreadable, SMRange(), Path.str(), Buffer.getError().message());
    return LoadResult::Unreadable;
  }
  if (Path != "-") {
    llvm::SmallString<256> Dir(Path);
    llvm::sys::path::remove_filename(Dir);
    Impl->MainDir = std::string(Dir);
  }
  return Impl->loadMain(std::move(*Buffer));
}

Sema::LoadResult Sema::loadBuffer(std::unique_ptr<llvm::MemoryBuffer> Buffer) {
  return Impl->loadMain(std::move(Buffer));
}

std::vector<Recipe> Sema::analyze(llvm::Optional<StringRef> OnlyRecipe) { return Impl->analyze(OnlyRecipe); }
const ast::File *Sema::mainFile() const { return Impl->Main; }

std::vector<Sema::DefinitionRef> Sema::definitions() const {
  std::vector<DefinitionRef> Refs;
  for (const DefInfo &D : Impl->Defs) {
    // Hugging Face imports are named by Sema, not by the user: not listed.
    const llvm::StringMap<DefInfo *> &Table = D.Builtin ? Impl->BuiltinDefs : Impl->UserDefs;
    if (Table.lookup(D.name()) == &D)
      Refs.push_back({D.AST, D.Builtin});
  }
  return Refs;
}

static const DefInfo *infoOf(const SemaImpl &S, const ast::Definition *D) {
  auto It = llvm::find_if(S.Defs, [&](const DefInfo &Info) { return Info.AST == D; });
  return It == S.Defs.end() ? nullptr : &*It;
}

const ModelSpec *Sema::loweredModel(const ast::Definition *D) const {
  const DefInfo *Info = infoOf(*Impl, D);
  return Info && Info->Model ? Info->Model.getPointer() : nullptr;
}

const GpuSpec *Sema::loweredGpu(const ast::Definition *D) const {
  const DefInfo *Info = infoOf(*Impl, D);
  return Info && Info->Gpu ? Info->Gpu.getPointer() : nullptr;
}

Sema::LoweredCatalog Sema::lowerCatalog() {
  LoweredCatalog Out;
  for (DefInfo &D : Impl->Defs) {
    if (!D.Builtin || Impl->BuiltinDefs.lookup(D.name()) != &D || !Impl->resolve(D))
      continue;
    if (D.kind() == ast::DefKind::Model) {
      if (const ModelSpec *M = Impl->lowerModel(D))
        Out.Models.push_back(*M);
    } else if (D.kind() == ast::DefKind::Gpu) {
      if (const GpuSpec *G = Impl->lowerGpu(D))
        Out.Gpus.push_back(*G);
    }
  }
  return Out;
}

std::shared_ptr<const BuiltinCatalog> BuiltinCatalog::parse(DiagnosticEngine &Diags, const ParseLimits &Limits) {
  auto Catalog = std::make_shared<BuiltinCatalog>();
  for (const CatalogFile &C : builtinCatalogFiles()) {
    auto Buffer = llvm::MemoryBuffer::getMemBuffer(C.Text, C.Name);
    unsigned ID = Diags.getSourceMgr().AddNewSourceBuffer(std::move(Buffer), llvm::SMLoc());
    if (auto F = parseBuffer(ID, Diags, Limits))
      Catalog->Files.push_back(std::move(F));
  }
  return Catalog;
}

void SemaImpl::loadCatalog() {
  if (!Opts.Catalog)
    Opts.Catalog = BuiltinCatalog::parse(Diags, Opts.Limits);
  for (const std::unique_ptr<ast::File> &F : Opts.Catalog->Files)
    registerDefinitions(*F, /*Builtin=*/true);
}

Sema::LoadResult SemaImpl::loadMain(std::unique_ptr<llvm::MemoryBuffer> Buffer) {
  unsigned Before = Diags.errorCount();
  if (Buffer->getBufferIdentifier() != "-" && Buffer->getBufferIdentifier() != "<stdin>") {
    llvm::SmallString<256> Real;
    if (!llvm::sys::fs::real_path(Buffer->getBufferIdentifier(), Real))
      LoadStack.push_back(std::string(Real));
  }
  if (!LoadStack.empty())
    LoadedPaths[LoadStack.back()] = true;
  Main = loadBuffer(std::move(Buffer), 0, SMRange());
  if (!LoadStack.empty()) {
    LoadedPaths[LoadStack.back()] = false;
    LoadStack.pop_back();
  }
  return Diags.errorCount() != Before ? Sema::LoadResult::HasErrors : Sema::LoadResult::Loaded;
}

const ast::File *SemaImpl::loadBuffer(std::unique_ptr<llvm::MemoryBuffer> Buffer, unsigned Depth,
                                      SMRange ImportedFrom) {
  unsigned ID = Diags.getSourceMgr().AddNewSourceBuffer(std::move(Buffer), ImportedFrom.Start);
  std::unique_ptr<ast::File> F = parseBuffer(ID, Diags, Opts.Limits);
  if (!F)
    return nullptr;
  const ast::File *Raw = F.get();
  Files.push_back(std::move(F));
  loadImports(*Raw, Depth);
  registerDefinitions(*Raw, /*Builtin=*/false);
  return Raw;
}

void SemaImpl::loadImports(const ast::File &F, unsigned Depth) {
  llvm::SourceMgr &SM = Diags.getSourceMgr();
  StringRef ImporterName = SM.getMemoryBuffer(F.BufferID)->getBufferIdentifier();
  llvm::SmallString<256> ImporterDir;
  if (ImporterName != "-" && ImporterName != "<stdin>") {
    ImporterDir = ImporterName;
    llvm::sys::path::remove_filename(ImporterDir);
  }
  for (const ast::Import &I : F.Imports) {
    if (Depth + 1 > Opts.MaxImportDepth) {
      Diags.report(diag::import_too_deep, I.Range, Opts.MaxImportDepth);
      return;
    }
    std::vector<std::string> Tried;
    std::string Found;
    auto Try = [&](StringRef Dir) {
      llvm::SmallString<256> Candidate(Dir);
      llvm::sys::path::append(Candidate, I.Path);
      if (llvm::sys::path::is_absolute(I.Path))
        Candidate = I.Path;
      Tried.push_back(std::string(Candidate.empty() ? StringRef(I.Path) : StringRef(Candidate)));
      if (Found.empty() && llvm::sys::fs::is_regular_file(Tried.back()))
        Found = Tried.back();
    };
    Try(ImporterDir);
    for (const std::string &Dir : Opts.IncludeDirs)
      if (!llvm::sys::path::is_absolute(I.Path))
        Try(Dir);
    if (Found.empty()) {
      Diags.report(diag::import_not_found, I.Range, I.Path)
          .note(diag::note_import_searched, SMRange(), llvm::join(Tried, ", "));
      continue;
    }
    llvm::SmallString<256> Real;
    if (llvm::sys::fs::real_path(Found, Real))
      Real = Found;
    auto Loaded = LoadedPaths.find(Real);
    if (Loaded != LoadedPaths.end()) {
      if (Loaded->second) { // still on the stack: a cycle
        std::vector<std::string> Names;
        auto Start = llvm::find(LoadStack, std::string(Real));
        for (auto It = Start; It != LoadStack.end(); ++It)
          Names.push_back(std::string(llvm::sys::path::filename(*It)));
        Names.push_back(std::string(llvm::sys::path::filename(Real)));
        Diags.report(diag::import_cycle, I.Range, llvm::join(Names, " -> "));
      }
      continue; // a diamond: already loaded once
    }
    auto Buffer = llvm::MemoryBuffer::getFile(Found, false, true);
    if (!Buffer) {
      Diags.report(diag::import_not_found, I.Range, I.Path)
          .note(diag::note_import_searched, SMRange(), Buffer.getError().message());
      continue;
    }
    LoadedPaths[Real] = true;
    LoadStack.push_back(std::string(Real));
    loadBuffer(std::move(*Buffer), Depth + 1, I.Range);
    LoadStack.pop_back();
    LoadedPaths[Real] = false;
  }
}

void SemaImpl::registerDefinitions(const ast::File &F, bool Builtin) {
  for (const ast::Definition &D : F.Definitions) {
    llvm::StringMap<DefInfo *> &Table = Builtin ? BuiltinDefs : UserDefs;
    auto [It, Inserted] = Table.try_emplace(D.Name, nullptr);
    if (!Inserted) {
      Diags.report(diag::duplicate_definition, D.NameRange, D.Name)
          .note(diag::note_previous_definition, It->second->AST->NameRange, D.Name);
      continue;
    }
    Defs.emplace_back();
    DefInfo &Info = Defs.back();
    Info.AST = &D;
    Info.Builtin = Builtin;
    It->second = &Info;
    if (!Builtin) {
      if (DefInfo *B = BuiltinDefs.lookup(D.Name))
        Diags.report(diag::shadows_builtin, D.NameRange, ast::defKindName(D.Kind), D.Name, ast::defKindName(B->kind()))
            .note(diag::note_builtin, B->AST->NameRange, ast::defKindName(B->kind()));
      processAnnotations(D.Annotations, D.Range);
    }
  }
}

void SemaImpl::processAnnotations(const std::vector<ast::Annotation> &As, SMRange Scope) {
  for (const ast::Annotation &A : As) {
    if (A.Name != "allow") {
      Diags.report(diag::unknown_annotation, A.Range, A.Name);
      continue;
    }
    const ast::Argument *IdArg = nullptr, *Reason = nullptr;
    for (const ast::Argument &Arg : A.Args) {
      if (Arg.Name.empty() && !IdArg)
        IdArg = &Arg;
      else if (Arg.Name == "reason")
        Reason = &Arg;
    }
    if (!IdArg) {
      Diags.report(diag::bad_call, A.Range, "@allow needs a diagnostic ID: @allow(ID, reason = \"...\")");
      continue;
    }
    // IDs are kebab-case, which parses as a subtraction: take the source text.
    std::string Id;
    if (auto *S = llvm::dyn_cast<ast::StringLit>(IdArg->Value.get()))
      Id = S->Value;
    else
      for (char C : sourceText(IdArg->Value->getRange()))
        if (!llvm::isSpace(C))
          Id.push_back(C);
    llvm::Optional<diag::ID> ID = lookupDiagID(Id);
    if (!ID) {
      std::vector<StringRef> Known;
      for (const DiagInfo &I : allDiagInfos())
        Known.push_back(I.Id);
      Diags.report(diag::unknown_diagnostic, IdArg->Value->getRange(), Id, didYouMean(Id, Known));
      continue;
    }
    if (getDiagInfo(*ID).DefaultSeverity == Severity::Error) {
      Diags.report(diag::allow_error, IdArg->Value->getRange(), Id);
      continue;
    }
    if (!Reason || !llvm::isa<ast::StringLit>(Reason->Value.get()) ||
        StringRef(llvm::cast<ast::StringLit>(Reason->Value.get())->Value).trim().empty()) {
      Diags.report(diag::allow_without_reason, A.Range, Id);
      continue;
    }
    Diags.addAllowScope(*ID, Scope, A.Range);
  }
}

DefInfo *SemaImpl::lookup(StringRef Name) {
  if (DefInfo *D = UserDefs.lookup(Name))
    return D;
  return BuiltinDefs.lookup(Name);
}

std::vector<StringRef> SemaImpl::namesOfKind(ast::DefKind K) {
  std::vector<StringRef> Names;
  for (DefInfo &D : Defs)
    if (D.kind() == K)
      Names.push_back(D.name());
  return Names;
}

Scope &SemaImpl::sharedScope(DefInfo &D) {
  if (!D.Shared)
    D.Shared = std::make_unique<Scope>(*this, D);
  return *D.Shared;
}

namespace {
/// Flattens a definition's entries into dotted paths, checking each against
/// the schema.
class Flattener {
public:
  Flattener(SemaImpl &S, DefInfo &D) : S(S), D(D), Kind(D.kind()) {}

  void run(const std::vector<ast::Entry> &Entries, const std::string &Prefix) {
    for (const ast::Entry &E : Entries) {
      std::string Path = Prefix.empty() ? llvm::join(E.Path, ".") : Prefix + "." + llvm::join(E.Path, ".");
      if (!D.Builtin)
        S.processAnnotations(E.Annotations, E.Range);
      if (E.isSection()) {
        if (!isSection(Kind, Path)) {
          if (lookupField(Kind, Path))
            S.Diags.report(diag::not_a_section, E.PathRange, Path);
          else
            unknownField(Path, E.PathRange);
          continue;
        }
        run(E.Children, Path);
        continue;
      }
      if (!lookupField(Kind, Path)) {
        if (isSection(Kind, Path))
          S.Diags.report(diag::type_mismatch, E.Value->getRange(), Path, "a { ... } section", "a single value");
        else
          unknownField(Path, E.PathRange);
        continue;
      }
      auto [It, Inserted] = Own.try_emplace(Path, &E);
      if (!Inserted) {
        S.Diags.report(diag::duplicate_field, E.PathRange, Path, describeDef())
            .note(diag::note_previous_field, It->second->PathRange);
        continue;
      }
      if (E.Value->getKind() == ast::Expr::Kind::Sweep) {
        if (Kind != ast::DefKind::Recipe) {
          S.Diags.report(diag::sweep_misplaced, E.Value->getRange());
          Own.erase(Path);
          D.Rejected.insert(Path);
          continue;
        }
        if (llvm::cast<ast::ListExpr>(E.Value.get())->Elements.empty()) {
          S.Diags.report(diag::sweep_empty, E.Value->getRange());
          Own.erase(Path);
          D.Rejected.insert(Path);
          continue;
        }
      }
      Order.push_back(Path);
    }
  }

  std::string describeDef() const { return (ast::defKindName(Kind) + " '" + D.name() + "'").str(); }

  void unknownField(const std::string &Path, SMRange R) {
    // Fields and the sections that hold them (`paralel { ... }` is a
    // misspelt section).
    std::vector<StringRef> Candidates;
    for (const FieldSpec &F : schemaFor(Kind)) {
      Candidates.push_back(F.Path);
      StringRef Section = F.Path.split('.').first;
      if (Section != F.Path && !llvm::is_contained(Candidates, Section))
        Candidates.push_back(Section);
    }
    auto Best = closestMatch(Path, Candidates);
    auto B = S.Diags.report(diag::unknown_field, R, Path, describeDef(),
                            Best ? fmt::format("; did you mean '{}'?", Best->str()) : std::string());
    // The fix-it rewrites what the range covers: the whole path, or its last
    // component when the entry sits inside its section.
    if (!Best || !R.Start.isValid() || !R.End.isValid())
      return;
    StringRef Written(R.Start.getPointer(), size_t(R.End.getPointer() - R.Start.getPointer()));
    StringRef Want = *Best, Have = Path;
    if (Written == Have)
      B.fixit(R, Want.str());
    else if (Have.endswith(Written) && Want.size() > Have.size() - Written.size() &&
             Want.take_front(Have.size() - Written.size()) == Have.drop_back(Written.size()))
      B.fixit(R, Want.drop_front(Have.size() - Written.size()).str());
  }

  SemaImpl &S;
  DefInfo &D;
  ast::DefKind Kind;
  llvm::StringMap<const ast::Entry *> Own;
  std::vector<std::string> Order;
};
} // namespace

bool SemaImpl::resolve(DefInfo &D) {
  switch (D.St) {
  case DefInfo::State::Resolved:
    return true;
  case DefInfo::State::Failed:
    return false;
  case DefInfo::State::Resolving:
    return false; // the cycle is reported by the definition that closes it
  case DefInfo::State::Unresolved:
    break;
  }
  D.St = DefInfo::State::Resolving;
  const ast::Definition &AST = *D.AST;
  if (!AST.Base.empty()) {
    DefInfo *Base = lookup(AST.Base);
    // A definition may extend the built-in it shadows: `model deepseek_v3 extends deepseek_v3`.
    if (Base == &D) {
      Base = BuiltinDefs.lookup(AST.Base) != &D ? BuiltinDefs.lookup(AST.Base) : nullptr;
      if (!Base) { // `recipe a extends a` with no built-in to extend
        Diags.report(diag::extends_cycle, AST.BaseRange, AST.Name, AST.Name + " -> " + AST.Name);
        D.St = DefInfo::State::Failed;
        return false;
      }
    }
    if (!Base) {
      std::vector<StringRef> Names = namesOfKind(AST.Kind);
      Diags.report(diag::unknown_name, AST.BaseRange, ast::defKindName(AST.Kind), AST.Base,
                   didYouMean(AST.Base, Names));
      D.St = DefInfo::State::Failed;
      return false;
    }
    if (Base->kind() != AST.Kind) {
      Diags
          .report(diag::extends_kind, AST.BaseRange, ast::defKindName(AST.Kind), AST.Name,
                  ast::defKindName(Base->kind()), AST.Base)
          .note(diag::note_defined_here, Base->AST->NameRange, AST.Base);
      D.St = DefInfo::State::Failed;
      return false;
    }
    if (Base->St == DefInfo::State::Resolving) {
      // Walk the chain from the base back to D to name the cycle.
      std::vector<std::string> Chain{AST.Name};
      for (DefInfo *Cur = Base; Cur && Cur != &D && Chain.size() < 64;) {
        Chain.push_back(Cur->AST->Name);
        Cur = Cur->AST->Base.empty() ? nullptr : lookup(Cur->AST->Base);
      }
      Chain.push_back(AST.Name);
      Diags.report(diag::extends_cycle, AST.BaseRange, AST.Name, llvm::join(Chain, " -> "));
      D.St = DefInfo::State::Failed;
      return false;
    }
    if (!resolve(*Base)) {
      D.St = DefInfo::State::Failed;
      return false;
    }
    D.ChainLength = Base->ChainLength + 1;
    if (D.ChainLength > MaxExtendsDepth) {
      Diags.report(diag::extends_too_deep, AST.BaseRange, AST.Name, MaxExtendsDepth);
      D.St = DefInfo::State::Failed;
      return false;
    }
    for (auto &KV : Base->Fields) {
      FieldEntry E = KV.second;
      E.Chain.push_back(AST.Name);
      D.Fields[KV.first()] = std::move(E);
    }
    D.SweepPaths = Base->SweepPaths;
    D.Rejected = Base->Rejected;
  }

  Flattener F(*this, D);
  F.run(AST.Entries, "");
  for (const std::string &Path : F.Order) {
    const ast::Entry *E = F.Own.lookup(Path);
    D.Rejected.erase(Path);
    FieldEntry &FE = D.Fields[Path];
    FE.Value = E->Value.get();
    FE.EntryRange = E->Range;
    FE.PathRange = E->PathRange;
    FE.Entry = E;
    FE.Chain.assign({AST.Name});
    bool IsSweep = E->Value->getKind() == ast::Expr::Kind::Sweep;
    auto Existing = llvm::find(D.SweepPaths, Path);
    if (IsSweep && Existing == D.SweepPaths.end())
      D.SweepPaths.push_back(Path);
    else if (!IsSweep && Existing != D.SweepPaths.end())
      D.SweepPaths.erase(Existing); // the child fixed a field its base swept
  }
  D.St = DefInfo::State::Resolved;
  return true;
}

DefInfo *SemaImpl::importHF(StringRef Path, SMRange CallRange) {
  llvm::SourceMgr &SM = Diags.getSourceMgr();
  // Relative to the recipe that names it, then to each -I directory.
  std::vector<std::string> Candidates;
  if (llvm::sys::path::is_absolute(Path)) {
    Candidates.push_back(Path.str());
  } else {
    unsigned Buf = SM.FindBufferContainingLoc(CallRange.Start);
    StringRef Name = Buf ? SM.getMemoryBuffer(Buf)->getBufferIdentifier() : StringRef();
    llvm::SmallString<256> Dir(Name == "-" || Name == "<stdin>" ? StringRef() : Name);
    llvm::sys::path::remove_filename(Dir);
    llvm::SmallString<256> P(Dir);
    llvm::sys::path::append(P, Path);
    Candidates.push_back(std::string(P));
    for (const std::string &I : Opts.IncludeDirs) {
      llvm::SmallString<256> Q(I);
      llvm::sys::path::append(Q, Path);
      Candidates.push_back(std::string(Q));
    }
  }
  std::string Found;
  for (const std::string &C : Candidates)
    if (llvm::sys::fs::is_regular_file(C)) {
      Found = C;
      break;
    }
  if (Found.empty()) {
    Diags.report(diag::hf_unsupported, CallRange, fmt::format("cannot find Hugging Face config '{}'", Path.str()))
        .note(diag::note_import_searched, SMRange(), llvm::join(Candidates, ", "));
    return nullptr;
  }
  llvm::SmallString<256> Real;
  if (llvm::sys::fs::real_path(Found, Real))
    Real = Found;
  if (DefInfo *D = HFModels.lookup(Real))
    return D;
  auto Buffer = llvm::MemoryBuffer::getFile(Found);
  if (!Buffer) {
    Diags.report(diag::hf_unsupported, CallRange,
                 fmt::format("cannot read '{}': {}", Found, Buffer.getError().message()));
    return nullptr;
  }
  if ((*Buffer)->getBufferSize() > Opts.Limits.MaxFileBytes) {
    Diags.report(diag::hf_unsupported, CallRange,
                 fmt::format("'{}' is larger than {} bytes", Found, Opts.Limits.MaxFileBytes));
    return nullptr;
  }
  // The definition's name: hf_<file stem>, made an identifier.
  std::string Name = "hf_";
  StringRef Stem = llvm::sys::path::stem(llvm::sys::path::parent_path(Real).empty() ? StringRef(Real)
                                                                                    : llvm::sys::path::filename(Real));
  for (char C : Stem)
    Name.push_back(llvm::isAlnum(C) ? C : '_');
  if (HFModels.size())
    Name += "_" + std::to_string(HFModels.size());
  llvm::Expected<HFImport> Imported = importHFConfig((*Buffer)->getBuffer(), Name);
  if (!Imported) {
    Diags.report(diag::hf_unsupported, CallRange, fmt::format("{}: {}", Found, llvm::toString(Imported.takeError())));
    return nullptr;
  }
  if (!Imported->Ignored.empty())
    Diags.report(diag::hf_ignored_keys, CallRange, llvm::join(Imported->Ignored, ", "));
  auto Text = llvm::MemoryBuffer::getMemBufferCopy(Imported->MoeText, (Found + " (imported as .moe)"));
  unsigned ID = SM.AddNewSourceBuffer(std::move(Text), CallRange.Start);
  std::unique_ptr<ast::File> F = parseBuffer(ID, Diags, Opts.Limits);
  if (!F || F->Definitions.size() != 1)
    return nullptr;
  Defs.emplace_back();
  DefInfo &D = Defs.back();
  D.AST = &F->Definitions.front();
  Files.push_back(std::move(F));
  HFModels[Real] = &D;
  if (!resolve(D))
    return nullptr;
  return &D;
}
