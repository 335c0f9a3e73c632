//===- Evaluator.cpp - Type-directed evaluation of fields -----------------===//
//
// A field's expression is evaluated against the type its schema entry gives:
// a bare name is an enum value where an enum is expected, a definition where
// a model or GPU is expected, and a reference to another field inside
// arithmetic. Integer arithmetic is exact; every failure is one located
// diagnostic and an empty result that callers pass on without reporting
// again.
//
//===----------------------------------------------------------------------===//
#include "SemaImpl.h"

#include "llvm/ADT/StringExtras.h"
#include <cfloat>

using namespace moec;
using llvm::SMRange;
using llvm::StringRef;

std::string Value::describe() const {
  switch (K) {
  case Kind::Number: {
    // "a count (1)", "a bandwidth (80GB/s)", but "bytes (80GB)".
    std::string Dim = Num.getDimension().describe();
    bool Article = Dim != "bytes" && StringRef(Dim).find_first_of("*^") == StringRef::npos;
    return (Article ? "a " : "") + Dim + " (" + Num.format() + ")";
  }
  case Kind::Bool:
    return "a boolean";
  case Kind::String:
    return "a string";
  case Kind::Name:
    return "the name '" + Text + "'";
  case Kind::Ref:
    return "the name '" + Text + "'";
  case Kind::Call:
    return Text + "(...)";
  case Kind::List:
    return "a list";
  }
  llvm_unreachable("unknown value kind");
}

static StringRef sectionOf(StringRef Path) {
  size_t Dot = Path.rfind('.');
  return Dot == StringRef::npos ? StringRef() : Path.take_front(Dot);
}

bool Scope::isSet(StringRef Path) const { return Def.Fields.count(Path); }

bool Scope::failed(StringRef Path) const {
  if (Def.Rejected.count(Path) && !isSet(Path))
    return true; // an empty or misplaced sweep, reported when flattening
  auto It = Memo.find(Path);
  return It != Memo.end() && It->second.Failed;
}

Provenance Scope::provenance(StringRef Path) const {
  Provenance P;
  auto It = Def.Fields.find(Path);
  if (It == Def.Fields.end() && Def.kind() == ast::DefKind::Recipe && Path.startswith("cluster.")) {
    // Set by the named cluster: `cluster = eos`.
    auto C = Memo.find("cluster");
    if (C != Memo.end() && C->second.V && C->second.V->Ref) {
      StringRef Sub = Path.drop_front(strlen("cluster."));
      Scope &CS = S.sharedScope(*C->second.V->Ref);
      if (CS.isSet(Sub)) {
        P = CS.provenance(Sub);
        const FieldEntry &Ref = Def.Fields.find("cluster")->second;
        P.Chain.append(Ref.Chain.begin(), Ref.Chain.end());
        return P;
      }
    }
  }
  if (It == Def.Fields.end()) {
    P.Range = Def.AST->NameRange;
    P.Chain.push_back(Def.AST->Name);
    P.IsDefault = true;
    return P;
  }
  const ast::Expr *E = chosenExpr(Path, It->second);
  P.Range = E ? E->getRange() : It->second.EntryRange;
  P.EntryRange = It->second.EntryRange;
  P.PathRange = It->second.PathRange;
  P.Chain = It->second.Chain;
  return P;
}

const ast::Expr *Scope::chosenExpr(StringRef Path, const FieldEntry &E) const {
  if (E.Value->getKind() != ast::Expr::Kind::Sweep)
    return E.Value;
  auto It = Choice.find(Path.str());
  const auto &Elements = llvm::cast<ast::ListExpr>(E.Value)->Elements;
  unsigned Index = It == Choice.end() ? 0 : It->second;
  return Index < Elements.size() ? Elements[Index].get() : nullptr;
}

const Value *Scope::get(StringRef Path) {
  auto It = Memo.find(Path);
  if (It != Memo.end()) {
    if (It->second.St == State::InProgress) {
      // A cycle through a derived value (cp = dp, where dp needs cp);
      // direct references are reported by resolveReference with their range.
      auto Start = llvm::find(Stack, Path.str());
      std::vector<std::string> Cycle(Start, Stack.end());
      Cycle.push_back(Path.str());
      auto Entry = Def.Fields.find(Stack.back());
      SMRange Where = Entry != Def.Fields.end() ? Entry->second.EntryRange : Def.AST->NameRange;
      S.Diags.report(diag::field_cycle, Where, Path, llvm::join(Cycle, " -> "));
      return nullptr;
    }
    return It->second.V ? &*It->second.V : nullptr;
  }
  Memo[Path] = {State::InProgress, llvm::None};
  Stack.push_back(Path.str());
  unsigned ErrorsBefore = this->S.Diags.errorCount();
  llvm::Optional<Value> V = compute(Path);
  Stack.pop_back();
  Slot &S = Memo[Path];
  S.St = State::Done;
  S.Failed = !V && this->S.Diags.errorCount() != ErrorsBefore;
  S.V = std::move(V);
  return S.V ? &*S.V : nullptr;
}

