//===- LspServerTest.cpp - The language server's message handler ----------===//
//
// Drives lib/Lsp's Server in memory: each test sends JSON-RPC messages to
// handle() and inspects what the server sent back. The recipes live in a
// temporary directory so that imports resolve as on disk.
//
//===----------------------------------------------------------------------===//
#include "moec/Catalog/Catalog.h"
#include "moec/Lsp/Server.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "gtest/gtest.h"

using namespace moec::lsp;
namespace json = llvm::json;

namespace {

const char *BaseText = R"(recipe base {
  model = qwen3_30b_a3b
  cluster { gpu = h100_sxm; nodes = 1 }
  seq_len = 4K
  batch { micro = 1; global = 8 }
}
)";

// Line 4 has an error with a fix-it; line 1 a warning with a note in the
// built-in catalog.
const char *MainText = R"(import "base.moe"
model qwen3_30b_a3b extends qwen3_30b_a3b { layers = 24 }
recipe r extends base {
  model = qwen3_30b_a3b
  precision = fp8.block
  parallel { tp = 2; ep = 4 }
  batch { global = 16 }
}
)";

class ServerTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("moec-lsp-test", Dir));
    write("base.moe", BaseText);
    ServerOptions Opts;
    llvm::SmallString<128> Catalog(Dir);
    llvm::sys::path::append(Catalog, "catalog");
    Opts.CatalogDir = std::string(Catalog);
    Opts.Version = "test";
    S = std::make_unique<Server>(Opts, [this](json::Value V) { Sent.push_back(std::move(V)); });
    json::Value R = request("initialize", json::Object{{"capabilities", json::Object()}});
    ASSERT_TRUE(R.getAsObject()->getObject("result")) << str(R);
    notify("initialized", json::Object());
  }
  void TearDown() override { llvm::sys::fs::remove_directories(Dir); }

  std::string path(llvm::StringRef Name) {
    llvm::SmallString<128> P(Dir);
    llvm::sys::path::append(P, Name);
    return std::string(P);
  }
  void write(llvm::StringRef Name, llvm::StringRef Text) {
    std::error_code EC;
    llvm::raw_fd_ostream OS(path(Name), EC);
    ASSERT_FALSE(EC);
    OS << Text;
  }
  std::string uri(llvm::StringRef Name) { return pathToURI(path(Name)); }

  json::Value request(llvm::StringRef Method, json::Value Params) {
    int64_t ID = NextID++;
    Sent.clear();
    S->handle(json::Object{{"jsonrpc", "2.0"}, {"id", ID}, {"method", Method}, {"params", std::move(Params)}});
    for (json::Value &V : Sent)
      if (V.getAsObject()->getInteger("id") == ID)
        return V;
    ADD_FAILURE() << "no answer to " << Method.str();
    return nullptr;
  }
  json::Value result(llvm::StringRef Method, json::Value Params) {
    json::Value R = request(Method, std::move(Params));
    const json::Value *Result = R.getAsObject() ? R.getAsObject()->get("result") : nullptr;
    EXPECT_TRUE(Result) << str(R);
    return Result ? *Result : json::Value(nullptr);
  }
  int64_t errorCode(const json::Value &Answer) {
    const json::Object *E = Answer.getAsObject() ? Answer.getAsObject()->getObject("error") : nullptr;
    return E ? E->getInteger("code").getValueOr(0) : 0;
  }
  void notify(llvm::StringRef Method, json::Value Params) {
    Sent.clear();
    S->handle(json::Object{{"jsonrpc", "2.0"}, {"method", Method}, {"params", std::move(Params)}});
  }
  /// The diagnostics of the last publishDiagnostics sent.
  json::Array published() {
    for (auto It = Sent.rbegin(); It != Sent.rend(); ++It)
      if (It->getAsObject()->getString("method") == llvm::StringRef("textDocument/publishDiagnostics"))
        return *It->getAsObject()->getObject("params")->getArray("diagnostics");
    ADD_FAILURE() << "no diagnostics published";
    return {};
  }
  void open(llvm::StringRef Name, llvm::StringRef Text) {
    notify("textDocument/didOpen",
           json::Object{{"textDocument",
                         json::Object{{"uri", uri(Name)}, {"languageId", "moe"}, {"version", 1}, {"text", Text}}}});
  }
  void change(llvm::StringRef Name, llvm::StringRef Text, int Version) {
    notify("textDocument/didChange",
           json::Object{{"textDocument", json::Object{{"uri", uri(Name)}, {"version", Version}}},
                        {"contentChanges", json::Array{json::Object{{"text", Text}}}}});
  }
  json::Object at(llvm::StringRef Name, unsigned Line, unsigned Char) {
    return json::Object{{"textDocument", json::Object{{"uri", uri(Name)}}},
                        {"position", json::Object{{"line", Line}, {"character", Char}}}};
  }
  std::string hoverText(llvm::StringRef Name, unsigned Line, unsigned Char) {
    json::Value H = result("textDocument/hover", at(Name, Line, Char));
    if (!H.getAsObject())
      return "";
    return H.getAsObject()->getObject("contents")->getString("value").getValueOr("").str();
  }
  std::vector<std::string> completionLabels(llvm::StringRef Name, unsigned Line, unsigned Char) {
    json::Value C = result("textDocument/completion", at(Name, Line, Char));
    std::vector<std::string> Labels;
    if (const json::Object *O = C.getAsObject())
      for (const json::Value &I : *O->getArray("items"))
        Labels.push_back(I.getAsObject()->getString("label")->str());
    return Labels;
  }
  static std::string str(const json::Value &V) {
    std::string S;
    llvm::raw_string_ostream(S) << V;
    return S;
  }
  static bool has(const std::vector<std::string> &Labels, llvm::StringRef L) {
    return llvm::is_contained(Labels, L.str());
  }

  llvm::SmallString<128> Dir;
  std::unique_ptr<Server> S;
  std::vector<json::Value> Sent;
  int64_t NextID = 1;
};

