//===- Server.cpp - JSON-RPC dispatch, documents, diagnostics -------------===//
#include "moec/Lsp/Server.h"

#include "Features.h"
#include "moec/Lsp/Transport.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include <fmt/format.h>

using namespace moec;
using namespace moec::lsp;
namespace json = llvm::json;

Server::Server(ServerOptions O, Sender Send) : Opts(std::move(O)), Send(std::move(Send)), Catalog(Opts.CatalogDir) {}

void Server::reply(const json::Value &ID, json::Value Result) {
  Send(json::Object{{"jsonrpc", "2.0"}, {"id", ID}, {"result", std::move(Result)}});
}

void Server::replyError(const json::Value &ID, ErrorCode Code, llvm::StringRef Message) {
  Send(json::Object{
      {"jsonrpc", "2.0"}, {"id", ID}, {"error", json::Object{{"code", int(Code)}, {"message", jsonString(Message)}}}});
}

void Server::notify(llvm::StringRef Method, json::Value Params) {
  Send(json::Object{{"jsonrpc", "2.0"}, {"method", Method}, {"params", std::move(Params)}});
}

void Server::reportBadFraming(llvm::StringRef Why) { replyError(nullptr, ErrorCode::ParseError, Why); }

// llvm::json's parser recurses once per nesting level: a body of a million
// '[' would overflow the stack. No LSP message nests deeper than a few
// dozen levels.
static bool nestsTooDeep(llvm::StringRef Body, unsigned Limit) {
  unsigned Depth = 0;
  bool InString = false;
  for (size_t I = 0; I < Body.size(); ++I) {
    char C = Body[I];
    if (InString) {
      if (C == '\\')
        ++I;
      else if (C == '"')
        InString = false;
    } else if (C == '"') {
      InString = true;
    } else if (C == '[' || C == '{') {
      if (++Depth > Limit)
        return true;
    } else if ((C == ']' || C == '}') && Depth > 0) {
      --Depth;
    }
  }
  return false;
}

void Server::handleBody(llvm::StringRef Body) {
  if (nestsTooDeep(Body, 512)) {
    replyError(nullptr, ErrorCode::ParseError, "JSON nested deeper than 512 levels");
    return;
  }
  llvm::Expected<json::Value> Parsed = json::parse(Body);
  if (!Parsed) {
    replyError(nullptr, ErrorCode::ParseError, "invalid JSON: " + llvm::toString(Parsed.takeError()));
    return;
  }
  handle(*Parsed);
}

const Document *Server::document(llvm::StringRef URI) const {
  auto It = Documents.find(URI);
  return It == Documents.end() ? nullptr : &It->second;
}

