//===- Completion.cpp - Field names, enum values and definition names -----===//
//
// A half-typed entry (`parallel.` or `precision = fp8.`) seldom parses, so
// the context comes from the tokens before the cursor (the parser's lexer,
// which reads any text): the braces
// give the definition and the section, the current entry's tokens say
// whether a field name or a value is being typed, and for which field.
//
//===----------------------------------------------------------------------===//
#include "Features.h"

#include "moec/Sema/Schema.h"
#include "moec/Syntax/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include <fmt/format.h>

using namespace moec;
using namespace moec::lsp;
namespace json = llvm::json;
using llvm::StringRef;

namespace {

enum CompletionKind {
  KindClass = 7,
  KindModule = 9,
  KindValue = 12,
  KindKeyword = 14,
  KindField = 5,
  KindReference = 18,
  KindEnumMember = 20
};

struct Token {
  enum Kind { Ident, Number, String, Punct } K;
  StringRef Text;
  size_t Begin;
};

struct Frame {
  bool IsDefinition = false;
  llvm::Optional<ast::DefKind> Kind; // None: a block moec does not know
  std::vector<std::string> Path;     // a section's path
};

bool isIdentChar(char C) { return llvm::isAlnum(C) || C == '_'; }

llvm::Optional<ast::DefKind> defKeyword(StringRef S) {
  if (S == "recipe")
    return ast::DefKind::Recipe;
  if (S == "model")
    return ast::DefKind::Model;
  if (S == "gpu")
    return ast::DefKind::Gpu;
  if (S == "cluster")
    return ast::DefKind::Cluster;
  return llvm::None;
}

/// Drops leading annotations (`@allow(id, reason = "...")`) from an entry.
std::vector<Token> withoutAnnotations(const std::vector<Token> &Ts) {
  size_t I = 0;
  while (I < Ts.size() && Ts[I].K == Token::Punct && Ts[I].Text == "@") {
    I += 2; // '@' and the name
    if (I < Ts.size() && Ts[I].Text == "(") {
      int Depth = 0;
      for (; I < Ts.size(); ++I) {
        if (Ts[I].Text == "(")
          ++Depth;
        else if (Ts[I].Text == ")" && --Depth == 0) {
          ++I;
          break;
        }
      }
    }
  }
  return std::vector<Token>(Ts.begin() + std::min(I, Ts.size()), Ts.end());
}

/// What the text before the cursor says about it.
struct Context {
  bool Suppressed = false; // in a comment or a string
  std::vector<Frame> Frames;
  std::vector<Token> Entry;       // the current entry's tokens, before the word
  std::vector<std::string> Calls; // open calls, innermost last ("" for '[')
  size_t WordStart = 0;           // the word being typed (with dots) starts here
};

/// Reads the text before the cursor with the parser's lexer (lexText): the
/// tokens say which blocks are open, and what the current entry has so far.
Context scan(StringRef Text, size_t Offset) {
  Context C;
  Offset = std::min(Offset, Text.size());
  size_t WordStart = Offset;
  while (WordStart > 0 && (isIdentChar(Text[WordStart - 1]) || Text[WordStart - 1] == '.'))
    --WordStart;
  C.WordStart = WordStart;
  int Depth = 0;
  auto Push = [&](Token::Kind K, const LexedToken &T) {
    if (T.Begin < WordStart)
      C.Entry.push_back({K, Text.slice(T.Begin, T.End), T.Begin});
  };
  // Entries end at line ends, except inside brackets, and a definition's
  // header may put its '{' on the next line.
  auto LineBreaks = [&](size_t From, size_t To) {
    if (Depth == 0 && !C.Frames.empty() && Text.slice(From, To).contains('\n'))
      C.Entry.clear();
  };
  size_t Previous = 0;
  for (const LexedToken &T : lexText(Text.take_front(Offset))) {
    LineBreaks(Previous, T.Begin);
    Previous = T.End;
    StringRef Word = Text.slice(T.Begin, T.End);
    switch (T.K) {
    case LexedToken::Comment:
      // A comment runs to its line's end: the cursor is in it when it
      // reaches the cursor.
      if (T.End >= Offset) {
        C.Suppressed = true;
        return C;
      }
      continue;
    case LexedToken::String:
    case LexedToken::UnterminatedString:
      if (T.K == LexedToken::UnterminatedString && T.End >= Offset) { // the cursor is inside the string
        C.Suppressed = true;
        return C;
      }
      Push(Token::String, T);
      continue;
    case LexedToken::Name:
    case LexedToken::Keyword:
      // At the top level a keyword starts a new item (its annotations are
      // of no interest here).
      if (C.Frames.empty() && (defKeyword(Word) || Word == "import"))
        C.Entry.clear();
      Push(Token::Ident, T);
      continue;
    case LexedToken::Number:
      Push(Token::Number, T);
      continue;
    case LexedToken::Punct:
    case LexedToken::Stray:
      break;
    }
    switch (Word.empty() ? '\0' : Word.front()) {
    case '{': {
      Frame F;
      std::vector<Token> Header = withoutAnnotations(C.Entry);
      if (C.Frames.empty()) {
        F.IsDefinition = true;
        if (!Header.empty() && Header[0].K == Token::Ident)
          F.Kind = defKeyword(Header[0].Text);
      } else {
        F.Kind = C.Frames.back().Kind;
        for (const Token &Tok : Header)
          if (Tok.K == Token::Ident)
            F.Path.push_back(Tok.Text.str());
      }
      C.Frames.push_back(std::move(F));
      C.Entry.clear();
      C.Calls.clear();
      Depth = 0;
      continue;
    }
    case '}':
      if (!C.Frames.empty())
        C.Frames.pop_back();
      C.Entry.clear();
      C.Calls.clear();
      Depth = 0;
      continue;
    case ';':
      if (Depth == 0) {
        C.Entry.clear();
        continue;
      }
      break;
    case '(':
    case '[':
      ++Depth;
      C.Calls.push_back(Word == "(" && !C.Entry.empty() && C.Entry.back().K == Token::Ident ? C.Entry.back().Text.str()
                                                                                            : std::string());
      break;
    case ')':
    case ']':
      if (Depth > 0) {
        --Depth;
        C.Calls.pop_back();
      }
      break;
    default:
      break;
    }
    Push(Token::Punct, T);
  }
  LineBreaks(Previous, Offset);
  return C;
}

class Items {
public:
  Items(const LineTable &Lines, size_t ReplaceFrom, size_t Cursor)
      : Range(rangeJSON(Lines.position(ReplaceFrom), Lines.position(Cursor))) {}