std::string rangeStr(const json::Value &D) {
  const json::Object *R = D.getAsObject()->getObject("range");
  auto P = [](const json::Object *O) {
    return std::to_string(*O->getInteger("line")) + ":" + std::to_string(*O->getInteger("character"));
  };
  return P(R->getObject("start")) + "-" + P(R->getObject("end"));
}

} // namespace

/// The 0-based line of `model NAME {` in the built-in models.moe.
static int catalogLine(llvm::StringRef Name) {
  for (const moec::CatalogFile &F : moec::builtinCatalogFiles()) {
    if (!llvm::StringRef(F.Name).endswith("/models.moe"))
      continue;
    llvm::SmallVector<llvm::StringRef, 0> Lines;
    llvm::StringRef(F.Text).split(Lines, '\n');
    for (size_t I = 0; I < Lines.size(); ++I)
      if (Lines[I].startswith(("model " + Name + " ").str()))
        return int(I);
  }
  return -1;
}

TEST_F(ServerTest, DiagnosticsHaveCheckIDsRangesAndNotes) {
  open("main.moe", MainText);
  json::Array Diags = published();
  ASSERT_EQ(Diags.size(), 2u) << str(json::Value(json::Array(Diags)));
  const json::Object &Warn = *Diags[0].getAsObject();
  EXPECT_EQ(Warn.getString("code"), llvm::StringRef("shadows-builtin"));
  EXPECT_EQ(Warn.getInteger("severity"), int64_t(2));
  EXPECT_EQ(rangeStr(Diags[0]), "1:6-1:19");
  const json::Object &Note = *(*Warn.getArray("relatedInformation"))[0].getAsObject();
  EXPECT_EQ(Note.getString("message"), llvm::StringRef("the built-in model is defined here"));
  llvm::StringRef NoteURI = *Note.getObject("location")->getString("uri");
  EXPECT_TRUE(NoteURI.endswith("/catalog/models.moe")) << NoteURI.str();
  const json::Object &Err = *Diags[1].getAsObject();
  EXPECT_EQ(Err.getString("code"), llvm::StringRef("unknown-value"));
  EXPECT_EQ(Err.getInteger("severity"), int64_t(1));
  EXPECT_EQ(Err.getString("source"), llvm::StringRef("moec"));
  EXPECT_EQ(rangeStr(Diags[1]), "4:14-4:23");
}

