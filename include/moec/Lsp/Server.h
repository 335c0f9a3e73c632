//===- Server.h - The moec language server -----------------------*- C++ -*-===//
//
// A Language Server Protocol server for .moe files: diagnostics (the engine
// and IDs of `moec check`), hover, completion, go-to-definition and code
// actions for fix-its. The message handler is independent of the transport:
// handle() takes one decoded JSON-RPC message and answers through the Send
// callback, so tests drive it in memory; serve() runs it over a stream.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_LSP_SERVER_H
#define MOEC_LSP_SERVER_H

#include "moec/Lsp/Analysis.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"
#include <functional>
#include <istream>
#include <memory>

namespace moec::lsp {

struct ServerOptions {
  AnalysisOptions Analysis;
  /// Where the built-in catalog is copied for go-to-definition.
  std::string CatalogDir;
  std::string Version = "0";
};

/// One open document: the editor's text and the analyses of it.
struct Document {
  std::string URI;
  int64_t Version = 0;
  std::shared_ptr<Analysis> Current;
  /// The last analysis whose text parsed: while the user types an entry the
  /// file often does not parse, and completion still needs the names of the
  /// file's and its imports' definitions.
  std::shared_ptr<Analysis> LastParsed;
  bool IsCatalogCopy = false;
};

class Server {
public:
  using Sender = std::function<void(llvm::json::Value)>;
  Server(ServerOptions Opts, Sender Send);

  /// Handles one message body: parses it, dispatches requests and
  /// notifications, answers malformed ones with JSON-RPC errors.
  void handleBody(llvm::StringRef Body);
  /// Handles one parsed message.
  void handle(const llvm::json::Value &Message);
  /// Answers a message whose framing was broken (no request id is known).
  void reportBadFraming(llvm::StringRef Why);

  /// True once `exit` arrived; the process then ends with exitCode().
  bool exited() const { return Exited; }
  /// 0 if `shutdown` came before `exit`, 1 otherwise (as the protocol says).
  int exitCode() const { return ShutdownRequested ? 0 : 1; }

  const Document *document(llvm::StringRef URI) const;

private:
  struct RequestError {
    ErrorCode Code;
    std::string Message;
  };
  using Result = std::pair<llvm::json::Value, llvm::Optional<RequestError>>;

  void reply(const llvm::json::Value &ID, llvm::json::Value Result);
  void replyError(const llvm::json::Value &ID, ErrorCode Code, llvm::StringRef Message);
  void notify(llvm::StringRef Method, llvm::json::Value Params);

  // Lifecycle and documents.
  llvm::json::Value initializeResult();
  void didOpen(const llvm::json::Object &Params);
  void didChange(const llvm::json::Object &Params);
  void didClose(const llvm::json::Object &Params);
  void didSave(const llvm::json::Object &Params);
  void analyze(Document &D, std::string Text);
  void publishDiagnostics(const Document &D);
  llvm::json::Value diagnosticJSON(Analysis &A, const Diagnostic &D, llvm::StringRef URI);

  // Features; each returns the result or sets Error.
  llvm::json::Value hover(const llvm::json::Object &Params, llvm::Optional<RequestError> &Error);
  llvm::json::Value completion(const llvm::json::Object &Params, llvm::Optional<RequestError> &Error);
  llvm::json::Value definition(const llvm::json::Object &Params, llvm::Optional<RequestError> &Error);
  llvm::json::Value codeActions(const llvm::json::Object &Params, llvm::Optional<RequestError> &Error);

  /// The document and cursor offset of a TextDocumentPositionParams.
  Document *positionTarget(const llvm::json::Object &Params, size_t &Offset, llvm::Optional<RequestError> &Error);

  ServerOptions Opts;
  Sender Send;
  CatalogFiles Catalog;
  llvm::StringMap<Document> Documents;
  bool Initialized = false, ShutdownRequested = false, Exited = false;
};

/// Runs a server over a byte stream until `exit` or the end of input; returns
/// the process exit status.
int serve(std::istream &In, llvm::raw_ostream &Out, ServerOptions Opts);

} // namespace moec::lsp

#endif
