//===- DiagnosticRenderers.cpp - Text, JSON and SARIF ---------------------===//
#include "moec/Diag/DiagnosticRenderers.h"

#include "llvm/Support/WithColor.h"

using namespace moec;
namespace json = llvm::json;

namespace {
struct Position {
  std::string File;
  unsigned Line = 0, Column = 0, EndLine = 0, EndColumn = 0;
  bool Valid = false;
};

llvm::SourceMgr::DiagKind kindOf(Severity S) {
  switch (S) {
  case Severity::Error:
    return llvm::SourceMgr::DK_Error;
  case Severity::Warning:
    return llvm::SourceMgr::DK_Warning;
  case Severity::Remark:
    return llvm::SourceMgr::DK_Remark;
  }
  llvm_unreachable("unknown severity");
}

Position positionOf(llvm::SourceMgr &SM, llvm::SMRange R) {
  Position P;
  if (!R.Start.isValid())
    return P;
  unsigned Buf = SM.FindBufferContainingLoc(R.Start);
  if (!Buf)
    return P;
  P.Valid = true;
  P.File = SM.getMemoryBuffer(Buf)->getBufferIdentifier().str();
  std::tie(P.Line, P.Column) = SM.getLineAndColumn(R.Start, Buf);
  llvm::SMLoc End = R.End.isValid() ? R.End : R.Start;
  if (SM.FindBufferContainingLoc(End) != Buf && End.getPointer() != SM.getMemoryBuffer(Buf)->getBufferEnd())
    End = R.Start;
  std::tie(P.EndLine, P.EndColumn) = SM.getLineAndColumn(End, Buf);
  return P;
}

std::string displayName(llvm::StringRef File) { return File == "-" ? "<stdin>" : File.str(); }

void printHeaderOnly(llvm::raw_ostream &OS, const Position &P, llvm::SourceMgr::DiagKind Kind, llvm::StringRef Message,
                     bool Colors) {
  llvm::ColorMode Mode = Colors ? llvm::ColorMode::Enable : llvm::ColorMode::Disable;
  {
    llvm::WithColor Bold(OS, llvm::raw_ostream::SAVEDCOLOR, true, false, Mode);
    if (P.Valid)
      OS << displayName(P.File) << ':' << P.Line << ':' << P.Column << ": ";
  }
  switch (Kind) {
  case llvm::SourceMgr::DK_Error:
    llvm::WithColor(OS, llvm::HighlightColor::Error, Mode).get() << "error: ";
    break;
  case llvm::SourceMgr::DK_Warning:
    llvm::WithColor(OS, llvm::HighlightColor::Warning, Mode).get() << "warning: ";
    break;
  case llvm::SourceMgr::DK_Remark:
    llvm::WithColor(OS, llvm::HighlightColor::Remark, Mode).get() << "remark: ";
    break;
  case llvm::SourceMgr::DK_Note:
    llvm::WithColor(OS, llvm::HighlightColor::Note, Mode).get() << "note: ";
    break;
  }
  llvm::WithColor(OS, llvm::raw_ostream::SAVEDCOLOR, true, false, Mode).get() << Message << '\n';
}

/// A string stream whose colours are decided by --color, not by isatty.
class ColorableStringStream : public llvm::raw_string_ostream {
public:
  ColorableStringStream(std::string &S, bool Colors) : raw_string_ostream(S), Colors(Colors) { enable_colors(Colors); }
  bool has_colors() const override { return Colors; }

private:
  bool Colors;
};

/// The source line as it may go to a terminal: control bytes (a binary
/// file, an escape sequence) become '?', one column each, so that the
/// caret still lines up and nothing reaches the terminal uninterpreted.
std::string printable(llvm::StringRef Line) {
  std::string Out(Line);
  for (char &C : Out)
    if ((static_cast<unsigned char>(C) < 0x20 && C != '\t') || C == 0x7f)
      C = '?';
  return Out;
}

void printLocated(llvm::raw_ostream &OS, llvm::SourceMgr &SM, llvm::SMRange Range, llvm::SourceMgr::DiagKind Kind,
                  llvm::StringRef Message, bool Colors) {
  Position P = positionOf(SM, Range);
  if (!P.Valid) {
    printHeaderOnly(OS, P, Kind, Message, Colors);
    return;
  }
  llvm::SmallVector<llvm::SMRange, 1> Ranges;
  if (Range.End.isValid() && Range.End.getPointer() > Range.Start.getPointer())
    Ranges.push_back(Range);
  llvm::SMDiagnostic D = SM.GetMessage(Range.Start, Kind, Message, Ranges);
  // A minified or generated file can put megabytes on one line: show a
  // window around the caret, as clang does, instead of the whole line.
  constexpr size_t MaxShown = 160, Before = 60;
  if (D.getLineContents().size() > MaxShown) {
    printHeaderOnly(OS, P, Kind, Message, Colors);
    llvm::StringRef Line = D.getLineContents();
    size_t Col = std::min<size_t>(D.getColumnNo(), Line.size());
    size_t Start = Col > Before ? Col - Before : 0;
    size_t End = std::min(Line.size(), Start + MaxShown);
    std::string Lead = Start > 0 ? "..." : "";
    OS << Lead << printable(Line.slice(Start, End)) << (End < Line.size() ? "..." : "") << "\n";
    std::string Caret(Lead.size() + Col - Start, ' ');
    Caret += '^';
    size_t Width = Range.End.isValid()
                       ? size_t(std::max<std::ptrdiff_t>(0, Range.End.getPointer() - Range.Start.getPointer()))
                       : 0;
    for (size_t I = 1; I < Width && Col + I < End; ++I)
      Caret += '~';
    OS << Caret << "\n";
    return;
  }
  // SourceMgr names stdin "-"; users expect "<stdin>".
  std::string Shown = printable(D.getLineContents());
  if (D.getFilename() == "-" || Shown != D.getLineContents())
    D = llvm::SMDiagnostic(SM, D.getLoc(), D.getFilename() == "-" ? "<stdin>" : D.getFilename(), D.getLineNo(),
                           D.getColumnNo(), D.getKind(), D.getMessage(), Shown, D.getRanges());
  std::string Buffer;
  ColorableStringStream Out(Buffer, Colors);
  D.print(nullptr, Out, Colors);
  Out.flush();
  OS << Buffer;
}
} // namespace

