//===- Parser.cpp - ANTLR glue: checks, parse, errors, AST ----------------===//
#include "moec/Syntax/Parser.h"

#include "MoeLexer.h"
#include "MoeParser.h"
#include "antlr4-runtime.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ConvertUTF.h"

using namespace moec;
using antlr4::Token;
using syntax::MoeLexer;
using syntax::MoeParser;

namespace {

/// Maps ANTLR's code-point indices back to byte offsets in the buffer.
class Locator {
public:
  /// InputSize is the number of code points ANTLR's input stream holds: it
  /// silently drops a leading byte-order mark, so its indices start after it.
  /// Inserted: offsets in the parsed text of characters that syntax-error
  /// recovery added (sorted); they map to the end of the line before the
  /// one they were added to.
  Locator(llvm::StringRef Text, size_t InputSize, std::vector<size_t> Inserted = {})
      : Text(Text), Inserted(std::move(Inserted)) {
    if (llvm::all_of(Text, [](char C) { return (unsigned char)C < 0x80; }))
      return;
    for (size_t I = 0; I < Text.size(); ++I)
      if (((unsigned char)Text[I] & 0xC0) != 0x80)
        CodePointToByte.push_back(I);
    CodePointToByte.push_back(Text.size());
    if (CodePointToByte.size() - 1 > InputSize)
      Dropped = CodePointToByte.size() - 1 - InputSize;
  }
  llvm::SMLoc at(size_t CodePoint) const {
    auto It = std::lower_bound(Inserted.begin(), Inserted.end(), CodePoint);
    bool Added = It != Inserted.end() && *It == CodePoint;
    CodePoint -= size_t(It - Inserted.begin());
    // An added brace sits at the end of the line before the one it was
    // added to: the entries around it stay on separate lines.
    if (Added && CodePoint > 0)
      --CodePoint;
    CodePoint += Dropped;
    size_t Byte = CodePointToByte.empty()              ? CodePoint
                  : CodePoint < CodePointToByte.size() ? CodePointToByte[CodePoint]
                                                       : Text.size();
    return llvm::SMLoc::getFromPointer(Text.data() + std::min(Byte, Text.size()));
  }
  llvm::SMRange range(const Token *T) const {
    if (!T || T->getType() == Token::EOF) {
      llvm::SMLoc End = at(Text.size() + CodePointToByte.size());
      return {End, End};
    }
    return {at(T->getStartIndex()), at(T->getStopIndex() + 1)};
  }
  llvm::SMRange range(const Token *Start, const Token *Stop) const {
    llvm::SMRange A = range(Start), B = range(Stop ? Stop : Start);
    if (B.End.getPointer() < A.Start.getPointer())
      B = A;
    return {A.Start, B.End};
  }
  llvm::SMRange range(antlr4::ParserRuleContext *Ctx) const { return range(Ctx->getStart(), Ctx->getStop()); }
  /// Source text of a token or rule, sliced from the buffer (ANTLR's getText
  /// re-encodes from UTF-32 on every call).
  std::string text(const Token *T) const {
    llvm::SMRange R = range(T);
    return std::string(R.Start.getPointer(), R.End.getPointer());
  }
  std::string text(antlr4::ParserRuleContext *Ctx) const {
    llvm::SMRange R = range(Ctx);
    return std::string(R.Start.getPointer(), R.End.getPointer());
  }

private:
  llvm::StringRef Text;
  std::vector<size_t> Inserted;
  std::vector<size_t> CodePointToByte;
  size_t Dropped = 0;
};

/// Rejects what is not text before ANTLR sees it: invalid UTF-8 and control
/// bytes. Returns false after reporting.
bool checkEncoding(llvm::StringRef Text, DiagnosticEngine &Diags, const ParseLimits &Limits) {
  auto At = [&](size_t Offset) {
    llvm::SMLoc L = llvm::SMLoc::getFromPointer(Text.data() + Offset);
    return llvm::SMRange(L, llvm::SMLoc::getFromPointer(Text.data() + Offset + 1));
  };
  if (Text.size() > Limits.MaxFileBytes) {
    Diags.report(diag::file_too_large, At(0), Text.size(), Limits.MaxFileBytes);
    return false;
  }
  const llvm::UTF8 *Begin = reinterpret_cast<const llvm::UTF8 *>(Text.data());
  const llvm::UTF8 *End = Begin + Text.size();
  const llvm::UTF8 *Cursor = Begin;
  if (!llvm::isLegalUTF8String(&Cursor, End)) {
    Diags.report(diag::invalid_utf8, At(Cursor - Begin), unsigned(*Cursor));
    return false;
  }
  for (size_t I = 0; I < Text.size(); ++I) {
    unsigned char C = Text[I];
    if ((C < 0x20 && C != '\t' && C != '\n' && C != '\r') || C == 0x7f) {
      Diags.report(diag::binary_input, At(I), unsigned(C));
      return false;
    }
  }
  return true;
}

/// What a token of the grammar is, for diagnostics and for lexText.
LexedToken::Kind tokenKind(size_t Type) {
  switch (Type) {
  case MoeLexer::IDENT:
    return LexedToken::Name;
  case MoeLexer::IMPORT:
  case MoeLexer::RECIPE:
  case MoeLexer::MODEL:
  case MoeLexer::GPU:
  case MoeLexer::CLUSTER:
  case MoeLexer::EXTENDS:
  case MoeLexer::SWEEP:
  case MoeLexer::TRUE:
  case MoeLexer::FALSE:
    return LexedToken::Keyword;
  case MoeLexer::INT:
  case MoeLexer::FLOAT:
  case MoeLexer::QUANTITY:
    return LexedToken::Number;
  case MoeLexer::STRING:
    return LexedToken::String;
  case MoeLexer::UNTERMINATED_STRING:
    return LexedToken::UnterminatedString;
  case MoeLexer::COMMENT:
    return LexedToken::Comment;
  case MoeLexer::STRAY:
    return LexedToken::Stray;
  default:
    return LexedToken::Punct;
  }
}

std::string describeToken(const Token *T) {
  if (T->getType() == Token::EOF)
    return "end of file";
  switch (tokenKind(T->getType())) {
  case LexedToken::Name:
    return "name '" + T->getText() + "'";
  case LexedToken::Number:
    return "number '" + T->getText() + "'";
  case LexedToken::String:
    return "string " + T->getText();
  case LexedToken::Keyword:
    // `recipe recipe {}`: say why a word that looks like a name is not one.
    return "keyword '" + T->getText() + "'";
  default:
    return "'" + T->getText() + "'";
  }
}

std::string describeExpected(const antlr4::misc::IntervalSet &Set, const antlr4::dfa::Vocabulary &Vocab) {
  std::vector<std::string> Names;
  // Operators and '.' could continue almost anything; listing them drowns
  // what the user most likely left out, so they are named only when nothing
  // else could come.
  std::vector<std::string> Continuations;
  bool ValueAdded = false, NameAdded = false;
  for (ssize_t Type : Set.toList()) {
    switch (Type) {
    case MoeLexer::STRING:
      if (!Set.contains(size_t(MoeLexer::INT))) {
        Names.push_back("a string"); // import "file.moe"
        break;
      }
      LLVM_FALLTHROUGH;
    case MoeLexer::INT:
    case MoeLexer::FLOAT:
    case MoeLexer::QUANTITY:
    case MoeLexer::TRUE:
    case MoeLexer::FALSE:
    case MoeLexer::SWEEP:
    case MoeLexer::LBRACK:
    case MoeLexer::LPAREN:
      // Not where a value goes: a call's '(' or the list after `sweep`.
      if ((Type == MoeLexer::LPAREN || Type == MoeLexer::LBRACK) && !Set.contains(size_t(MoeLexer::INT))) {
        Names.push_back(Type == MoeLexer::LPAREN ? "'('" : "'['");
        break;
      }
      if (!ValueAdded)
        Names.push_back("a value");
      ValueAdded = true;
      break;
    case MoeLexer::IDENT:
    case MoeLexer::MODEL:
    case MoeLexer::GPU:
    case MoeLexer::CLUSTER:
    case MoeLexer::RECIPE:
      if (Set.contains(size_t(MoeLexer::IMPORT)) && Type != MoeLexer::IDENT) {
        Names.push_back("'" + llvm::StringRef(Vocab.getLiteralName(Type)).trim('\'').str() + "'");
        break;
      }
      if (!NameAdded)
        Names.push_back("a name");
      NameAdded = true;
      break;
    case ssize_t(Token::EOF):
      Names.push_back("end of file");
      break;
    default: {
      std::string Literal = Vocab.getLiteralName(Type);
      if (Literal.empty())
        Names.push_back(Vocab.getSymbolicName(Type));
      else if (Literal.size() == 3 && llvm::StringRef("+-*/%.").contains(Literal[1]))
        Continuations.push_back(Literal);
      else
        Names.push_back(Literal);
    }
    }
  }
  if (Names.empty())
    Names = std::move(Continuations);
  if (Names.empty())
    return "something else";
  if (Names.size() == 1)
    return Names[0];
  std::string Last = Names.back();
  Names.pop_back();
  return llvm::join(Names, ", ") + " or " + Last;
}

/// Turns ANTLR's recognition errors into diagnostics that name what was
/// found, what could come instead, and which block is left open.
///
/// Only the first syntax error of a parse is reported, and that parse stops
/// there: what ANTLR's recovery finds after it is mostly the same mistake
/// seen again (`recipe recipe {}` would also complain about the '{'), and a
/// parse that goes on after an error is no longer bounded by the token pass's
/// nesting and operator counts. parseBuffer recovers by itself instead: it
/// blanks the entry that holds the error and parses again.
class DiagnosingErrorStrategy : public antlr4::DefaultErrorStrategy {
public:
  DiagnosingErrorStrategy(DiagnosticEngine &Diags, const Locator &Loc) : Diags(Diags), Loc(Loc) {}
  unsigned NumErrors = 0;
  /// The token the first error was found at (its index in the stream), or -1.
  int64_t OffendingIndex = -1;

protected:
  void reportNoViableAlternative(antlr4::Parser *P, const antlr4::NoViableAltException &E) override {
    report(P, E.getOffendingToken(), expectedAtOffendingToken(P, E));
  }
  void reportInputMismatch(antlr4::Parser *P, const antlr4::InputMismatchException &E) override {
    report(P, E.getOffendingToken(), E.getExpectedTokens());
  }
  void reportFailedPredicate(antlr4::Parser *P, const antlr4::FailedPredicateException &E) override {
    report(P, E.getOffendingToken(), P->getExpectedTokens());
  }
  void reportUnwantedToken(antlr4::Parser *P) override {
    if (inErrorRecoveryMode(P))
      return;
    beginErrorCondition(P);
    report(P, P->getCurrentToken(), getExpectedTokens(P));
  }
  void reportMissingToken(antlr4::Parser *P) override {
    if (inErrorRecoveryMode(P))
      return;
    beginErrorCondition(P);
    report(P, P->getCurrentToken(), getExpectedTokens(P));
  }

private:
  /// The parser's expected set is the one where the decision started: for
  /// `seq_len 4K` that is what may begin an entry ('@' or a name), not the
  /// '=' that is missing before `4K`. The configurations prediction reached
  /// just before the offending token know what could have come there.
  static antlr4::misc::IntervalSet expectedAtOffendingToken(antlr4::Parser *P, const antlr4::NoViableAltException &E) {
    antlr4::misc::IntervalSet Set;
    if (antlr4::atn::ATNConfigSet *Configs = E.getDeadEndConfigs())
      for (const auto &Config : Configs->configs)
        for (antlr4::atn::Transition *T : Config->state->transitions)
          if (!T->isEpsilon() && T->getSerializationType() != antlr4::atn::Transition::NOT_SET)
            Set.addAll(T->label());
    return Set.isEmpty() ? P->getExpectedTokens() : Set;
  }