TEST_F(ServerTest, ColumnsCountUtf16Units) {
  // é is one UTF-16 unit in two bytes, the emoji two units in four bytes:
  // the byte column 38 of `bogus` is the UTF-16 column 35.
  open("u.moe", "import \"base.moe\"\nrecipe u extends base {\n"
                "  data { source = real(\"\xC3\xA9\xF0\x9F\x98\x80.bin\"); bogus = 1 }\n}\n");
  json::Array Diags = published();
  auto Bogus = llvm::find_if(Diags, [](const json::Value &D) {
    return D.getAsObject()->getString("code") == llvm::StringRef("unknown-field");
  });
  ASSERT_NE(Bogus, Diags.end()) << str(json::Value(json::Array(Diags)));
  EXPECT_EQ(rangeStr(*Bogus), "2:35-2:40");
  // The base recipe's own error (too much memory for 8 GPUs) is in another
  // file: it is shown on the import that brings that file in.
  auto Memory = llvm::find_if(Diags, [](const json::Value &D) {
    return D.getAsObject()->getString("code") == llvm::StringRef("memory-exceeds-hbm");
  });
  ASSERT_NE(Memory, Diags.end());
  EXPECT_EQ(rangeStr(*Memory), "0:0-0:17");
  EXPECT_TRUE(Memory->getAsObject()->getString("message")->startswith("in base.moe:3: predicted peak memory"));
}

TEST_F(ServerTest, HoverShowsSchemaAndProvenance) {
  std::string Fixed = MainText;
  Fixed.replace(Fixed.find("fp8.block"), 9, "fp8.blockwise");
  open("main.moe", Fixed);
  std::string TP = hoverText("main.moe", 5, 14);
  EXPECT_NE(TP.find("**`parallel.tp`**"), std::string::npos) << TP;
  EXPECT_NE(TP.find("a count; default `1`"), std::string::npos) << TP;
  EXPECT_NE(TP.find("tensor parallel size"), std::string::npos) << TP;
  EXPECT_NE(TP.find("Value in recipe `r`: `2`, set at line 6"), std::string::npos) << TP;
  // A section lists who set each of its values: the base or this recipe.
  std::string Batch = hoverText("main.moe", 6, 3);
  EXPECT_NE(Batch.find("`batch.micro`: `1`, set in recipe `base` (base.moe:5) and inherited through r"),
            std::string::npos)
      << Batch;
  // The recipe's name: every value with its provenance.
  std::string R = hoverText("main.moe", 2, 7);
  EXPECT_NE(R.find("seq_len = 4K (4096)  # base.moe:4:13 via base -> r"), std::string::npos) << str(R);
  // An enum value's field; a model reference shows the model's definition.
  EXPECT_NE(hoverText("main.moe", 4, 18).find("training precision recipe"), std::string::npos);
  std::string Model = hoverText("main.moe", 3, 12);
  EXPECT_NE(Model.find("**model `qwen3_30b_a3b`** extends `qwen3_30b_a3b` — line 2"), std::string::npos) << str(Model);
  // The extends target is the built-in model, with the catalog's comment.
  std::string Builtin = hoverText("main.moe", 1, 30);
  EXPECT_NE(Builtin.find("built in, models.moe:" + std::to_string(catalogLine("qwen3_30b_a3b") + 1)), std::string::npos)
      << str(Builtin);
  EXPECT_EQ(hoverText("main.moe", 0, 0), "");
}