llvm::Optional<Value> Scope::compute(StringRef Path) {
  const FieldSpec *F = lookupField(Def.kind(), Path);
  if (!F)
    return llvm::None;
  auto It = Def.Fields.find(Path);
  if (It != Def.Fields.end()) {
    const ast::Expr *E = chosenExpr(Path, It->second);
    if (!E)
      return llvm::None;
    return evalField(*E, *F, Path);
  }
  if (llvm::Optional<Value> V = derive(Path))
    return V;
  if (F->Req != Presence::Default)
    return llvm::None;
  // Defaults are written in .moe syntax in the schema; turn them into values.
  SMRange Where = Def.AST->NameRange;
  switch (F->Type) {
  case FieldType::Count:
  case FieldType::Number: {
    QuantityError Err;
    auto Q = Quantity::fromNumber(F->DefaultText, Err);
    return Value::number(Q ? *Q : Quantity(), Where);
  }
  case FieldType::Bool:
  case FieldType::FlagOrList:
    return Value::boolean(F->DefaultText == "true", Where);
  case FieldType::ScopeList:
  case FieldType::CountList: {
    Value V;
    V.K = Value::Kind::List;
    V.Range = Where;
    return V;
  }
  default:
    return Value::name(F->DefaultText.str(), Where);
  }
}

/// Values computed from other fields when not stated.
llvm::Optional<Value> Scope::derive(StringRef Path) {
  SMRange Where = Def.AST->NameRange;
  auto Count = [&](StringRef P) -> llvm::Optional<int64_t> {
    const Value *V = get(P);
    if (!V || V->K != Value::Kind::Number || !V->Num.isInteger())
      return llvm::None;
    return V->Num.getInteger();
  };
  auto Int = [&](int64_t N) { return Value::number(Quantity::integer(N), Where); };

  // A recipe's cluster fields fall back to the named cluster's.
  if (Def.kind() == ast::DefKind::Recipe && Path.startswith("cluster.") && isSet("cluster")) {
    const Value *C = get("cluster");
    StringRef Sub = Path.drop_front(strlen("cluster."));
    // gpus the named cluster does not state is computed below from the
    // recipe's nodes and gpu, which may override the cluster's.
    if (C && C->Ref && (Path != "cluster.gpus" || S.sharedScope(*C->Ref).isSet(Sub))) {
      if (const Value *V = S.sharedScope(*C->Ref).get(Sub))
        return *V;
      return llvm::None;
    }
  }

  StringRef NodesPath, GpuPath;
  if (Def.kind() == ast::DefKind::Recipe && Path == "cluster.gpus")
    NodesPath = "cluster.nodes", GpuPath = "cluster.gpu";
  else if (Def.kind() == ast::DefKind::Cluster && Path == "gpus")
    NodesPath = "nodes", GpuPath = "gpu";
  if (!NodesPath.empty()) {
    auto Nodes = Count(NodesPath);
    const Value *Gpu = get(GpuPath);
    if (!Nodes || !Gpu || !Gpu->Ref)
      return llvm::None;
    const Value *PerNode = S.sharedScope(*Gpu->Ref).get("gpus_per_node");
    int64_t W;
    if (!PerNode || !PerNode->Num.isInteger() || __builtin_mul_overflow(*Nodes, PerNode->Num.getInteger(), &W))
      return llvm::None;
    return Int(W);
  }

  if (Def.kind() == ast::DefKind::Recipe) {
    if (Path == "optimizer.precision_aware") {
      const Value *Offload = get("offload.optimizer");
      return Value::boolean(Offload && Offload->Num.getReal() > 0, Where);
    }
    if (Path == "parallel.sp") {
      auto TP = Count("parallel.tp");
      return Value::boolean(TP && *TP > 1, Where);
    }
    if (Path == "optimizer.overlap_param_gather") {
      const Value *Distributed = get("optimizer.distributed");
      return Value::boolean(!Distributed || Distributed->K != Value::Kind::Bool || Distributed->Bool, Where);
    }
    if (Path == "optimizer.distributed") {
      // torch FSDP2 refuses Megatron's distributed optimizer (it shards the
      // optimizer state itself): off there unless stated.
      const Value *Fsdp = get("parallel.fsdp");
      const Value *Impl = get("parallel.fsdp_impl");
      bool Torch = Fsdp && Fsdp->K == Value::Kind::Bool && Fsdp->Bool && Impl && Impl->Text == "torch";
      return Value::boolean(!Torch, Where);
    }
    if (Path == "parallel.dp" || Path == "parallel.edp") {
      bool Dense = Path == "parallel.dp";
      auto W = Count("cluster.gpus");
      auto A = Count(Dense ? "parallel.tp" : "parallel.etp");
      auto B = Count(Dense ? "parallel.cp" : "parallel.ep");
      auto PP = Count("parallel.pp");
      if (!W || !A || !B || !PP)
        return llvm::None;
      int64_t Grid;
      if (__builtin_mul_overflow(*A, *B, &Grid) || __builtin_mul_overflow(Grid, *PP, &Grid) || Grid == 0 ||
          *W % Grid != 0)
        return llvm::None; // world-size reports it
      return Int(*W / Grid);
    }
  }
  if (Def.kind() == ast::DefKind::Model) {
    if (Path == "kv_heads")
      if (auto H = Count("heads"))
        return Int(*H);
    if (Path == "head_dim") {
      auto Hidden = Count("hidden"), Heads = Count("heads");
      if (Hidden && Heads && *Heads && *Hidden % *Heads == 0)
        return Int(*Hidden / *Heads);
    }
  }
  return llvm::None;
}