  void report(antlr4::Parser *P, Token *Offending, const antlr4::misc::IntervalSet &Expected) {
    ++NumErrors;
    if (Offending)
      OffendingIndex = int64_t(Offending->getTokenIndex());
    reportFirst(P, Offending, Expected);
    throw antlr4::ParseCancellationException();
  }

  void reportFirst(antlr4::Parser *P, Token *Offending, const antlr4::misc::IntervalSet &Expected) {
    // The lexer pass already reported stray characters and broken strings.
    if (Offending && (Offending->getType() == MoeLexer::STRAY || Offending->getType() == MoeLexer::UNTERMINATED_STRING))
      return;
    llvm::SMRange Where = where(P, Offending);
    // End of file, an import or what starts a definition (`recipe s {`,
    // not `recipe s = 1`) where the block could still be closed means the
    // block was never closed. The test is on the parser's next token and the
    // expected set there: prediction may have stopped a token later (at `s`).
    antlr4::TokenStream *In = P->getTokenStream();
    Token *Next = P->getCurrentToken();
    auto IsDefinitionKeyword = [](size_t Type) {
      return Type == MoeLexer::RECIPE || Type == MoeLexer::MODEL || Type == MoeLexer::GPU || Type == MoeLexer::CLUSTER;
    };
    auto *Entry = dynamic_cast<MoeParser::EntryContext *>(P->getContext());
    bool CouldClose = P->getExpectedTokens().contains(size_t(MoeLexer::RBRACE)) ||
                      (Entry && Entry->getStart() == Next); // `recipe` may name a field
    if (Next && CouldClose &&
        (Next->getType() == Token::EOF || Next->getType() == MoeLexer::IMPORT ||
         (IsDefinitionKeyword(Next->getType()) && In->LA(2) == MoeLexer::IDENT && In->LT(3)->getText() != "="))) {
      if (reportUnclosed(P, where(P, Next)))
        return;
    }
    Diags.report(diag::unexpected_token, Where,
                 "unexpected " + describeToken(Offending) + "; expected " +
                     describeExpected(Expected, P->getVocabulary()));
  }