  void add(StringRef Label, int Kind, StringRef Detail, StringRef Doc = "") {
    if (!Labels.insert(Label).second)
      return;
    json::Object Item{
        {"label", Label}, {"kind", Kind}, {"textEdit", json::Object{{"range", Range}, {"newText", Label}}}};
    if (!Detail.empty())
      Item["detail"] = jsonString(Detail);
    if (!Doc.empty())
      Item["documentation"] = json::Object{{"kind", "markdown"}, {"value", jsonString(Doc)}};
    List.push_back(std::move(Item));
  }
  json::Value result() { return json::Object{{"isIncomplete", false}, {"items", std::move(List)}}; }

private:
  json::Value Range;
  json::Array List;
  llvm::StringSet<> Labels;
};

void addNames(Items &Out, const Analysis *Names, ast::DefKind Kind) {
  if (!Names)
    return;
  for (const Sema::DefinitionRef &D : Names->sema().definitions())
    if (D.AST->Kind == Kind)
      Out.add(D.AST->Name, KindReference,
              fmt::format("{}{}", D.Builtin ? "built-in " : "", ast::defKindName(Kind).str()));
}

/// The fields and sections directly inside Section of a Kind definition.
void addFields(Items &Out, ast::DefKind Kind, StringRef Section) {
  std::string Prefix = Section.empty() ? "" : (Section + ".").str();
  // Fields first, so that a name that is both (`cluster`) documents the field.
  for (int Pass = 0; Pass < 2; ++Pass)
    for (const FieldSpec &F : schemaFor(Kind)) {
      StringRef Path = F.Path;
      if (!Path.startswith(Prefix))
        continue;
      StringRef Rest = Path.drop_front(Prefix.size());
      StringRef Head = Rest.split('.').first;
      bool IsLeaf = Head.size() == Rest.size();
      if (IsLeaf && Pass == 0)
        Out.add(Head, KindField, describeType(F), F.Doc);
      else if (!IsLeaf && Pass == 1)
        Out.add(Head, KindModule, "section", fmt::format("`{}{}` section", Prefix, Head.str()));
    }
}

void addValues(Items &Out, const FieldSpec &F, const Context &C, const Analysis *Names) {
  StringRef Call = C.Calls.empty() ? StringRef() : StringRef(C.Calls.back());
  if (F.Type == FieldType::Recompute && Call == "selective") {
    for (StringRef M : recomputeModules())
      Out.add(M, KindEnumMember, "recompute module");
    return;
  }
  if (!Call.empty())
    return; // an argument of hf(...), real(...), full(...): nothing to offer
  switch (F.Type) {
  case FieldType::Enum:
  case FieldType::ScopeList:
    if (F.Type == FieldType::ScopeList)
      Out.add("none", KindEnumMember, F.Path);
    for (StringRef V : F.EnumValues)
      Out.add(V, KindEnumMember, F.Path);
    break;
  case FieldType::Bool:
    Out.add("true", KindKeyword, "bool");
    Out.add("false", KindKeyword, "bool");
    break;
  case FieldType::FlagOrList:
    Out.add("true", KindKeyword, "bool");
    Out.add("false", KindKeyword, "bool");
    for (StringRef V : F.EnumValues)
      Out.add(V, KindEnumMember, F.Path);
    break;
  case FieldType::ModelRef:
    addNames(Out, Names, ast::DefKind::Model);
    Out.add("hf", KindClass, "hf(\"config.json\"): import a Hugging Face config");
    break;
  case FieldType::GpuRef:
    addNames(Out, Names, ast::DefKind::Gpu);
    break;
  case FieldType::ClusterRef:
    addNames(Out, Names, ast::DefKind::Cluster);
    break;
  case FieldType::Recompute:
    Out.add("none", KindEnumMember, "no recomputation");
    Out.add("full", KindEnumMember, "full or full(method = uniform|block, layers = N)");
    Out.add("selective", KindEnumMember, "selective(MODULE, ...)");
    break;
  case FieldType::DataSource:
    Out.add("mock", KindEnumMember, "synthetic tokens");
    Out.add("real", KindEnumMember, "real(\"path\"): a tokenized dataset");
    break;
  case FieldType::Attention:
    Out.add("gqa", KindEnumMember, "grouped-query attention");
    Out.add("mla", KindEnumMember, "mla(q_lora_rank = N, ...): multi-head latent attention");
    break;
  default:
    break;
  }
  if (F.Owner == ast::DefKind::Recipe && C.Calls.empty())
    Out.add("sweep", KindKeyword, "sweep [a, b, ...]: one recipe per value");
}

} // namespace

