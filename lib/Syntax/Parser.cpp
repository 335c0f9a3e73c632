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
  Locator(llvm::StringRef Text) : Text(Text) {
    if (llvm::all_of(Text, [](char C) { return (unsigned char)C < 0x80; }))
      return;
    for (size_t I = 0; I < Text.size(); ++I)
      if (((unsigned char)Text[I] & 0xC0) != 0x80)
        CodePointToByte.push_back(I);
    CodePointToByte.push_back(Text.size());
  }
  llvm::SMLoc at(size_t CodePoint) const {
    size_t Byte = CodePointToByte.empty() ? CodePoint
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

private:
  llvm::StringRef Text;
  std::vector<size_t> CodePointToByte;
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

std::string describeToken(const Token *T) {
  switch (T->getType()) {
  case Token::EOF:
    return "end of file";
  case MoeLexer::IDENT:
    return "name '" + T->getText() + "'";
  case MoeLexer::INT:
  case MoeLexer::FLOAT:
  case MoeLexer::QUANTITY:
    return "number '" + T->getText() + "'";
  case MoeLexer::STRING:
    return "string " + T->getText();
  default:
    return "'" + T->getText() + "'";
  }
}

std::string describeExpected(const antlr4::misc::IntervalSet &Set, const antlr4::dfa::Vocabulary &Vocab) {
  std::vector<std::string> Names;
  bool ValueAdded = false, NameAdded = false;
  for (ssize_t Type : Set.toList()) {
    switch (Type) {
    case MoeLexer::INT:
    case MoeLexer::FLOAT:
    case MoeLexer::QUANTITY:
    case MoeLexer::STRING:
    case MoeLexer::TRUE:
    case MoeLexer::FALSE:
    case MoeLexer::SWEEP:
    case MoeLexer::LBRACK:
    case MoeLexer::LPAREN:
      if (Type == MoeLexer::LPAREN && !Set.contains(size_t(MoeLexer::INT))) {
        Names.push_back("'('");
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
    default:
      Names.push_back(Vocab.getLiteralName(Type).empty() ? Vocab.getSymbolicName(Type)
                                                         : Vocab.getLiteralName(Type));
    }
  }
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
class DiagnosingErrorStrategy : public antlr4::DefaultErrorStrategy {
public:
  DiagnosingErrorStrategy(DiagnosticEngine &Diags, const Locator &Loc) : Diags(Diags), Loc(Loc) {}
  unsigned NumErrors = 0;

protected:
  void reportNoViableAlternative(antlr4::Parser *P, const antlr4::NoViableAltException &E) override {
    report(P, E.getOffendingToken(), P->getExpectedTokens());
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
  void report(antlr4::Parser *P, Token *Offending, const antlr4::misc::IntervalSet &Expected) {
    ++NumErrors;
    // The lexer pass already reported stray characters and broken strings.
    if (Offending && (Offending->getType() == MoeLexer::STRAY ||
                      Offending->getType() == MoeLexer::UNTERMINATED_STRING))
      return;
    llvm::SMRange Where = Loc.range(Offending);
    if (Expected.contains(size_t(MoeLexer::RBRACE)) && Offending &&
        (Offending->getType() == Token::EOF || Offending->getType() == MoeLexer::IMPORT ||
         ((Offending->getType() == MoeLexer::RECIPE || Offending->getType() == MoeLexer::MODEL ||
           Offending->getType() == MoeLexer::GPU || Offending->getType() == MoeLexer::CLUSTER) &&
          P->getTokenStream()->LA(2) == MoeLexer::IDENT && P->getTokenStream()->LA(3) != '='))) {
      if (reportUnclosed(P, Where))
        return;
    }
    Diags.report(diag::unexpected_token, Where,
                 "unexpected " + describeToken(Offending) + "; expected " +
                     describeExpected(Expected, P->getVocabulary()));
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
      Diags.report(diag::unclosed_block, Where, What)
          .note(diag::note_opened_here, Loc.range(Block->getStart()), What);
      return true;
    }
    return false;
  }

  DiagnosticEngine &Diags;
  const Locator &Loc;
};

/// The token pass: errors ANTLR would only report as "unexpected token", and
/// the resource bounds that keep the recursive-descent parser within its stack.
bool checkTokens(antlr4::CommonTokenStream &Tokens, const Locator &Loc, DiagnosticEngine &Diags,
                 const ParseLimits &Limits) {
  bool OK = true;
  unsigned Depth = 0, Operators = 0;
  for (Token *T : Tokens.getTokens()) {
    switch (T->getType()) {
    case MoeLexer::STRAY:
      Diags.report(diag::stray_character, Loc.range(T), T->getText());
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
      if (T->getType() == MoeLexer::LBRACE)
        Operators = 0;
      break;
    case MoeLexer::RBRACE:
    case MoeLexer::RPAREN:
    case MoeLexer::RBRACK:
      if (Depth)
        --Depth;
      if (T->getType() == MoeLexer::RBRACE)
        Operators = 0;
      break;
    default: {
      llvm::StringRef Text = T->getText();
      if (Text == "=" || Text == ";" || Text == ",")
        Operators = 0;
      else if (Text.size() == 1 && llvm::StringRef("+-*/%").contains(Text[0]) &&
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
        F->Imports.push_back({decodeString(I->STRING()->getText()), Loc.range(I)});
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
    D.Name = Ctx->defName->getText();
    D.NameRange = Loc.range(Ctx->defName);
    if (Ctx->base) {
      D.Base = Ctx->base->getText();
      D.BaseRange = Loc.range(Ctx->base);
    }
    D.Entries = block(Ctx->block());
    D.Range = Loc.range(Ctx);
    return D;
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
      if (PreviousStop && PreviousStop->getLine() == E->getStart()->getLine())
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
        E.Path.push_back(N->getText());
      E.PathRange = Loc.range(A->path());
      E.Value = expr(A->expr());
      return E;
    }
    auto *S = static_cast<MoeParser::SectionEntryContext *>(Ctx);
    E.Annotations = annotations(S->annotation());
    E.Path.push_back(S->name()->getText());
    E.PathRange = Loc.range(S->name());
    E.OpenBrace = Loc.range(S->block()->getStart());
    E.Children = block(S->block());
    return E;
  }

  std::vector<ast::Annotation> annotations(const std::vector<MoeParser::AnnotationContext *> &Ctxs) {
    std::vector<ast::Annotation> Out;
    for (auto *A : Ctxs)
      Out.push_back({A->IDENT()->getText(), Loc.range(A), args(A->arg())});
    return Out;
  }

  std::vector<ast::Argument> args(const std::vector<MoeParser::ArgContext *> &Ctxs) {
    std::vector<ast::Argument> Out;
    for (auto *A : Ctxs) {
      ast::Argument Arg;
      if (A->name()) {
        Arg.Name = A->name()->getText();
        Arg.NameRange = Loc.range(A->name());
      }
      Arg.Value = expr(A->expr());
      Out.push_back(std::move(Arg));
    }
    return Out;
  }

  static char opChar(Token *T) { return T->getText()[0]; }

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
    std::string Text = Ctx->getText();
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
      return std::make_unique<ast::CallExpr>(R, C->IDENT()->getText(), Loc.range(C->IDENT()->getSymbol()),
                                             args(C->arg()));
    if (auto *P = dynamic_cast<MoeParser::PathExprContext *>(Ctx)) {
      llvm::SmallVector<std::string, 2> Parts;
      for (auto *N : P->path()->name())
        Parts.push_back(N->getText());
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

} // namespace

std::unique_ptr<ast::File> moec::parseBuffer(unsigned BufferID, DiagnosticEngine &Diags,
                                             const ParseLimits &Limits) {
  llvm::SourceMgr &SM = Diags.getSourceMgr();
  llvm::StringRef Text = SM.getMemoryBuffer(BufferID)->getBuffer();
  if (!checkEncoding(Text, Diags, Limits))
    return nullptr;

  Locator Loc(Text);
  unsigned ErrorsBefore = Diags.errorCount();
  try {
    antlr4::ANTLRInputStream Input(Text.data(), Text.size());
    MoeLexer Lexer(&Input);
    SilentListener Silent;
    Lexer.removeErrorListeners();
    Lexer.addErrorListener(&Silent);
    antlr4::CommonTokenStream Tokens(&Lexer);
    Tokens.fill();
    if (!checkTokens(Tokens, Loc, Diags, Limits))
      return nullptr;

    MoeParser Parser(&Tokens);
    Parser.removeErrorListeners();
    Parser.addErrorListener(&Silent);
    auto Strategy = std::make_shared<DiagnosingErrorStrategy>(Diags, Loc);
    Parser.setErrorHandler(Strategy);
    Parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(
        antlr4::atn::PredictionMode::SLL);
    MoeParser::FileContext *Tree = Parser.file();
    if (Strategy->NumErrors || Diags.errorCount() != ErrorsBefore)
      return nullptr;

    ASTBuilder Builder(Loc, Diags);
    // A missing ';' is reported but does not hide the file's other errors.
    auto F = Builder.build(Tree, BufferID);
    if (F->Imports.empty() && F->Definitions.empty()) {
      llvm::SMLoc Start = llvm::SMLoc::getFromPointer(Text.data());
      Diags.report(diag::empty_file, llvm::SMRange(Start, Start));
      return nullptr;
    }
    return F;
  } catch (const std::exception &E) {
    // ANTLR recovers from recognition errors itself; anything else escaping
    // is reported rather than allowed to terminate the tool.
    Diags.report(diag::unexpected_token, llvm::SMRange(), std::string("internal parser failure: ") + E.what());
    return nullptr;
  }
}