  /// The end of the file is reported just after the last token (comments
  /// aside): on the line where the missing text belongs, not on the empty
  /// line that usually follows it.
  llvm::SMRange where(antlr4::Parser *P, Token *T) const {
    if (!T || T->getType() != Token::EOF)
      return Loc.range(T);
    for (size_t I = T->getTokenIndex(); I-- > 0;) {
      Token *Previous = P->getTokenStream()->get(I);
      if (Previous->getChannel() == Token::DEFAULT_CHANNEL) {
        llvm::SMLoc End = Loc.range(Previous).End;
        return {End, End};
      }
    }
    return Loc.range(T);
  }

  bool reportUnclosed(antlr4::Parser *P, llvm::SMRange Where) {
    for (antlr4::RuleContext *Ctx = P->getContext(); Ctx; Ctx = dynamic_cast<antlr4::RuleContext *>(Ctx->parent)) {
      auto *Block = dynamic_cast<MoeParser::BlockContext *>(Ctx);
      if (!Block)
        continue;
      std::string What;
      if (auto *Section = dynamic_cast<MoeParser::SectionEntryContext *>(Block->parent))
        What = "section '" + Section->name()->getText() + "'";
      else if (auto *Def = dynamic_cast<MoeParser::DefinitionContext *>(Block->parent))
        What = (Def->kind ? Def->kind->getText() : std::string("definition")) + " '" +
               (Def->defName ? Def->defName->getText() : std::string("?")) + "'";
      else
        continue;
      Diags.report(diag::unclosed_block, Where, What).note(diag::note_opened_here, Loc.range(Block->getStart()), What);
      return true;
    }
    return false;
  }