TEST_F(ServerTest, CompletionOfFieldsValuesAndNames) {
  open("main.moe", MainText);
  std::vector<std::string> Parallel = completionLabels("main.moe", 5, 13);
  EXPECT_TRUE(has(Parallel, "tp") && has(Parallel, "cp_comm") && has(Parallel, "vpp"));
  EXPECT_FALSE(has(Parallel, "seq_len"));
  EXPECT_FALSE(has(Parallel, "parallel"));
  // At the recipe's top level: fields and sections.
  std::vector<std::string> Top = completionLabels("main.moe", 3, 2);
  EXPECT_TRUE(has(Top, "seq_len") && has(Top, "parallel") && has(Top, "precision"));
  EXPECT_FALSE(has(Top, "tp"));
  // In a model: the model's fields.
  std::vector<std::string> Model = completionLabels("main.moe", 1, 44);
  EXPECT_TRUE(has(Model, "layers") && has(Model, "moe"));
  EXPECT_FALSE(has(Model, "seq_len"));
  std::vector<std::string> Precision = completionLabels("main.moe", 4, 23);
  EXPECT_TRUE(has(Precision, "fp8.blockwise") && has(Precision, "bf16"));

  // Half-typed text that does not parse: the context comes from the text,
  // the names from the last version that parsed.
  std::string Typing = MainText;
  Typing.insert(Typing.find("  parallel"), "  dispatcher = \n  model = \n  parallel.\n");
  change("main.moe", Typing, 2);
  std::vector<std::string> Dispatcher = completionLabels("main.moe", 5, 15);
  EXPECT_EQ(Dispatcher, (std::vector<std::string>{"alltoall", "allgather", "deepep", "hybridep", "sweep"}));
  std::vector<std::string> Models = completionLabels("main.moe", 6, 10);
  EXPECT_TRUE(has(Models, "qwen3_30b_a3b") && has(Models, "deepseek_v3") && has(Models, "hf"));
  EXPECT_FALSE(has(Models, "h100_sxm"));
  std::vector<std::string> Dotted = completionLabels("main.moe", 7, 11);
  EXPECT_TRUE(has(Dotted, "tp") && has(Dotted, "ep"));
  json::Value C = result("textDocument/completion", at("main.moe", 7, 11));
  const json::Object *First = (*C.getAsObject()->getArray("items"))[0].getAsObject();
  EXPECT_EQ(rangeStr(json::Value(json::Object(*First->getObject("textEdit")))), "7:11-7:11");

  // Top level: keywords; after `extends`, names of the same kind.
  change("main.moe", "recipe q extends \n", 3);
  std::vector<std::string> Recipes = completionLabels("main.moe", 0, 17);
  EXPECT_TRUE(has(Recipes, "base") && has(Recipes, "r")); // the names of the version that parsed
  EXPECT_FALSE(has(Recipes, "qwen3_30b_a3b"));
  change("main.moe", "import \"base.moe\"\nrecipe q extends base {}\n", 4);
  change("main.moe", "import \"base.moe\"\nrecipe q extends base {}\nrecipe p extends ba\n", 5);
  EXPECT_TRUE(has(completionLabels("main.moe", 2, 19), "q"));
  change("main.moe", "\n# a comment\n", 6);
  EXPECT_TRUE(has(completionLabels("main.moe", 0, 0), "recipe"));
  EXPECT_TRUE(completionLabels("main.moe", 1, 5).empty());
}

TEST_F(ServerTest, DefinitionOfNamesExtendsAndImports) {
  open("main.moe", MainText);
  auto Def = [&](unsigned Line, unsigned Char) {
    return result("textDocument/definition", at("main.moe", Line, Char));
  };
  json::Value Model = Def(3, 12);
  ASSERT_EQ(Model.getAsArray()->size(), 1u) << str(Model);
  const json::Object &L = *(*Model.getAsArray())[0].getAsObject();
  EXPECT_EQ(L.getString("uri"), llvm::StringRef(uri("main.moe")));
  EXPECT_EQ(rangeStr((*Model.getAsArray())[0]), "1:6-1:19");
  json::Value Base = Def(2, 19);
  ASSERT_EQ(Base.getAsArray()->size(), 1u) << str(Base);
  EXPECT_EQ((*Base.getAsArray())[0].getAsObject()->getString("uri"), llvm::StringRef(uri("base.moe")));
  EXPECT_EQ(rangeStr((*Base.getAsArray())[0]), "0:7-0:11");
  // `model x extends x` extends the built-in x: the catalog's copy on disk.
  json::Value Builtin = Def(1, 30);
  ASSERT_EQ(Builtin.getAsArray()->size(), 1u) << str(Builtin);
  llvm::StringRef CatalogURI = *(*Builtin.getAsArray())[0].getAsObject()->getString("uri");
  EXPECT_EQ(CatalogURI, llvm::StringRef(uri("catalog/models.moe")));
  std::string Line = std::to_string(catalogLine("qwen3_30b_a3b"));
  EXPECT_EQ(rangeStr((*Builtin.getAsArray())[0]), Line + ":6-" + Line + ":19");
  EXPECT_TRUE(llvm::sys::fs::exists(path("catalog/models.moe")));
  // The import statement goes to the imported file.
  json::Value Import = Def(0, 9);
  ASSERT_EQ(Import.getAsArray()->size(), 1u) << str(Import);
  EXPECT_EQ((*Import.getAsArray())[0].getAsObject()->getString("uri"), llvm::StringRef(uri("base.moe")));
  // A field that is not a reference has no definition.
  EXPECT_TRUE(Def(4, 18).getAsArray()->empty());
}