llvm::Optional<Value> Scope::evalField(const ast::Expr &E, const FieldSpec &F, StringRef Path) {
  llvm::Optional<Value> V;
  switch (F.Type) {
  case FieldType::Count:
  case FieldType::Number:
  case FieldType::Bytes:
  case FieldType::Bandwidth:
  case FieldType::FlopRate:
  case FieldType::Bool:
  case FieldType::String:
    V = evalPlain(E, Path);
    break;
  case FieldType::CountList: {
    const auto *L = llvm::dyn_cast<ast::ListExpr>(&E);
    if (!L || E.getKind() != ast::Expr::Kind::List) {
      S.Diags.report(diag::type_mismatch, E.getRange(), F.Path, describeType(F), S.sourceText(E.getRange()));
      return llvm::None;
    }
    Value List;
    List.K = Value::Kind::List;
    List.Range = E.getRange();
    FieldSpec Element = F;
    Element.Type = FieldType::Count;
    for (const ast::ExprPtr &X : L->Elements) {
      auto Q = evalNumber(*X, Path);
      if (!Q)
        return llvm::None;
      Value Item = Value::number(*Q, X->getRange());
      if (!checkValue(Item, Element, X->getRange()))
        return llvm::None;
      List.Elements.push_back(Item);
    }
    return List;
  }
  case FieldType::FlagOrList:
    if (E.getKind() == ast::Expr::Kind::Bool)
      V = Value::boolean(llvm::cast<ast::BoolLit>(E).Value, E.getRange());
    else
      V = evalNamed(E, F);
    break;
  case FieldType::Enum:
  case FieldType::ScopeList:
  case FieldType::ModelRef:
  case FieldType::GpuRef:
  case FieldType::ClusterRef:
  case FieldType::DataSource:
  case FieldType::Attention:
  case FieldType::Recompute:
    if (E.getKind() == ast::Expr::Kind::Call)
      V = evalCall(E, F);
    else
      V = evalNamed(E, F);
    break;
  }
  if (!V || !checkValue(*V, F, E.getRange()))
    return llvm::None;
  return V;
}