void Server::handle(const json::Value &Message) {
  const json::Object *M = Message.getAsObject();
  if (!M) {
    replyError(nullptr, ErrorCode::InvalidRequest, "a JSON-RPC message is an object");
    return;
  }
  const json::Value *ID = M->get("id");
  // A request id is a number or a string; anything else cannot be echoed.
  if (ID && ID->kind() != json::Value::Number && ID->kind() != json::Value::String) {
    replyError(nullptr, ErrorCode::InvalidRequest, "the id must be a number or a string");
    return;
  }
  json::Value ReplyID = ID ? *ID : json::Value(nullptr);
  llvm::Optional<llvm::StringRef> Version = M->getString("jsonrpc");
  if (!Version || *Version != "2.0") {
    if (ID)
      replyError(ReplyID, ErrorCode::InvalidRequest, "jsonrpc must be \"2.0\"");
    return;
  }
  const json::Value *MethodValue = M->get("method");
  if (!MethodValue) {
    // A response to a request of ours; the server sends none, so ignore it.
    if (ID && (M->get("result") || M->get("error")))
      return;
    replyError(ReplyID, ErrorCode::InvalidRequest, "a message needs a method");
    return;
  }
  llvm::Optional<llvm::StringRef> Method = MethodValue->getAsString();
  if (!Method) {
    replyError(ReplyID, ErrorCode::InvalidRequest, "the method must be a string");
    return;
  }
  const json::Value *ParamsValue = M->get("params");
  if (ParamsValue && ParamsValue->kind() == json::Value::Null)
    ParamsValue = nullptr; // some clients send `"params": null` with exit
  if (ParamsValue && ParamsValue->kind() != json::Value::Object && ParamsValue->kind() != json::Value::Array) {
    if (ID)
      replyError(ReplyID, ErrorCode::InvalidParams, "params must be an object or an array");
    return;
  }
  static const json::Object NoParams;
  const json::Object *ParamsObject = ParamsValue ? ParamsValue->getAsObject() : &NoParams;
  bool IsRequest = ID != nullptr;

  if (*Method == "exit") {
    Exited = true;
    return;
  }
  if (!IsRequest) {
    if (!Initialized || ShutdownRequested || !ParamsObject)
      return; // notifications before initialize or after shutdown are dropped
    if (*Method == "textDocument/didOpen")
      didOpen(*ParamsObject);
    else if (*Method == "textDocument/didChange")
      didChange(*ParamsObject);
    else if (*Method == "textDocument/didClose")
      didClose(*ParamsObject);
    else if (*Method == "textDocument/didSave")
      didSave(*ParamsObject);
    // initialized, $/cancelRequest, workspace/*: nothing to do.
    return;
  }

  if (*Method == "initialize") {
    if (Initialized) {
      replyError(ReplyID, ErrorCode::InvalidRequest, "initialize was already received");
      return;
    }
    Initialized = true;
    if (ParamsObject)
      if (const json::Object *Init = ParamsObject->getObject("initializationOptions")) {
        if (const json::Array *Dirs = Init->getArray("includeDirs"))
          for (const json::Value &D : *Dirs)
            if (auto S = D.getAsString())
              Opts.Analysis.IncludeDirs.push_back(S->str());
        if (auto Planner = Init->getBoolean("planner"))
          Opts.Analysis.UsePlanner = *Planner;
      }
    reply(ReplyID, initializeResult());
    return;
  }
  if (!Initialized) {
    replyError(ReplyID, ErrorCode::ServerNotInitialized, "the server is not initialized");
    return;
  }
  if (ShutdownRequested) {
    replyError(ReplyID, ErrorCode::InvalidRequest, "the server is shutting down");
    return;
  }
  if (*Method == "shutdown") {
    ShutdownRequested = true;
    reply(ReplyID, nullptr);
    return;
  }
  using Handler = json::Value (Server::*)(const json::Object &, llvm::Optional<RequestError> &);
  Handler H = nullptr;
  if (*Method == "textDocument/hover")
    H = &Server::hover;
  else if (*Method == "textDocument/completion")
    H = &Server::completion;
  else if (*Method == "textDocument/definition")
    H = &Server::definition;
  else if (*Method == "textDocument/codeAction")
    H = &Server::codeActions;
  if (!H) {
    replyError(ReplyID, ErrorCode::MethodNotFound, ("unknown method " + *Method).str());
    return;
  }
  if (!ParamsObject) {
    replyError(ReplyID, ErrorCode::InvalidParams, "params must be an object");
    return;
  }
  llvm::Optional<RequestError> Error;
  json::Value Result = (this->*H)(*ParamsObject, Error);
  if (Error)
    replyError(ReplyID, Error->Code, Error->Message);
  else
    reply(ReplyID, std::move(Result));
}

json::Value Server::initializeResult() {
  json::Object Capabilities{
      {"textDocumentSync",
       json::Object{{"openClose", true}, {"change", 1 /* Full */}, {"save", json::Object{{"includeText", false}}}}},
      {"hoverProvider", true},
      {"completionProvider", json::Object{{"triggerCharacters", json::Array{".", "="}}}},
      {"definitionProvider", true},
      {"codeActionProvider", json::Object{{"codeActionKinds", json::Array{"quickfix"}}}},
  };
  return json::Object{{"capabilities", std::move(Capabilities)},
                      {"serverInfo", json::Object{{"name", "moec"}, {"version", Opts.Version}}}};
}

// ---- Documents and diagnostics ---------------------------------------------