  DiagnosticEngine &Diags;
  const Locator &Loc;
};

/// A stray character as the message shows it: invisible ones (a no-break
/// space or a byte-order mark pasted from a web page) by their code point.
std::string describeStray(const std::string &Text) {
  const llvm::UTF8 *Begin = reinterpret_cast<const llvm::UTF8 *>(Text.data());
  llvm::UTF32 CodePoint = 0;
  if (Text.size() < 2 ||
      llvm::convertUTF8Sequence(&Begin, Begin + Text.size(), &CodePoint, llvm::strictConversion) != llvm::conversionOK)
    return Text;
  bool Invisible = CodePoint == 0xA0 || CodePoint == 0xAD || (CodePoint >= 0x2000 && CodePoint <= 0x200F) ||
                   (CodePoint >= 0x2028 && CodePoint <= 0x202F) || (CodePoint >= 0x205F && CodePoint <= 0x206F) ||
                   CodePoint == 0x3000 || CodePoint == 0xFEFF;
  if (!Invisible)
    return Text;
  std::string Hex = llvm::utohexstr(CodePoint);
  return "U+" + std::string(Hex.size() < 4 ? 4 - Hex.size() : 0, '0') + Hex;
}

/// Files are bounded in bytes (ParseLimits::MaxFileBytes), but ANTLR's cost
/// is per token: about a microsecond and a few hundred bytes each through
/// lexing, parsing and tree building. A file of millions of one-character
/// tokens (`;;;;`, a long list of digits) would take seconds and gigabytes.
/// A real recipe file has a few hundred tokens; this allows thousands of
/// recipes in one file while keeping the worst case near a second.
constexpr size_t MaxTokens = 1u << 20;

/// A token stream that stops lexing once it holds more than a given number
/// of tokens.
class BoundedTokenStream : public antlr4::CommonTokenStream {
public:
  using CommonTokenStream::CommonTokenStream;

  /// Lexes the whole input; false if it has more than Max tokens (EOF
  /// included).
  bool fillAtMost(size_t Max) {
    lazyInit();
    while (!_fetchedEOF && _tokens.size() <= Max)
      fetch(1000);
    return _tokens.size() <= Max;
  }
};

/// The token pass: errors ANTLR would only report as "unexpected token", and
/// the resource bounds that keep the recursive-descent parser within its stack.
bool checkTokens(antlr4::CommonTokenStream &Tokens, const Locator &Loc, DiagnosticEngine &Diags,
                 const ParseLimits &Limits) {
  bool OK = true;
  unsigned Depth = 0, Operators = 0;
  // Each unary operator is one more level of the parser's recursion, and a
  // ',' or '=' inside a call or list does not take the parser back out of
  // the levels opened before the '(' or '['. So operators are counted along
  // the path from the start of the value: an argument starts from the count
  // its bracket opened at, not from zero.
  std::vector<unsigned> OperatorsAtOpen;
  size_t LastStrayLine = 0;
  for (Token *T : Tokens.getTokens()) {
    switch (T->getType()) {
    case MoeLexer::STRAY:
      // One per line: a line of garbage (a pasted binary, a wrong encoding)
      // is one mistake, and each diagnostic prints the whole line again.
      if (T->getLine() != LastStrayLine)
        Diags.report(diag::stray_character, Loc.range(T), describeStray(T->getText()));
      LastStrayLine = T->getLine();
      OK = false;
      break;
    case MoeLexer::UNTERMINATED_STRING:
      Diags.report(diag::unterminated_string, Loc.range(T));
      OK = false;
      break;
    case MoeLexer::STRING: {
      std::string Text = T->getText();
      for (size_t I = 1; I + 1 < Text.size(); ++I) {
        if (Text[I] != '\\')
          continue;
        char E = Text[I + 1];
        if (E != '"' && E != '\\' && E != 'n') {
          llvm::SMLoc Start = Loc.range(T).Start;
          llvm::SMLoc At = llvm::SMLoc::getFromPointer(Start.getPointer() + I);
          Diags.report(diag::invalid_escape, llvm::SMRange(At, llvm::SMLoc::getFromPointer(At.getPointer() + 2)),
                       std::string(1, E));
          OK = false;
        }
        ++I;
      }
      break;
    }
    case MoeLexer::LBRACE:
    case MoeLexer::LPAREN:
    case MoeLexer::LBRACK:
      if (++Depth > Limits.MaxNesting) {
        Diags.report(diag::nesting_too_deep, Loc.range(T), Limits.MaxNesting);
        return false;
      }
      if (T->getType() == MoeLexer::LBRACE) {
        Operators = 0;
        OperatorsAtOpen.clear();
      } else {
        OperatorsAtOpen.push_back(Operators);
      }
      break;
    case MoeLexer::RBRACE:
    case MoeLexer::RPAREN:
    case MoeLexer::RBRACK:
      if (Depth)
        --Depth;
      if (T->getType() == MoeLexer::RBRACE) {
        Operators = 0;
        OperatorsAtOpen.clear();
      } else if (!OperatorsAtOpen.empty()) {
        OperatorsAtOpen.pop_back();
      }
      break;
    default: {
      // Punctuation is one byte; read it from the buffer rather than asking
      // ANTLR for a fresh string per token.
      llvm::SMRange R = Loc.range(T);
      llvm::StringRef Text(R.Start.getPointer(), R.End.getPointer() - R.Start.getPointer());
      if (Text == ";") {
        Operators = 0;
        OperatorsAtOpen.clear();
      } else if (Text == "=" || Text == ",") {
        Operators = OperatorsAtOpen.empty() ? 0 : OperatorsAtOpen.back();
      } else if (Text.size() == 1 && llvm::StringRef("+-*/%").contains(Text[0]) &&
                 ++Operators > Limits.MaxOperatorsPerExpression) {
        Diags.report(diag::expression_too_long, Loc.range(T), Limits.MaxOperatorsPerExpression);
        return false;
      }
    }
    }
  }
  return OK;
}

std::string decodeString(llvm::StringRef Quoted) {
  std::string Out;
  llvm::StringRef Body = Quoted.drop_front().drop_back();
  for (size_t I = 0; I < Body.size(); ++I) {
    if (Body[I] == '\\' && I + 1 < Body.size()) {
      char E = Body[++I];
      Out.push_back(E == 'n' ? '\n' : E);
    } else {
      Out.push_back(Body[I]);
    }
  }
  return Out;
}

/// Builds the AST from a parse tree that has no errors.
class ASTBuilder {
public:
  ASTBuilder(const Locator &Loc, DiagnosticEngine &Diags) : Loc(Loc), Diags(Diags) {}