bool Scope::checkValue(Value &V, const FieldSpec &F, SMRange Where) {
  auto Mismatch = [&] {
    S.Diags.report(diag::type_mismatch, Where, F.Path, describeType(F), V.describe());
    return false;
  };
  Dimension Want;
  switch (F.Type) {
  case FieldType::Count:
  case FieldType::Number:
    break;
  case FieldType::Bytes:
    Want = Dimension::byteCount();
    break;
  case FieldType::Bandwidth:
    Want = Dimension::bandwidth();
    break;
  case FieldType::FlopRate:
    Want = Dimension::flopRate();
    break;
  case FieldType::Bool:
    return V.K == Value::Kind::Bool || Mismatch();
  case FieldType::String:
    return V.K == Value::Kind::String || Mismatch();
  default:
    return true; // names and calls were checked while evaluating
  }
  if (V.K != Value::Kind::Number || V.Num.getDimension() != Want)
    return Mismatch();
  if (F.Type == FieldType::Count && !V.Num.isInteger()) {
    S.Diags.report(diag::type_mismatch, Where, F.Path, describeType(F), "not a whole number (" + V.Num.format() + ")");
    return false;
  }
  double X = V.Num.getReal();
  // Counts have no upper bound in the schema, but the rules and the planner
  // multiply them in 64 bits (pp x vpp, 2 x cp, nodes x gpus_per_node, ...).
  // A ceiling far above any real job keeps every such product in range:
  // 2^20 for a parallel size and the GPUs of the job, 2^16 for layer
  // counts (the planner keeps per-layer tables), 2^31 for any other count
  // (docs/reliability.md; found by fuzz-plan). max_seq_len is only ever
  // compared, never multiplied: any 64-bit value stays valid there.
  double Max = F.Max;
  if (F.Type == FieldType::Count && Max == DBL_MAX && F.Path != "max_seq_len") {
    StringRef Path = F.Path;
    if (Path.startswith("parallel.") || Path == "cluster.gpus")
      Max = double(1 << 20);
    else if (Path.contains("layers"))
      Max = double(1 << 16);
    else
      Max = double(int64_t(1) << 31);
  }
  if (X < F.Min || X > Max) {
    std::string Expected = F.Max == DBL_MAX && (X < F.Min || Max == DBL_MAX)
                               ? fmt::format("at least {}", F.Min)
                               : fmt::format("between {} and {}", F.Min, Max);
    if (Want != Dimension::none())
      Expected = "a value above zero";
    S.Diags.report(diag::value_out_of_range, Where, F.Path, V.Num.format(), Expected);
    return false;
  }
  return true;
}

llvm::Optional<Value> Scope::evalPlain(const ast::Expr &E, StringRef FromPath) {
  switch (E.getKind()) {
  case ast::Expr::Kind::String:
    return [&] {
      Value V;
      V.K = Value::Kind::String;
      V.Text = llvm::cast<ast::StringLit>(E).Value;
      V.Range = E.getRange();
      return V;
    }();
  case ast::Expr::Kind::Bool:
    return Value::boolean(llvm::cast<ast::BoolLit>(E).Value, E.getRange());
  case ast::Expr::Kind::Path: {
    const Value *V = resolveReference(llvm::cast<ast::PathExpr>(E), FromPath);
    if (!V)
      return llvm::None;
    Value Copy = *V;
    Copy.Range = E.getRange();
    return Copy;
  }
  case ast::Expr::Kind::Sweep:
    S.Diags.report(diag::sweep_misplaced, E.getRange());
    return llvm::None;
  case ast::Expr::Kind::List:
  case ast::Expr::Kind::Call: {
    Value V;
    V.K = E.getKind() == ast::Expr::Kind::List ? Value::Kind::List : Value::Kind::Call;
    if (V.K == Value::Kind::Call)
      V.Text = llvm::cast<ast::CallExpr>(E).Callee;
    V.Range = E.getRange();
    return V; // the caller reports the type mismatch
  }
  default:
    if (auto Q = evalNumber(E, FromPath))
      return Value::number(*Q, E.getRange());
    return llvm::None;
  }
}

const Value *Scope::resolveReference(const ast::PathExpr &P, StringRef FromPath) {
  // Inside a section, a name means a sibling first, then a top-level field.
  std::vector<std::string> Candidates;
  StringRef Section = sectionOf(FromPath);
  std::string Joined = P.joined();
  if (!Section.empty())
    Candidates.push_back((Section + "." + Joined).str());
  Candidates.push_back(Joined);

  for (size_t CI = 0; CI < Candidates.size(); ++CI) {
    const std::string &Candidate = Candidates[CI];
    // The longest prefix that is a field; the rest continues in the
    // definition it names (model.layers, cluster.gpu.memory). A
    // section-relative candidate must match at least one part the user wrote.
    llvm::SmallVector<StringRef, 4> Parts;
    StringRef(Candidate).split(Parts, '.');
    size_t MinParts = (CI + 1 < Candidates.size()) ? Section.count('.') + 2 : 1;
    for (size_t N = Parts.size(); N >= MinParts && N > 0; --N) {
      std::string Prefix = llvm::join(Parts.begin(), Parts.begin() + N, ".");
      if (!lookupField(Def.kind(), Prefix))
        continue;
      auto Slot = Memo.find(Prefix);
      if (Slot != Memo.end() && Slot->second.St == State::InProgress) {
        auto Start = llvm::find(Stack, Prefix);
        std::vector<std::string> Cycle(Start, Stack.end());
        Cycle.push_back(Prefix);
        S.Diags.report(diag::field_cycle, P.getRange(), Prefix, llvm::join(Cycle, " -> "));
        return nullptr;
      }
      const Value *V = get(Prefix);
      if (!V) {
        if (!failed(Prefix))
          S.Diags.report(diag::unset_field, P.getRange(), Prefix);
        return nullptr;
      }
      if (N == Parts.size())
        return V;
      if (V->K != Value::Kind::Ref || !V->Ref) {
        S.Diags.report(diag::unknown_field, P.getRange(), Candidate, "'" + Prefix + "'", "");
        return nullptr;
      }
      DefInfo &Target = *V->Ref;
      if (!S.resolve(Target))
        return nullptr;
      std::string Rest = llvm::join(Parts.begin() + N, Parts.end(), ".");
      if (!lookupField(Target.kind(), Rest)) {
        std::vector<StringRef> Names;
        for (const FieldSpec &F : schemaFor(Target.kind()))
          Names.push_back(F.Path);
        S.Diags.report(diag::unknown_field, P.getRange(), Rest,
                       (ast::defKindName(Target.kind()) + " '" + Target.name() + "'").str(), didYouMean(Rest, Names));
        return nullptr;
      }
      Scope &TS = S.sharedScope(Target);
      const Value *TV = TS.get(Rest);
      if (!TV && !TS.failed(Rest))
        S.Diags.report(diag::unset_field, P.getRange(), Joined);
      return TV;
    }
  }
  std::vector<StringRef> Names;
  for (const FieldSpec &F : schemaFor(Def.kind()))
    Names.push_back(F.Path);
  S.Diags.report(diag::unknown_name, P.getRange(), "field", Joined, didYouMean(Joined, Names));
  return nullptr;
}