void moec::renderText(llvm::ArrayRef<Diagnostic> Diags, llvm::SourceMgr &SM, llvm::raw_ostream &OS, bool Colors,
                      bool ShowRemarks) {
  // Hidden remarks by ID, in order of first appearance.
  std::vector<std::pair<llvm::StringRef, unsigned>> Hidden;
  unsigned HiddenCount = 0;
  for (const Diagnostic &D : Diags) {
    if (!ShowRemarks && D.Sev == Severity::Remark) {
      llvm::StringRef Id = getDiagInfo(D.ID).Id;
      auto It = llvm::find_if(Hidden, [&](const auto &X) { return X.first == Id; });
      if (It == Hidden.end())
        Hidden.push_back({Id, 1});
      else
        ++It->second;
      ++HiddenCount;
      continue;
    }
    std::string Message = D.Message + " [" + getDiagInfo(D.ID).Id.str() + "]";
    printLocated(OS, SM, D.Range, kindOf(D.Sev), Message, Colors);
    for (const DiagNote &N : D.Notes) {
      bool IsFixIt = llvm::StringRef(N.Message).startswith("fix-it: ");
      // A fix-it note at the diagnostic's own place would repeat the source
      // line just shown; the contract prints only its header.
      if (IsFixIt || !N.Range.Start.isValid())
        printHeaderOnly(OS, positionOf(SM, N.Range), llvm::SourceMgr::DK_Note, N.Message, Colors);
      else
        printLocated(OS, SM, N.Range, llvm::SourceMgr::DK_Note, N.Message, Colors);
    }
  }
  if (HiddenCount) {
    std::vector<std::string> Ids;
    for (const auto &[Id, N] : Hidden)
      Ids.push_back(N > 1 ? fmt::format("{} x{}", Id.str(), N) : Id.str());
    printHeaderOnly(OS, Position(), llvm::SourceMgr::DK_Remark,
                    fmt::format("{} remark{} not shown ({}); --remarks prints them", HiddenCount,
                                HiddenCount == 1 ? "" : "s", llvm::join(Ids, ", ")),
                    Colors);
  }
}

static json::Object locationFields(const Position &P) {
  json::Object O;
  if (P.Valid) {
    O["file"] = displayName(P.File);
    O["line"] = P.Line;
    O["column"] = P.Column;
    O["end_line"] = P.EndLine;
    O["end_column"] = P.EndColumn;
  } else {
    O["file"] = nullptr;
    O["line"] = nullptr;
    O["column"] = nullptr;
    O["end_line"] = nullptr;
    O["end_column"] = nullptr;
  }
  return O;
}