static llvm::Optional<llvm::StringRef> documentURI(const json::Object &Params) {
  const json::Object *Doc = Params.getObject("textDocument");
  return Doc ? Doc->getString("uri") : llvm::None;
}

void Server::didOpen(const json::Object &Params) {
  const json::Object *Doc = Params.getObject("textDocument");
  llvm::Optional<llvm::StringRef> URI = Doc ? Doc->getString("uri") : llvm::None;
  llvm::Optional<llvm::StringRef> Text = Doc ? Doc->getString("text") : llvm::None;
  if (!URI || !Text)
    return; // a malformed notification gets no answer; there is no id
  Document &D = Documents[*URI];
  D.URI = URI->str();
  D.Version = Doc->getInteger("version").getValueOr(0);
  D.LastParsed.reset();
  analyze(D, Text->str());
}

void Server::didChange(const json::Object &Params) {
  llvm::Optional<llvm::StringRef> URI = documentURI(Params);
  const json::Array *Changes = Params.getArray("contentChanges");
  if (!URI || !Changes || Changes->empty())
    return;
  auto It = Documents.find(*URI);
  if (It == Documents.end())
    return;
  // Full sync: the last change without a range is the whole text. A client
  // that sends ranged changes despite our capability gets them applied.
  std::string Text = It->second.Current ? It->second.Current->text().str() : std::string();
  for (const json::Value &C : *Changes) {
    const json::Object *Change = C.getAsObject();
    llvm::Optional<llvm::StringRef> NewText = Change ? Change->getString("text") : llvm::None;
    if (!NewText)
      return;
    const json::Object *Range = Change->getObject("range");
    if (!Range) {
      Text = NewText->str();
      continue;
    }
    llvm::Optional<Position> Start = positionFromJSON(Range->get("start")), End = positionFromJSON(Range->get("end"));
    if (!Start || !End)
      return;
    LineTable Lines(Text);
    size_t From = Lines.offset(*Start), To = std::max(From, Lines.offset(*End));
    Text = Text.substr(0, From) + NewText->str() + Text.substr(To);
  }
  if (const json::Object *Doc = Params.getObject("textDocument"))
    It->second.Version = Doc->getInteger("version").getValueOr(It->second.Version + 1);
  analyze(It->second, std::move(Text));
}

void Server::didClose(const json::Object &Params) {
  llvm::Optional<llvm::StringRef> URI = documentURI(Params);
  if (!URI || !Documents.count(*URI))
    return;
  Documents.erase(*URI);
  // Clear what the editor shows for a file that is no longer open.
  notify("textDocument/publishDiagnostics", json::Object{{"uri", *URI}, {"diagnostics", json::Array()}});
}

void Server::didSave(const json::Object &Params) {
  // Imports are read from disk: a saved file may be imported by the other
  // open documents, whose diagnostics then change.
  llvm::Optional<llvm::StringRef> URI = documentURI(Params);
  if (!URI)
    return;
  for (auto &Entry : Documents)
    if (Entry.first() != *URI && Entry.second.Current)
      analyze(Entry.second, Entry.second.Current->text().str());
}

void Server::analyze(Document &D, std::string Text) {
  llvm::Optional<std::string> Path = uriToPath(D.URI);
  std::string Name = Path ? *Path : D.URI;
  D.IsCatalogCopy = Path && Catalog.contains(*Path);
  D.Current = Analysis::run(Name, std::move(Text), Opts.Analysis);
  if (D.Current->file())
    D.LastParsed = D.Current;
  publishDiagnostics(D);
}

void Server::publishDiagnostics(const Document &D) {
  json::Array List;
  // The catalog's copy defines every built-in again: its diagnostics would be
  // a shadowing warning per definition, none of them the user's.
  if (!D.IsCatalogCopy)
    for (const Diagnostic &Diag : D.Current->diagnostics())
      List.push_back(diagnosticJSON(*D.Current, Diag, D.URI));
  notify("textDocument/publishDiagnostics",
         json::Object{{"uri", D.URI}, {"version", D.Version}, {"diagnostics", std::move(List)}});
}

static int lspSeverity(Severity S) {
  switch (S) {
  case Severity::Error:
    return 1;
  case Severity::Warning:
    return 2;
  case Severity::Remark:
    return 3;
  }
  return 3;
}