static const char *opVerb(char Op) {
  switch (Op) {
  case '+':
    return "add";
  case '-':
    return "subtract";
  case '%':
    return "take the remainder of";
  default:
    return "combine";
  }
}

llvm::Optional<Quantity> Scope::evalNumber(const ast::Expr &E, StringRef FromPath) {
  switch (E.getKind()) {
  case ast::Expr::Kind::Int:
  case ast::Expr::Kind::Float:
  case ast::Expr::Kind::Quantity: {
    const auto &N = llvm::cast<ast::NumberLit>(E);
    QuantityError Err = QuantityError::None;
    llvm::Optional<Quantity> Q =
        N.Unit.empty() ? Quantity::fromNumber(N.Digits, Err) : Quantity::fromLiteral(N.Digits, N.Unit, Err);
    if (Q)
      return Q;
    if (Err == QuantityError::Overflow) {
      S.Diags.report(diag::integer_too_large, E.getRange(), N.Digits + N.Unit);
    } else {
      const char *UnitStart = E.getRange().Start.getPointer() + N.Digits.size();
      SMRange UnitRange(llvm::SMLoc::getFromPointer(UnitStart), E.getRange().End);
      // Suggest only units of the field's dimension: `seq_len = 4kb` means
      // 4K tokens, not 4KB (a type error the fix-it would bring).
      std::vector<StringRef> Units;
      const FieldSpec *F = lookupField(Def.kind(), FromPath);
      for (StringRef U : Quantity::knownUnits()) {
        QuantityError UnitErr = QuantityError::None;
        llvm::Optional<Quantity> One = Quantity::fromLiteral("1", U, UnitErr);
        Dimension Want = !F                                ? (One ? One->getDimension() : Dimension())
                         : F->Type == FieldType::Bytes     ? Dimension::byteCount()
                         : F->Type == FieldType::Bandwidth ? Dimension::bandwidth()
                         : F->Type == FieldType::FlopRate  ? Dimension::flopRate()
                                                           : Dimension::none();
        if (One && One->getDimension() == Want)
          Units.push_back(U);
      }
      auto Fix = closestMatch(N.Unit, Units);
      // `4kb` for a count: the longest unit that begins the written one, case aside.
      for (StringRef U : Units)
        if (!Fix && N.Unit.size() > U.size() && StringRef(N.Unit).take_front(U.size()).equals_insensitive(U))
          Fix = U;
      auto D = S.Diags.report(diag::unknown_unit, UnitRange, N.Unit,
                              Fix ? fmt::format("; did you mean '{}'?", Fix->str()) : std::string());
      if (Fix)
        D.fixit(UnitRange, Fix->str());
    }
    return llvm::None;
  }
  case ast::Expr::Kind::Unary: {
    const auto &U = llvm::cast<ast::UnaryExpr>(E);
    auto Q = evalNumber(*U.Operand, FromPath);
    if (!Q)
      return llvm::None;
    if (U.Op == '+')
      return Q;
    Quantity R;
    if (Quantity::negate(*Q, R) != QuantityError::None) {
      S.Diags.report(diag::arithmetic_overflow, E.getRange(), S.sourceText(E.getRange()));
      return llvm::None;
    }
    return R;
  }
  case ast::Expr::Kind::Binary: {
    const auto &B = llvm::cast<ast::BinaryExpr>(E);
    auto L = evalNumber(*B.LHS, FromPath);
    auto R = evalNumber(*B.RHS, FromPath);
    if (!L || !R)
      return llvm::None;
    Quantity Out;
    QuantityError Err = QuantityError::None;
    switch (B.Op) {
    case '+':
      Err = Quantity::add(*L, *R, Out);
      break;
    case '-':
      Err = Quantity::sub(*L, *R, Out);
      break;
    case '*':
      Err = Quantity::mul(*L, *R, Out);
      break;
    case '/':
      Err = Quantity::div(*L, *R, Out);
      break;
    default:
      Err = Quantity::rem(*L, *R, Out);
      break;
    }
    switch (Err) {
    case QuantityError::None:
      return Out;
    case QuantityError::Overflow:
      S.Diags.report(diag::arithmetic_overflow, E.getRange(), S.sourceText(E.getRange()));
      break;
    case QuantityError::InexactDivision:
      S.Diags.report(diag::inexact_division, E.getRange(), L->format(), R->format(), L->getInteger() % R->getInteger());
      break;
    case QuantityError::DivisionByZero:
      S.Diags.report(diag::division_by_zero, B.RHS->getRange());
      break;
    case QuantityError::DimensionMismatch:
      S.Diags.report(diag::unit_mismatch, B.OpRange, opVerb(B.Op), L->getDimension().describe(),
                     R->getDimension().describe());
      break;
    case QuantityError::NotAnInteger:
      S.Diags.report(diag::not_a_number, E.getRange(), S.sourceText(E.getRange()),
                     "not an integer remainder; % needs integers");
      break;
    }
    return llvm::None;
  }
  case ast::Expr::Kind::Path: {
    const Value *V = resolveReference(llvm::cast<ast::PathExpr>(E), FromPath);
    if (!V)
      return llvm::None;
    if (V->K != Value::Kind::Number) {
      S.Diags.report(diag::not_a_number, E.getRange(), S.sourceText(E.getRange()), V->describe());
      return llvm::None;
    }
    return V->Num;
  }
  case ast::Expr::Kind::Sweep:
    S.Diags.report(diag::sweep_misplaced, E.getRange());
    return llvm::None;
  default:
    S.Diags.report(diag::not_a_number, E.getRange(), S.sourceText(E.getRange()),
                   E.getKind() == ast::Expr::Kind::String ? "a string"
                   : E.getKind() == ast::Expr::Kind::Bool ? "a boolean"
                   : E.getKind() == ast::Expr::Kind::List ? "a list"
                                                          : "a call");
    return llvm::None;
  }
}