  std::unique_ptr<ast::File> build(MoeParser::FileContext *Ctx, unsigned BufferID) {
    auto F = std::make_unique<ast::File>();
    F->BufferID = BufferID;
    for (auto *Item : Ctx->topItem()) {
      if (auto *I = Item->importDecl())
        F->Imports.push_back({decodeString(Loc.text(I->STRING()->getSymbol())), Loc.range(I)});
      else if (auto *D = Item->definition())
        F->Definitions.push_back(definition(D));
    }
    return F;
  }

private:
  ast::Definition definition(MoeParser::DefinitionContext *Ctx) {
    ast::Definition D;
    D.Annotations = annotations(Ctx->annotation());
    switch (Ctx->kind->getType()) {
    case MoeLexer::RECIPE:
      D.Kind = ast::DefKind::Recipe;
      break;
    case MoeLexer::MODEL:
      D.Kind = ast::DefKind::Model;
      break;
    case MoeLexer::GPU:
      D.Kind = ast::DefKind::Gpu;
      break;
    default:
      D.Kind = ast::DefKind::Cluster;
      break;
    }
    D.Name = Loc.text(Ctx->defName);
    D.NameRange = Loc.range(Ctx->defName);
    if (Ctx->base) {
      D.Base = Loc.text(Ctx->base);
      D.BaseRange = Loc.range(Ctx->base);
    }
    D.Entries = block(Ctx->block());
    D.Range = Loc.range(Ctx);
    return D;
  }

  /// Whether a line break separates two tokens. The text between them is
  /// read rather than ANTLR's line numbers, which count only '\n': a file
  /// with old Mac line ends ('\r') has line breaks too.
  bool lineBreakBetween(Token *A, Token *B) const {
    const char *From = Loc.range(A).End.getPointer(), *To = Loc.range(B).Start.getPointer();
    return To > From && llvm::StringRef(From, To - From).find_first_of("\r\n") != llvm::StringRef::npos;
  }

  std::vector<ast::Entry> block(MoeParser::BlockContext *Ctx) {
    std::vector<ast::Entry> Entries;
    Token *PreviousStop = nullptr;
    for (antlr4::tree::ParseTree *Child : Ctx->children) {
      auto *E = dynamic_cast<MoeParser::EntryContext *>(Child);
      if (!E) {
        if (auto *Terminal = dynamic_cast<antlr4::tree::TerminalNode *>(Child))
          if (Terminal->getSymbol()->getType() != MoeLexer::LBRACE)
            PreviousStop = nullptr; // ';' or '}' separates
        continue;
      }
      if (PreviousStop && !lineBreakBetween(PreviousStop, E->getStart()))
        Diags.report(diag::missing_separator, Loc.range(E->getStart()));
      PreviousStop = E->getStop();
      Entries.push_back(entry(E));
    }
    return Entries;
  }

  ast::Entry entry(MoeParser::EntryContext *Ctx) {
    ast::Entry E;
    E.Range = Loc.range(Ctx);
    if (auto *A = dynamic_cast<MoeParser::AssignEntryContext *>(Ctx)) {
      E.Annotations = annotations(A->annotation());
      for (auto *N : A->path()->name())
        E.Path.push_back(Loc.text(N));
      E.PathRange = Loc.range(A->path());
      E.Value = expr(A->expr());
      return E;
    }
    auto *S = static_cast<MoeParser::SectionEntryContext *>(Ctx);
    E.Annotations = annotations(S->annotation());
    E.Path.push_back(Loc.text(S->name()));
    E.PathRange = Loc.range(S->name());
    E.OpenBrace = Loc.range(S->block()->getStart());
    E.Children = block(S->block());
    return E;
  }

  std::vector<ast::Annotation> annotations(const std::vector<MoeParser::AnnotationContext *> &Ctxs) {
    std::vector<ast::Annotation> Out;
    for (auto *A : Ctxs)
      Out.push_back({Loc.text(A->IDENT()->getSymbol()), Loc.range(A), args(A->arg())});
    return Out;
  }