json::Value moec::lsp::completionAt(StringRef Text, size_t Offset, const Analysis *Names) {
  LineTable Lines(Text);
  Offset = std::min(Offset, Text.size());
  Context C = scan(Text, Offset);
  json::Value Empty = json::Object{{"isIncomplete", false}, {"items", json::Array()}};
  if (C.Suppressed)
    return Empty;
  StringRef Word = Text.slice(C.WordStart, Offset);
  std::vector<Token> Entry = withoutAnnotations(C.Entry);

  // `@allow(` takes the ID of a warning or remark; IDs are kebab-case, so
  // the word being replaced extends over '-'.
  if (!C.Calls.empty() && C.Calls.back() == "allow") {
    size_t From = Offset;
    while (From > 0 && (isIdentChar(Text[From - 1]) || Text[From - 1] == '-'))
      --From;
    StringRef Before = Text.take_front(From).rtrim();
    if (!Before.endswith("("))
      return Empty; // the reason, not the ID
    Items Out(Lines, From, Offset);
    for (const DiagInfo &I : allDiagInfos())
      if (I.DefaultSeverity != Severity::Error)
        Out.add(I.Id, KindValue, severityName(I.DefaultSeverity), I.Explanation);
    return Out.result();
  }

  if (C.Frames.empty()) {
    Items Out(Lines, C.WordStart, Offset);
    if (Entry.empty()) {
      for (StringRef K : {"recipe", "model", "gpu", "cluster", "import"})
        Out.add(K, KindKeyword, "");
    } else if (Entry.size() == 3 && Entry[2].Text == "extends") {
      if (auto Kind = defKeyword(Entry[0].Text))
        addNames(Out, Names, *Kind);
    }
    return Out.result();
  }
  if (!C.Frames.front().Kind)
    return Empty;
  ast::DefKind Kind = *C.Frames.front().Kind;
  std::vector<std::string> Section;
  for (const Frame &F : C.Frames)
    Section.insert(Section.end(), F.Path.begin(), F.Path.end());

  auto Equals = llvm::find_if(Entry, [](const Token &T) { return T.K == Token::Punct && T.Text == "="; });
  if (Equals == Entry.end()) {
    // A field name: only a (dotted) path may precede the cursor's word.
    for (const Token &T : Entry)
      if (!(T.K == Token::Ident || (T.K == Token::Punct && T.Text == ".")))
        return Empty;
    for (const Token &T : Entry)
      if (T.K == Token::Ident)
        Section.push_back(T.Text.str());
    // In `parallel.t`, `parallel` is a section and `t` the word.
    size_t LastDot = Word.rfind('.');
    if (LastDot != StringRef::npos)
      for (StringRef Part : llvm::split(Word.take_front(LastDot), '.'))
        Section.push_back(Part.str());
    size_t From = LastDot == StringRef::npos ? C.WordStart : C.WordStart + LastDot + 1;
    Items Out(Lines, From, Offset);
    addFields(Out, Kind, llvm::join(Section, "."));
    return Out.result();
  }
  for (auto It = Entry.begin(); It != Equals; ++It)
    if (It->K == Token::Ident)
      Section.push_back(It->Text.str());
  const FieldSpec *F = lookupField(Kind, llvm::join(Section, "."));
  if (!F)
    return Empty;
  Items Out(Lines, C.WordStart, Offset);
  addValues(Out, *F, C, Names);
  return Out.result();
}