json::Value moec::renderJSON(llvm::ArrayRef<Diagnostic> Diags, llvm::SourceMgr &SM) {
  json::Array Out;
  for (const Diagnostic &D : Diags) {
    json::Object O = locationFields(positionOf(SM, D.Range));
    O["id"] = getDiagInfo(D.ID).Id;
    O["severity"] = severityName(D.Sev);
    O["message"] = D.Message;
    O["recipe"] = D.Recipe.empty() ? json::Value(nullptr) : json::Value(D.Recipe);
    json::Array Points;
    for (const std::string &P : D.Points)
      Points.push_back(P);
    O["points"] = std::move(Points);
    json::Array Notes;
    for (const DiagNote &N : D.Notes) {
      json::Object NO = locationFields(positionOf(SM, N.Range));
      NO["message"] = N.Message;
      Notes.push_back(std::move(NO));
    }
    O["notes"] = std::move(Notes);
    json::Array Fixes;
    for (const FixIt &F : D.FixIts) {
      json::Object FO = locationFields(positionOf(SM, F.Range));
      FO["replacement"] = F.Replacement;
      Fixes.push_back(std::move(FO));
    }
    O["fixits"] = std::move(Fixes);
    Out.push_back(std::move(O));
  }
  return Out;
}

static llvm::StringRef sarifLevel(Severity S) {
  switch (S) {
  case Severity::Error:
    return "error";
  case Severity::Warning:
    return "warning";
  case Severity::Remark:
    return "note";
  }
  llvm_unreachable("unknown severity");
}

static json::Object sarifRegion(const Position &P) {
  return json::Object{
      {"startLine", P.Line}, {"startColumn", P.Column}, {"endLine", P.EndLine}, {"endColumn", P.EndColumn}};
}

static json::Object sarifLocation(const Position &P) {
  return json::Object{
      {"physicalLocation",
       json::Object{{"artifactLocation", json::Object{{"uri", displayName(P.File)}}}, {"region", sarifRegion(P)}}}};
}

json::Value moec::renderSARIF(llvm::ArrayRef<Diagnostic> Diags, llvm::SourceMgr &SM, llvm::StringRef ToolVersion) {
  json::Array Rules;
  for (const DiagInfo &Info : allDiagInfos())
    Rules.push_back(json::Object{{"id", Info.Id},
                                 {"shortDescription", json::Object{{"text", Info.Id}}},
                                 {"fullDescription", json::Object{{"text", Info.Explanation}}},
                                 {"defaultConfiguration", json::Object{{"level", sarifLevel(Info.DefaultSeverity)}}},
                                 {"helpUri", "https://moec.dev/rules#" + Info.Id.str()}});

  json::Array Results;
  for (const Diagnostic &D : Diags) {
    json::Object R{{"ruleId", getDiagInfo(D.ID).Id},
                   {"ruleIndex", unsigned(D.ID)},
                   {"level", sarifLevel(D.Sev)},
                   {"message", json::Object{{"text", D.Message}}}};
    Position P = positionOf(SM, D.Range);
    json::Array Locations;
    if (P.Valid)
      Locations.push_back(sarifLocation(P));
    R["locations"] = std::move(Locations);
    json::Array Related;
    for (const DiagNote &N : D.Notes) {
      Position NP = positionOf(SM, N.Range);
      json::Object RO{{"message", json::Object{{"text", N.Message}}}};
      if (NP.Valid)
        RO["physicalLocation"] = sarifLocation(NP)["physicalLocation"];
      Related.push_back(std::move(RO));
    }
    if (!Related.empty())
      R["relatedLocations"] = std::move(Related);
    json::Array Fixes;
    for (const FixIt &F : D.FixIts) {
      Position FP = positionOf(SM, F.Range);
      if (!FP.Valid)
        continue;
      Fixes.push_back(json::Object{
          {"description", json::Object{{"text", "replace with '" + F.Replacement + "'"}}},
          {"artifactChanges",
           json::Array{json::Object{
               {"artifactLocation", json::Object{{"uri", displayName(FP.File)}}},
               {"replacements",
                json::Array{json::Object{{"deletedRegion", sarifRegion(FP)},
                                         {"insertedContent", json::Object{{"text", F.Replacement}}}}}}}}}});
    }
    if (!Fixes.empty())
      R["fixes"] = std::move(Fixes);
    if (!D.Recipe.empty())
      R["properties"] = json::Object{{"recipe", D.Recipe}};
    Results.push_back(std::move(R));
  }

  return json::Object{{"$schema", "https://json.schemastore.org/sarif-2.1.0.json"},
                      {"version", "2.1.0"},
                      {"runs", json::Array{json::Object{
                                   {"tool", json::Object{{"driver", json::Object{{"name", "moec"},
                                                                                 {"version", ToolVersion},
                                                                                 {"informationUri", "https://moec.dev"},
                                                                                 {"rules", std::move(Rules)}}}}},
                                   {"results", std::move(Results)}}}}};
}