  std::vector<ast::Argument> args(const std::vector<MoeParser::ArgContext *> &Ctxs) {
    std::vector<ast::Argument> Out;
    for (auto *A : Ctxs) {
      ast::Argument Arg;
      if (A->name()) {
        Arg.Name = Loc.text(A->name());
        Arg.NameRange = Loc.range(A->name());
      }
      Arg.Value = expr(A->expr());
      Out.push_back(std::move(Arg));
    }
    return Out;
  }

  char opChar(Token *T) const { return *Loc.range(T).Start.getPointer(); }

  ast::ExprPtr expr(MoeParser::ExprContext *Ctx) {
    llvm::SMRange R = Loc.range(Ctx);
    if (auto *U = dynamic_cast<MoeParser::UnaryExprContext *>(Ctx))
      return std::make_unique<ast::UnaryExpr>(R, opChar(U->op), expr(U->expr()));
    if (auto *B = dynamic_cast<MoeParser::BinaryExprContext *>(Ctx))
      return std::make_unique<ast::BinaryExpr>(R, opChar(B->op), Loc.range(B->op), expr(B->lhs), expr(B->rhs));
    return primary(static_cast<MoeParser::PrimaryExprContext *>(Ctx)->primary());
  }

  ast::ExprPtr number(ast::Expr::Kind K, llvm::SMRange R, llvm::StringRef Text) {
    if (K != ast::Expr::Kind::Quantity)
      return std::make_unique<ast::NumberLit>(K, R, Text.str(), "");
    // Split "1.5e3GB/s" into the number and its unit.
    size_t I = 0;
    auto Digits = [&] {
      while (I < Text.size() && (llvm::isDigit(Text[I]) || Text[I] == '_'))
        ++I;
    };
    Digits();
    if (I + 1 < Text.size() && Text[I] == '.' && llvm::isDigit(Text[I + 1])) {
      ++I;
      Digits();
    }
    if (I < Text.size() && (Text[I] == 'e' || Text[I] == 'E')) {
      size_t J = I + 1;
      if (J < Text.size() && (Text[J] == '+' || Text[J] == '-'))
        ++J;
      if (J < Text.size() && llvm::isDigit(Text[J])) {
        I = J;
        Digits();
      }
    }
    return std::make_unique<ast::NumberLit>(K, R, Text.take_front(I).str(), Text.drop_front(I).str());
  }

  ast::ExprPtr primary(MoeParser::PrimaryContext *Ctx) {
    llvm::SMRange R = Loc.range(Ctx);
    // A literal is one token. The context's own getText() would rebuild the
    // text of a whole list or call subtree, once per level.
    std::string Text = Loc.text(Ctx->getStart());
    if (dynamic_cast<MoeParser::IntLitContext *>(Ctx))
      return number(ast::Expr::Kind::Int, R, Text);
    if (dynamic_cast<MoeParser::FloatLitContext *>(Ctx))
      return number(ast::Expr::Kind::Float, R, Text);
    if (dynamic_cast<MoeParser::QuantityLitContext *>(Ctx))
      return number(ast::Expr::Kind::Quantity, R, Text);
    if (dynamic_cast<MoeParser::StringLitContext *>(Ctx))
      return std::make_unique<ast::StringLit>(R, decodeString(Text));
    if (auto *B = dynamic_cast<MoeParser::BoolLitContext *>(Ctx))
      return std::make_unique<ast::BoolLit>(R, B->TRUE() != nullptr);
    if (auto *S = dynamic_cast<MoeParser::SweepExprContext *>(Ctx))
      return std::make_unique<ast::ListExpr>(ast::Expr::Kind::Sweep, R, list(S->list()));
    if (auto *L = dynamic_cast<MoeParser::ListExprContext *>(Ctx))
      return std::make_unique<ast::ListExpr>(ast::Expr::Kind::List, R, list(L->list()));
    if (auto *C = dynamic_cast<MoeParser::CallExprContext *>(Ctx))
      return std::make_unique<ast::CallExpr>(R, Loc.text(C->IDENT()->getSymbol()), Loc.range(C->IDENT()->getSymbol()),
                                             args(C->arg()));
    if (auto *P = dynamic_cast<MoeParser::PathExprContext *>(Ctx)) {
      llvm::SmallVector<std::string, 2> Parts;
      for (auto *N : P->path()->name())
        Parts.push_back(Loc.text(N));
      return std::make_unique<ast::PathExpr>(R, std::move(Parts));
    }
    auto *Paren = static_cast<MoeParser::ParenExprContext *>(Ctx);
    return expr(Paren->expr());
  }

  std::vector<ast::ExprPtr> list(MoeParser::ListContext *Ctx) {
    std::vector<ast::ExprPtr> Out;
    for (auto *E : Ctx->expr())
      Out.push_back(expr(E));
    return Out;
  }