/// Names: enum values, scope lists, and definition references.
llvm::Optional<Value> Scope::evalNamed(const ast::Expr &E, const FieldSpec &F) {
  auto Unknown = [&](const std::string &Name, SMRange R, llvm::ArrayRef<StringRef> Candidates, StringRef What) {
    auto Fix = closestMatch(Name, Candidates);
    auto D = S.Diags.report(diag::unknown_enum_value, R, Name, What.str(), didYouMean(Name, Candidates));
    if (Fix)
      D.fixit(R, Fix->str());
  };
  auto EnumName = [&](const ast::Expr &X, llvm::ArrayRef<StringRef> Allowed, StringRef What) -> llvm::Optional<Value> {
    const auto *P = llvm::dyn_cast<ast::PathExpr>(&X);
    if (!P) {
      if (X.getKind() == ast::Expr::Kind::Sweep)
        S.Diags.report(diag::sweep_misplaced, X.getRange());
      else
        S.Diags.report(diag::type_mismatch, X.getRange(), F.Path, describeType(F), S.sourceText(X.getRange()));
      return llvm::None;
    }
    std::string Name = P->joined();
    if (!llvm::is_contained(Allowed, StringRef(Name))) {
      Unknown(Name, X.getRange(), Allowed, What);
      return llvm::None;
    }
    return Value::name(Name, X.getRange());
  };
  std::vector<StringRef> Allowed(F.EnumValues.begin(), F.EnumValues.end());

  switch (F.Type) {
  case FieldType::Enum:
    return EnumName(E, Allowed, F.Path);
  case FieldType::DataSource:
    return EnumName(E, {"mock"}, "data source (mock or real(\"path\"))");
  case FieldType::Attention:
    return EnumName(E, {"gqa"}, "attention (gqa or mla(...))");
  case FieldType::Recompute:
    return EnumName(E, {"none", "full"}, "recompute setting (none, full, full(...) or selective(...))");
  case FieldType::ScopeList:
  case FieldType::FlagOrList: {
    // `none` (scopes only), a list of names, or a bare name (a list of
    // one); a flag's true/false were taken before.
    bool Scopes = F.Type == FieldType::ScopeList;
    StringRef What = Scopes ? "CUDA-graph scope" : "offload module";
    Value V;
    V.K = Value::Kind::List;
    V.Range = E.getRange();
    if (const auto *P = llvm::dyn_cast<ast::PathExpr>(&E); Scopes && P && P->joined() == "none")
      return V;
    std::vector<const ast::Expr *> Items;
    if (const auto *L = llvm::dyn_cast<ast::ListExpr>(&E); L && E.getKind() == ast::Expr::Kind::List) {
      for (const ast::ExprPtr &X : L->Elements)
        Items.push_back(X.get());
      if (Items.empty() && !Scopes) {
        S.Diags.report(diag::type_mismatch, E.getRange(), F.Path, describeType(F), "an empty list");
        return llvm::None;
      }
    } else {
      Items.push_back(&E);
    }
    for (const ast::Expr *X : Items) {
      auto N = EnumName(*X, Allowed, What);
      if (!N)
        return llvm::None;
      V.Elements.push_back(*N);
    }
    return V;
  }
  default:
    break;
  }

  // A reference to a definition.
  ast::DefKind Want = F.Type == FieldType::ModelRef ? ast::DefKind::Model
                      : F.Type == FieldType::GpuRef ? ast::DefKind::Gpu
                                                    : ast::DefKind::Cluster;
  const auto *P = llvm::dyn_cast<ast::PathExpr>(&E);
  if (!P) {
    if (E.getKind() == ast::Expr::Kind::Sweep)
      S.Diags.report(diag::sweep_misplaced, E.getRange());
    else
      S.Diags.report(diag::type_mismatch, E.getRange(), F.Path, describeType(F), S.sourceText(E.getRange()));
    return llvm::None;
  }
  if (P->Parts.size() > 1) {
    // `gpu = cluster.gpu`: a field holding a reference.
    const Value *V = resolveReference(*P, F.Path);
    if (!V)
      return llvm::None;
    if (V->K != Value::Kind::Ref || V->Ref->kind() != Want) {
      S.Diags.report(diag::type_mismatch, E.getRange(), F.Path, describeType(F), V->describe());
      return llvm::None;
    }
    return *V;
  }
  std::string Name = P->joined();
  DefInfo *D = S.lookup(Name);
  if (!D) {
    std::vector<StringRef> Names = S.namesOfKind(Want);
    auto Fix = closestMatch(Name, Names);
    auto Diag = S.Diags.report(diag::unknown_name, E.getRange(), ast::defKindName(Want), Name, didYouMean(Name, Names));
    if (Fix)
      Diag.fixit(E.getRange(), Fix->str());
    return llvm::None;
  }
  if (D->kind() != Want) {
    S.Diags.report(diag::wrong_kind, E.getRange(), Name, ast::defKindName(D->kind()), F.Path, ast::defKindName(Want))
        .note(diag::note_defined_here, D->AST->NameRange, Name);
    return llvm::None;
  }
  if (!S.resolve(*D))
    return llvm::None;
  Value V;
  V.K = Value::Kind::Ref;
  V.Text = Name;
  V.Ref = D;
  V.Range = E.getRange();
  return V;
}