json::Value Server::diagnosticJSON(Analysis &A, const Diagnostic &D, llvm::StringRef URI) {
  std::string Message = D.Message;
  Position Start, End;
  if (auto R = A.mainRange(D.Range)) {
    std::tie(Start, End) = *R;
  } else if (D.Range.Start.isValid()) {
    // In an imported file: shown at the import that brought it in.
    unsigned Buf = A.sourceMgr().FindBufferContainingLoc(D.Range.Start);
    if (auto Through = Buf ? A.importedThrough(Buf) : llvm::None)
      if (auto R = A.mainRange(*Through))
        std::tie(Start, End) = *R;
    Message = fmt::format("in {}: {}", A.describe(D.Range.Start), Message);
  }
  json::Array Related;
  for (const DiagNote &N : D.Notes) {
    if (auto L = A.locate(N.Range, URI, Catalog))
      Related.push_back(
          json::Object{{"location", json::Object{{"uri", L->URI}, {"range", rangeJSON(L->Start, L->End)}}},
                       {"message", jsonString(N.Message)}});
    else
      Message += "\nnote: " + N.Message;
  }
  json::Object O{{"range", rangeJSON(Start, End)},
                 {"severity", lspSeverity(D.Sev)},
                 {"code", getDiagInfo(D.ID).Id},
                 {"source", "moec"},
                 {"message", jsonString(Message)}};
  if (!Related.empty())
    O["relatedInformation"] = std::move(Related);
  return O;
}

// ---- Requests ----------------------------------------------------------------

Document *Server::positionTarget(const json::Object &Params, size_t &Offset, llvm::Optional<RequestError> &Error) {
  llvm::Optional<llvm::StringRef> URI = documentURI(Params);
  llvm::Optional<Position> P = positionFromJSON(Params.get("position"));
  if (!URI || !P) {
    Error = RequestError{ErrorCode::InvalidParams, "expected textDocument.uri and position"};
    return nullptr;
  }
  auto It = Documents.find(*URI);
  if (It == Documents.end()) {
    Error = RequestError{ErrorCode::InvalidParams, ("document not open: " + *URI).str()};
    return nullptr;
  }
  Offset = It->second.Current->lines().offset(*P);
  return &It->second;
}

json::Value Server::hover(const json::Object &Params, llvm::Optional<RequestError> &Error) {
  size_t Offset;
  Document *D = positionTarget(Params, Offset, Error);
  return D ? hoverAt(*D->Current, Offset) : json::Value(nullptr);
}

json::Value Server::completion(const json::Object &Params, llvm::Optional<RequestError> &Error) {
  size_t Offset;
  Document *D = positionTarget(Params, Offset, Error);
  if (!D)
    return nullptr;
  const Analysis *Names = D->Current->file() ? D->Current.get() : D->LastParsed.get();
  if (!Names)
    Names = D->Current.get(); // the catalog's names at least
  return completionAt(D->Current->text(), Offset, Names);
}

json::Value Server::definition(const json::Object &Params, llvm::Optional<RequestError> &Error) {
  size_t Offset;
  Document *D = positionTarget(Params, Offset, Error);
  return D ? definitionAt(*D->Current, Offset, D->URI, Catalog) : json::Value(nullptr);
}

static bool overlaps(Position AS, Position AE, Position BS, Position BE) {
  auto Less = [](Position X, Position Y) { return X.Line < Y.Line || (X.Line == Y.Line && X.Character < Y.Character); };
  return !Less(AE, BS) && !Less(BE, AS);
}