  const Locator &Loc;
  DiagnosticEngine &Diags;
};

class SilentListener : public antlr4::BaseErrorListener {};

/// The byte range of the entry that holds token K, for syntax-error
/// recovery: from the first token of its line (or after a ';' or brace) at
/// K's brace depth to the last before the next line, ';' or closing brace.
/// Empty when K is outside every block (a broken definition header has no
/// entry to skip).
std::pair<size_t, size_t> entryAround(const std::vector<Token *> &Toks, size_t K) {
  std::vector<int> Depth(Toks.size(), 0);
  int D = 0;
  for (size_t I = 0; I < Toks.size(); ++I) {
    if (Toks[I]->getType() == MoeLexer::RBRACE)
      --D;
    Depth[I] = D;
    if (Toks[I]->getType() == MoeLexer::LBRACE)
      ++D;
  }
  // Unbalanced braces (a block left open) leave no entry to skip that would
  // not misplace every brace after it.
  if (D != 0 || K >= Toks.size() || Toks[K]->getType() == Token::EOF || Depth[K] <= 0)
    return {0, 0};
  auto Separator = [&](size_t I) {
    unsigned T = Toks[I]->getType();
    return T == MoeLexer::LBRACE || T == MoeLexer::RBRACE || Toks[I]->getText() == ";";
  };
  size_t Begin = K;
  if (Toks[K]->getType() == MoeLexer::RBRACE) { // the entry before it is the broken one
    if (K == 0 || Separator(K - 1))
      return {0, 0};
    Begin = K - 1;
  }
  size_t Last = Begin;
  while (Begin > 0 && !Separator(Begin - 1) &&
         !(Toks[Begin - 1]->getLine() != Toks[Begin]->getLine() && Depth[Begin] == Depth[K]))
    --Begin;
  while (Last + 1 < Toks.size() && Toks[Last + 1]->getType() != Token::EOF &&
         !(Toks[Last + 1]->getText() == ";" || Toks[Last + 1]->getType() == MoeLexer::RBRACE) &&
         !(Toks[Last + 1]->getLine() != Toks[Last]->getLine() && Depth[Last + 1] <= Depth[K]))
    ++Last;
  if (Toks[Last]->getType() == MoeLexer::RBRACE)
    return {0, 0};
  return {size_t(Toks[Begin]->getStartIndex()), size_t(Toks[Last]->getStopIndex()) + 1};
}

/// For syntax-error recovery of a block left open: where to insert the
/// missing '}' (and a line break), or npos. A block's closing brace is
/// expected before the first later line that starts at or left of the
/// column its opening line starts at (`  cluster { gpu = h100_sxm` closes
/// before the next line at two spaces); of the blocks left open that way,
/// the one whose line comes first (the innermost). The brace goes at the
/// start of that line, so that the line keeps its columns. A block left
/// open at the end of the file is not closed: nothing after it is left to
/// check.
/// Count: how many blocks close there (a section and its definition both
/// left open before the next definition).
size_t missingCloseAt(const std::vector<Token *> &Toks, llvm::StringRef Work, size_t &Count) {
  auto LineIndent = [&](size_t I) {
    size_t J = I;
    while (J > 0 && Toks[J - 1]->getLine() == Toks[I]->getLine())
      --J;
    return Toks[J]->getCharPositionInLine();
  };
  size_t BestToken = Toks.size();
  std::vector<size_t> MissingAt; // per block left open, the token it closes before
  for (size_t O = 0; O < Toks.size(); ++O) {
    if (Toks[O]->getType() != MoeLexer::LBRACE)
      continue;
    const size_t Indent = LineIndent(O);
    int Depth = 0;
    for (size_t I = O + 1; I < Toks.size() && Toks[I]->getType() != Token::EOF; ++I) {
      Token *T = Toks[I];
      bool StartsLine = T->getLine() != Toks[I - 1]->getLine();
      if (StartsLine && T->getCharPositionInLine() <= Indent && T->getType() != MoeLexer::RBRACE) {
        BestToken = std::min(BestToken, I);
        MissingAt.push_back(I);
        break;
      }
      if (T->getType() == MoeLexer::LBRACE)
        ++Depth;
      else if (T->getType() == MoeLexer::RBRACE && Depth-- == 0)
        break; // closed
    }
  }
  if (BestToken >= Toks.size())
    return llvm::StringRef::npos;
  Count = size_t(llvm::count(MissingAt, BestToken));
  size_t At = size_t(Toks[BestToken]->getStartIndex());
  while (At > 0 && Work[At - 1] != '\n')
    --At;
  return At;
}

} // namespace