TEST_F(ServerTest, CodeActionAppliesTheFixItAndChangeClearsDiagnostics) {
  open("main.moe", MainText);
  json::Array Opened = published();
  ASSERT_EQ(Opened.size(), 2u);
  json::Value Actions =
      result("textDocument/codeAction",
             json::Object{{"textDocument", json::Object{{"uri", uri("main.moe")}}},
                          {"range", json::Object{{"start", json::Object{{"line", 4}, {"character", 16}}},
                                                 {"end", json::Object{{"line", 4}, {"character", 16}}}}},
                          {"context", json::Object{{"diagnostics", json::Array()}}}});
  ASSERT_EQ(Actions.getAsArray()->size(), 1u) << str(Actions);
  const json::Object &A = *(*Actions.getAsArray())[0].getAsObject();
  EXPECT_EQ(A.getString("kind"), llvm::StringRef("quickfix"));
  EXPECT_EQ(A.getString("title"), llvm::StringRef("Replace 'fp8.block' with 'fp8.blockwise' [unknown-value]"));
  const json::Array &Edits = *A.getObject("edit")->getObject("changes")->getArray(uri("main.moe"));
  ASSERT_EQ(Edits.size(), 1u);
  EXPECT_EQ(rangeStr(Edits[0]), "4:14-4:23");
  EXPECT_EQ(Edits[0].getAsObject()->getString("newText"), llvm::StringRef("fp8.blockwise"));
  // No action on a line without a fix-it.
  json::Value None = result("textDocument/codeAction",
                            json::Object{{"textDocument", json::Object{{"uri", uri("main.moe")}}},
                                         {"range", json::Object{{"start", json::Object{{"line", 6}, {"character", 0}}},
                                                                {"end", json::Object{{"line", 6}, {"character", 0}}}}},
                                         {"context", json::Object{{"diagnostics", json::Array()}}}});
  EXPECT_TRUE(None.getAsArray()->empty());
  // ... unless the client lists the diagnostic as the one the action is for.
  json::Value Listed =
      result("textDocument/codeAction",
             json::Object{{"textDocument", json::Object{{"uri", uri("main.moe")}}},
                          {"range", json::Object{{"start", json::Object{{"line", 4}, {"character", 0}}},
                                                 {"end", json::Object{{"line", 4}, {"character", 0}}}}},
                          {"context", json::Object{{"diagnostics", json::Array{Opened[1]}}}}});
  EXPECT_EQ(Listed.getAsArray()->size(), 1u) << str(Listed);

  std::string Fixed = MainText;
  Fixed.replace(Fixed.find("fp8.block"), 9, "fp8.blockwise");
  change("main.moe", Fixed, 2);
  json::Array Diags = published();
  ASSERT_EQ(Diags.size(), 1u);
  EXPECT_EQ(Diags[0].getAsObject()->getString("code"), llvm::StringRef("shadows-builtin"));
  std::string Clean = Fixed;
  Clean.replace(Clean.find("model qwen3_30b_a3b extends"), 19, "model small");
  Clean.replace(Clean.find("model = qwen3_30b_a3b"), 21, "model = small");
  change("main.moe", Clean, 3);
  EXPECT_TRUE(published().empty());
  // Closing clears what the editor shows.
  notify("textDocument/didClose", json::Object{{"textDocument", json::Object{{"uri", uri("main.moe")}}}});
  EXPECT_TRUE(published().empty());
  EXPECT_EQ(S->document(uri("main.moe")), nullptr);
}