/// Calls: selective(...), full(...), real("..."), mla(...), hf("...").
llvm::Optional<Value> Scope::evalCall(const ast::Expr &E, const FieldSpec &F) {
  const auto &C = llvm::cast<ast::CallExpr>(E);
  Value V;
  V.K = Value::Kind::Call;
  V.Text = C.Callee;
  V.Range = E.getRange();
  auto Bad = [&](const std::string &Message) {
    S.Diags.report(diag::bad_call, E.getRange(), Message);
    return llvm::None;
  };
  auto NamedCounts = [&](llvm::ArrayRef<StringRef> Names, llvm::ArrayRef<StringRef> Required) -> bool {
    for (const ast::Argument &A : C.Args) {
      if (A.Name.empty()) {
        S.Diags.report(diag::bad_call, A.Value->getRange(),
                       fmt::format("{}() takes named arguments ({})", C.Callee, llvm::join(Names, ", ")));
        return false;
      }
      if (!llvm::is_contained(Names, StringRef(A.Name))) {
        S.Diags.report(diag::bad_call, A.NameRange,
                       fmt::format("{}() has no argument '{}'{}", C.Callee, A.Name, didYouMean(A.Name, Names)));
        return false;
      }
      if (V.named(A.Name)) {
        S.Diags.report(diag::bad_call, A.NameRange, fmt::format("argument '{}' is given twice", A.Name));
        return false;
      }
      V.Named.push_back({A.Name, Value()});
      if (A.Name == "method") {
        const auto *P = llvm::dyn_cast<ast::PathExpr>(A.Value.get());
        if (!P || (P->joined() != "uniform" && P->joined() != "block")) {
          S.Diags.report(diag::bad_call, A.Value->getRange(), "method must be uniform or block");
          return false;
        }
        V.Named.back().second = Value::name(P->joined(), A.Value->getRange());
        continue;
      }
      auto Q = evalNumber(*A.Value, F.Path);
      if (!Q)
        return false;
      if (!Q->isInteger() || !Q->getDimension().isNone() || Q->getInteger() < 1) {
        S.Diags.report(diag::bad_call, A.Value->getRange(),
                       fmt::format("'{}' must be a positive integer count, not {}", A.Name, Q->format()));
        return false;
      }
      V.Named.back().second = Value::number(*Q, A.Value->getRange());
    }
    for (StringRef R : Required)
      if (!V.named(R)) {
        S.Diags.report(diag::bad_call, E.getRange(), fmt::format("{}() needs {} = N", C.Callee, R.str()));
        return false;
      }
    return true;
  };
  auto OneString = [&]() -> bool {
    if (C.Args.size() != 1 || !C.Args[0].Name.empty() || !llvm::isa<ast::StringLit>(C.Args[0].Value.get())) {
      S.Diags.report(diag::bad_call, E.getRange(),
                     fmt::format("{}() takes one string: {}(\"path\")", C.Callee, C.Callee));
      return false;
    }
    Value Str;
    Str.K = Value::Kind::String;
    Str.Text = llvm::cast<ast::StringLit>(C.Args[0].Value.get())->Value;
    Str.Range = C.Args[0].Value->getRange();
    V.Elements.push_back(Str);
    return true;
  };

  switch (F.Type) {
  case FieldType::Recompute:
    if (C.Callee == "full") {
      if (!NamedCounts({"method", "layers"}, {}))
        return llvm::None;
      return V;
    }
    if (C.Callee == "selective") {
      if (C.Args.empty())
        return Bad("selective() needs at least one module, e.g. selective(moe_act, layernorm)");
      std::vector<StringRef> Modules(F.EnumValues.begin(), F.EnumValues.end());
      for (const ast::Argument &A : C.Args) {
        const auto *P = llvm::dyn_cast<ast::PathExpr>(A.Value.get());
        if (!A.Name.empty() || !P) {
          S.Diags.report(diag::bad_call, A.Value->getRange(), "selective() takes module names");
          return llvm::None;
        }
        std::string M = P->joined();
        if (!llvm::is_contained(Modules, StringRef(M))) {
          auto Fix = closestMatch(M, Modules);
          auto D = S.Diags.report(diag::unknown_enum_value, A.Value->getRange(), M, "recompute module",
                                  didYouMean(M, Modules));
          if (Fix)
            D.fixit(A.Value->getRange(), Fix->str());
          return llvm::None;
        }
        V.Elements.push_back(Value::name(M, A.Value->getRange()));
      }
      return V;
    }
    return Bad(fmt::format("unknown recompute setting '{}()'; expected full(...) or selective(...)", C.Callee));
  case FieldType::DataSource:
    if (C.Callee != "real")
      return Bad(fmt::format("unknown data source '{}()'; expected mock or real(\"path\")", C.Callee));
    if (!OneString())
      return llvm::None;
    return V;
  case FieldType::Attention:
    if (C.Callee != "mla")
      return Bad(fmt::format("unknown attention '{}()'; expected gqa or mla(...)", C.Callee));
    if (!NamedCounts({"q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim"},
                     {"kv_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim"}))
      return llvm::None;
    return V;
  case FieldType::ModelRef:
    if (C.Callee != "hf")
      return Bad(fmt::format("unknown model source '{}()'; expected a model name or hf(\"config.json\")", C.Callee));
    if (!OneString())
      return llvm::None;
    if (DefInfo *Imported = S.importHF(V.Elements[0].Text, E.getRange())) {
      Value Ref;
      Ref.K = Value::Kind::Ref;
      Ref.Text = std::string(Imported->name());
      Ref.Ref = Imported;
      Ref.Range = E.getRange();
      return Ref;
    }
    return llvm::None;
  default:
    S.Diags.report(diag::type_mismatch, E.getRange(), F.Path, describeType(F), C.Callee + "(...)");
    return llvm::None;
  }
}