std::unique_ptr<ast::File> moec::parseBuffer(unsigned BufferID, DiagnosticEngine &Diags, const ParseLimits &Limits) {
  llvm::SourceMgr &SM = Diags.getSourceMgr();
  llvm::StringRef Text = SM.getMemoryBuffer(BufferID)->getBuffer();
  if (!checkEncoding(Text, Diags, Limits))
    return nullptr;

  unsigned ErrorsBefore = Diags.errorCount();
  try {
    // Syntax-error recovery parses again with the broken entry blanked (its
    // bytes made spaces, newlines kept), so that the file's later errors
    // still show. Offsets, and so every location, are those of the original
    // text; a file with non-ASCII bytes keeps to the first error (a blanked
    // multi-byte character would shift ANTLR's code-point indices).
    constexpr unsigned MaxRecoveries = 20;
    bool Ascii = llvm::all_of(Text, [](char C) { return (unsigned char)C < 0x80; });
    std::string Work = Text.str();
    // Byte ranges of the original text that recovery blanked or closed a
    // block in, and the offsets (in Work) of the characters it inserted.
    std::vector<std::pair<size_t, size_t>> Blanked;
    std::vector<size_t> Inserted;
    std::vector<size_t> ClosedAt; // where an added brace closes a definition's block
    auto Original = [&](size_t WorkOffset) {
      return WorkOffset - size_t(std::lower_bound(Inserted.begin(), Inserted.end(), WorkOffset) - Inserted.begin());
    };
    for (unsigned Round = 0;; ++Round) {
      antlr4::ANTLRInputStream Input(Work.data(), Work.size());
      Locator Loc(Text, Input.size(), Inserted);
      MoeLexer Lexer(&Input);
      SilentListener Silent;
      Lexer.removeErrorListeners();
      Lexer.addErrorListener(&Silent);
      BoundedTokenStream Tokens(&Lexer);
      if (!Tokens.fillAtMost(MaxTokens)) {
        Diags.report(diag::too_many_tokens, Loc.range(Tokens.get(MaxTokens)), MaxTokens);
        return nullptr;
      }
      if (Round == 0 && !checkTokens(Tokens, Loc, Diags, Limits))
        return nullptr;

      MoeParser Parser(&Tokens);
      Parser.removeErrorListeners();
      Parser.addErrorListener(&Silent);
      auto Strategy = std::make_shared<DiagnosingErrorStrategy>(Diags, Loc);
      Parser.setErrorHandler(Strategy);
      Parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::SLL);
      MoeParser::FileContext *Tree = nullptr;
      try {
        Tree = Parser.file();
      } catch (const antlr4::ParseCancellationException &) {
        // The first syntax error was reported; see DiagnosingErrorStrategy.
      }
      if (Tree && !Strategy->NumErrors) {
        if (Blanked.empty() && ClosedAt.empty() && Diags.errorCount() != ErrorsBefore)
          return nullptr;
        ASTBuilder Builder(Loc, Diags);
        // A missing ';' is reported but does not hide the file's other errors.
        auto F = Builder.build(Tree, BufferID);
        for (ast::Definition &D : F->Definitions) {
          size_t Begin = size_t(D.Range.Start.getPointer() - Text.data()),
                 End = size_t(D.Range.End.getPointer() - Text.data());
          for (auto [B, E] : Blanked)
            D.Damaged |= B < End && E > Begin;
          for (size_t At : ClosedAt)
            D.Damaged |= Begin <= At && At <= End;
        }
        if (F->Imports.empty() && F->Definitions.empty()) {
          if (!Blanked.empty() || !ClosedAt.empty())
            return nullptr; // everything was broken: the syntax errors say why
          llvm::SMLoc Start = llvm::SMLoc::getFromPointer(Text.data());
          Diags.report(diag::empty_file, llvm::SMRange(Start, Start));
          return nullptr;
        }
        return F;
      }
      if (!Ascii || Round >= MaxRecoveries || Strategy->OffendingIndex < 0)
        return nullptr;
      std::vector<Token *> Toks = Tokens.getTokens();
      auto [B, E] = entryAround(Toks, size_t(Strategy->OffendingIndex));
      if (B >= E) {
        // A block left open: close it where its indentation ends and parse
        // again; the definition it is in counts as damaged.
        size_t Count = 0;
        size_t At = missingCloseAt(Toks, Work, Count);
        if (At == llvm::StringRef::npos || At == 0)
          return nullptr;
        size_t Where = Original(At);
        std::string Braces;
        std::vector<size_t> Added;
        for (size_t I = 0; I < Count; ++I) {
          Added.push_back(At + Braces.size());
          Added.push_back(At + Braces.size() + 1);
          Braces += "}\n";
        }
        Work.insert(At, Braces);
        for (size_t &I : Inserted)
          if (I >= At)
            I += Braces.size();
        Inserted.insert(std::upper_bound(Inserted.begin(), Inserted.end(), At), Added.begin(), Added.end());
        ClosedAt.push_back(Where - 1);
        continue;
      }
      for (size_t I = B; I < E && I < Work.size(); ++I)
        if (Work[I] != '\n')
          Work[I] = ' ';
      Blanked.push_back({Original(B), Original(E)});
    }
  } catch (const std::exception &E) {
    // ANTLR recovers from recognition errors itself; anything else escaping
    // is reported rather than allowed to terminate the tool.
    Diags.report(diag::unexpected_token, llvm::SMRange(), std::string("internal parser failure: ") + E.what());
    return nullptr;
  }
}

std::vector<LexedToken> moec::lexText(llvm::StringRef Text) {
  std::vector<LexedToken> Out;
  antlr4::ANTLRInputStream Input(Text.data(), Text.size());
  Locator Loc(Text, Input.size());
  MoeLexer Lexer(&Input);
  SilentListener Silent;
  Lexer.removeErrorListeners();
  Lexer.addErrorListener(&Silent);
  for (std::unique_ptr<Token> T = Lexer.nextToken(); T->getType() != Token::EOF; T = Lexer.nextToken()) {
    llvm::SMRange R = Loc.range(T.get());
    Out.push_back({tokenKind(T->getType()), size_t(R.Start.getPointer() - Text.data()),
                   size_t(R.End.getPointer() - Text.data())});
  }
  return Out;
}