TEST_F(ServerTest, RangedChangesAreApplied) {
  open("main.moe", MainText);
  notify("textDocument/didChange",
         json::Object{
             {"textDocument", json::Object{{"uri", uri("main.moe")}, {"version", 2}}},
             {"contentChanges",
              json::Array{json::Object{{"range", json::Object{{"start", json::Object{{"line", 4}, {"character", 14}}},
                                                              {"end", json::Object{{"line", 4}, {"character", 23}}}}},
                                       {"text", "bf16"}}}}});
  EXPECT_EQ(published().size(), 1u);
  EXPECT_NE(S->document(uri("main.moe"))->Current->text().str().find("precision = bf16\n"), std::string::npos);
}

TEST_F(ServerTest, MalformedMessagesGetJsonRpcErrors) {
  Sent.clear();
  S->handleBody("{\"jsonrpc\": \"2.0\", \"id\": 1,");
  ASSERT_EQ(Sent.size(), 1u);
  EXPECT_EQ(errorCode(Sent[0]), -32700);
  EXPECT_EQ(*Sent[0].getAsObject()->get("id"), json::Value(nullptr));
  Sent.clear();
  S->handleBody(std::string(100000, '[') + std::string(100000, ']')); // no stack overflow
  ASSERT_EQ(Sent.size(), 1u);
  EXPECT_EQ(errorCode(Sent[0]), -32700);
  Sent.clear();
  S->handleBody("[]");
  EXPECT_EQ(errorCode(Sent.at(0)), -32600);
  Sent.clear();
  S->handle(json::Object{{"jsonrpc", "2.0"}, {"id", true}, {"method", "shutdown"}});
  EXPECT_EQ(errorCode(Sent.at(0)), -32600);
  Sent.clear();
  S->handle(json::Object{{"jsonrpc", "2.0"}, {"id", 5}, {"method", 7}});
  EXPECT_EQ(errorCode(Sent.at(0)), -32600);
  EXPECT_EQ(errorCode(request("workspace/symbol", json::Object())), -32601);
  EXPECT_EQ(errorCode(request("textDocument/hover", json::Object{{"position", 3}})), -32602);
  EXPECT_EQ(errorCode(request("textDocument/hover", at("nope.moe", 0, 0))), -32602);
  EXPECT_EQ(errorCode(request("textDocument/definition", "not an object")), -32602);
  // Malformed notifications are dropped without an answer or a crash.
  notify("textDocument/didOpen", json::Object{{"textDocument", 3}});
  notify("textDocument/didChange", json::Object{{"contentChanges", json::Array{1, 2}}});
  EXPECT_TRUE(Sent.empty());
  Sent.clear();
  S->handle(json::Object{{"jsonrpc", "2.0"}, {"method", "$/cancelRequest"}, {"params", json::Object{{"id", 1}}}});
  EXPECT_TRUE(Sent.empty());
  // The server still works, and shuts down cleanly.
  EXPECT_EQ(result("shutdown", nullptr), json::Value(nullptr));
}

TEST_F(ServerTest, ShutdownThenExit) {
  EXPECT_FALSE(S->exited());
  Sent.clear();
  S->handle(json::Object{{"jsonrpc", "2.0"}, {"id", 9}, {"method", "shutdown"}});
  ASSERT_EQ(Sent.size(), 1u);
  EXPECT_EQ(*Sent[0].getAsObject()->get("result"), json::Value(nullptr));
  EXPECT_EQ(errorCode(request("textDocument/hover", at("main.moe", 0, 0))), -32600);
  notify("exit", nullptr);
  EXPECT_TRUE(S->exited());
  EXPECT_EQ(S->exitCode(), 0);
}