json::Value Server::codeActions(const json::Object &Params, llvm::Optional<RequestError> &Error) {
  llvm::Optional<llvm::StringRef> URI = documentURI(Params);
  const json::Object *Range = Params.getObject("range");
  llvm::Optional<Position> Start = Range ? positionFromJSON(Range->get("start")) : llvm::None;
  llvm::Optional<Position> End = Range ? positionFromJSON(Range->get("end")) : llvm::None;
  if (!URI || !Start || !End) {
    Error = RequestError{ErrorCode::InvalidParams, "expected textDocument.uri and range"};
    return nullptr;
  }
  auto It = Documents.find(*URI);
  if (It == Documents.end()) {
    Error = RequestError{ErrorCode::InvalidParams, ("document not open: " + *URI).str()};
    return nullptr;
  }
  Document &Doc = It->second;
  Analysis &A = *Doc.Current;
  json::Array Actions;
  if (Doc.IsCatalogCopy)
    return Actions;
  // The client names the diagnostics the action is for (those under the
  // cursor's line, for VS Code's light bulb); a diagnostic it lists gets its
  // fix-it even when the range does not touch it.
  std::vector<std::string> Listed;
  if (const json::Object *Context = Params.getObject("context"))
    if (const json::Array *Diags = Context->getArray("diagnostics"))
      for (const json::Value &D : *Diags)
        if (const json::Object *O = D.getAsObject()) {
          std::string Key;
          llvm::raw_string_ostream OS(Key);
          OS << O->getString("code").getValueOr("") << ' ' << json::Value(O->get("range") ? *O->get("range") : nullptr);
          Listed.push_back(OS.str());
        }
  for (const Diagnostic &D : A.diagnostics()) {
    if (D.FixIts.empty())
      continue;
    json::Value DiagJSON = diagnosticJSON(A, D, Doc.URI);
    const json::Object *DR = DiagJSON.getAsObject()->getObject("range");
    llvm::Optional<Position> DS = positionFromJSON(DR->get("start")), DE = positionFromJSON(DR->get("end"));
    std::string Key;
    llvm::raw_string_ostream OS(Key);
    OS << getDiagInfo(D.ID).Id << ' ' << json::Value(json::Object(*DR));
    if (!overlaps(*DS, *DE, *Start, *End) && !llvm::is_contained(Listed, OS.str()))
      continue;
    json::Object Changes;
    bool AllLocated = true;
    std::string Title;
    for (const FixIt &F : D.FixIts) {
      llvm::Optional<Location> L = A.locate(F.Range, Doc.URI, Catalog);
      if (!L) { // in a Hugging Face config's generated text: no file to edit
        AllLocated = false;
        break;
      }
      json::Value Edit = json::Object{{"range", rangeJSON(L->Start, L->End)}, {"newText", jsonString(F.Replacement)}};
      if (json::Array *Edits = Changes.getArray(L->URI))
        Edits->push_back(std::move(Edit));
      else
        Changes[L->URI] = json::Array{std::move(Edit)};
      if (Title.empty()) {
        std::string Old = A.sourceText(F.Range);
        if (Old.size() > 40)
          Old = Old.substr(0, 37) + "...";
        if (F.Replacement.empty())
          Title = fmt::format("Remove '{}'", Old);
        else if (Old.empty())
          Title = fmt::format("Insert '{}'", F.Replacement);
        else
          Title = fmt::format("Replace '{}' with '{}'", Old, F.Replacement);
      }
    }
    if (!AllLocated)
      continue;
    if (D.FixIts.size() > 1)
      Title += fmt::format(" (and {} more edits)", D.FixIts.size() - 1);
    Actions.push_back(json::Object{{"title", jsonString(Title + " [" + getDiagInfo(D.ID).Id.str() + "]")},
                                   {"kind", "quickfix"},
                                   {"diagnostics", json::Array{std::move(DiagJSON)}},
                                   {"isPreferred", true},
                                   {"edit", json::Object{{"changes", std::move(Changes)}}}});
  }
  return Actions;
}

int moec::lsp::serve(std::istream &In, llvm::raw_ostream &Out, ServerOptions Opts) {
  Server S(std::move(Opts), [&](json::Value V) { writeMessage(Out, V); });
  while (!S.exited()) {
    IncomingMessage M = readMessage(In);
    switch (M.K) {
    case IncomingMessage::Kind::End:
      return 1; // the client went away without `exit`
    case IncomingMessage::Kind::BadHeader:
      S.reportBadFraming(M.Error);
      continue;
    case IncomingMessage::Kind::Message:
      S.handleBody(M.Body);
      continue;
    }
  }
  return S.exitCode();
}