TEST_F(ServerTest, HoverOnAllowExplainsTheDiagnostic) {
  open("allow.moe", "@allow(shadows-builtin, reason = \"a shorter variant\")\n"
                    "model qwen3_30b_a3b extends qwen3_30b_a3b { layers = 24 }\n");
  EXPECT_TRUE(published().empty()); // the @allow silences the warning
  std::string H = hoverText("allow.moe", 0, 10);
  EXPECT_EQ(H.rfind("**`shadows-builtin`** (warning)\n\n", 0), 0u) << H;
  EXPECT_GT(H.size(), 40u) << H;
  EXPECT_EQ(hoverText("allow.moe", 0, 1), H);  // anywhere on the annotation
  EXPECT_EQ(hoverText("allow.moe", 1, 0), ""); // the keyword `model`: nothing to say
}

TEST_F(ServerTest, DefinitionOfAGpuIsInTheCatalogCopy) {
  open("base.moe", BaseText);
  json::Value Gpu = result("textDocument/definition", at("base.moe", 2, 20));
  ASSERT_EQ(Gpu.getAsArray()->size(), 1u) << str(Gpu);
  EXPECT_EQ((*Gpu.getAsArray())[0].getAsObject()->getString("uri"), llvm::StringRef(uri("catalog/gpus.moe")));
  const json::Object *Start = (*Gpu.getAsArray())[0].getAsObject()->getObject("range")->getObject("start");
  // The copy holds the definition at the place the location names.
  auto Copy = llvm::MemoryBuffer::getFile(path("catalog/gpus.moe"));
  ASSERT_TRUE(bool(Copy));
  LineTable Lines((*Copy)->getBuffer());
  size_t Offset = Lines.offset({unsigned(*Start->getInteger("line")), unsigned(*Start->getInteger("character"))});
  EXPECT_TRUE((*Copy)->getBuffer().drop_front(Offset).startswith("h100_sxm"));
  // Opening the copy shows no diagnostics (it would shadow every built-in).
  open("catalog/gpus.moe", (*Copy)->getBuffer());
  EXPECT_TRUE(published().empty());
}

TEST_F(ServerTest, CompletionOfAllowIDs) {
  open("allow.moe", "@allow(shadows-bu\nmodel m extends qwen3_30b_a3b { layers = 24 }\n");
  json::Value C = result("textDocument/completion", at("allow.moe", 0, 17));
  std::vector<std::string> Labels;
  for (const json::Value &I : *C.getAsObject()->getArray("items"))
    Labels.push_back(I.getAsObject()->getString("label")->str());
  EXPECT_TRUE(has(Labels, "shadows-builtin"));
  EXPECT_FALSE(has(Labels, "unknown-value")); // an error cannot be allowed
  const json::Object *First = (*C.getAsObject()->getArray("items"))[0].getAsObject();
  EXPECT_EQ(rangeStr(json::Value(json::Object(*First->getObject("textEdit")))), "0:7-0:17");
}

TEST_F(ServerTest, SavingAnImportRechecksTheDocumentsThatImportIt) {
  std::string Fixed = MainText;
  Fixed.replace(Fixed.find("fp8.block"), 9, "fp8.blockwise");
  Fixed.replace(Fixed.find("model qwen3_30b_a3b extends"), 19, "model small");
  Fixed.replace(Fixed.find("model = qwen3_30b_a3b"), 21, "model = small");
  open("main.moe", Fixed);
  EXPECT_TRUE(published().empty());
  // base.moe now sets a field that does not exist, and is saved.
  std::string Broken = BaseText;
  Broken.replace(Broken.find("  seq_len"), 0, "  bogus = 1\n");
  write("base.moe", Broken);
  open("base.moe", Broken);
  notify("textDocument/didSave", json::Object{{"textDocument", json::Object{{"uri", uri("base.moe")}}}});
  json::Array Diags = published();
  ASSERT_EQ(Sent.size(), 1u); // main.moe only, not the saved file itself
  EXPECT_EQ(*Sent[0].getAsObject()->getObject("params")->getString("uri"), uri("main.moe"));
  ASSERT_EQ(Diags.size(), 1u) << str(json::Value(json::Array(Diags)));
  EXPECT_EQ(Diags[0].getAsObject()->getString("code"), llvm::StringRef("unknown-field"));
  EXPECT_EQ(rangeStr(Diags[0]), "0:0-0:17"); // on the import
}
