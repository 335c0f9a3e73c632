//===- ImportCommand.cpp - moec import --from megatron-bridge -------------===//
//
//   moec import --from megatron-bridge FILE.yaml [-o out.moe] [--model NAME]
//               [--gpu NAME] [--gpus N | --nodes N] [--name RECIPE]
//
// Writes the .moe recipe of a Megatron-Bridge YAML config or override list.
// Every field without a .moe equivalent is reported at its line (warning);
// errors stop the import and nothing is written. docs/megatron-bridge.md.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Options.h"

#include "moec/Bridge/Import.h"
#include "moec/Emit/Plan.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>

namespace moec::driver {

// Declared in Commands.h for main; its options follow it in this file, so they
// are constructed after it.
cl::SubCommand ImportCmd("import", "Write the .moe recipe of a Megatron-Bridge configuration");

namespace {
cl::opt<std::string> ImportFile(cl::Positional, cl::desc("<config.yaml | overrides.txt | ->"), cl::sub(ImportCmd));
cl::opt<std::string> ImportFrom("from", cl::desc("Source framework (megatron-bridge)"), cl::value_desc("framework"),
                                cl::sub(ImportCmd));
cl::opt<std::string> ImportOutput("o", cl::desc("Write the recipe to this file (atomically) instead of stdout"),
                                  cl::value_desc("file.moe"), cl::sub(ImportCmd));
cl::opt<std::string> ImportModel("model", cl::desc("The model, when the config does not name its architecture"),
                                 cl::value_desc("name"), cl::sub(ImportCmd));
cl::opt<std::string> ImportGpu("gpu", cl::desc("The GPU system (a ConfigContainer does not hold it)"),
                               cl::value_desc("name"), cl::sub(ImportCmd));
cl::opt<unsigned> ImportGpus("gpus", cl::desc("GPUs in the job"), cl::init(0), cl::value_desc("N"), cl::sub(ImportCmd));
cl::opt<unsigned> ImportNodes("nodes", cl::desc("Nodes in the job"), cl::init(0), cl::value_desc("N"),
                              cl::sub(ImportCmd));
cl::opt<bool> ImportVerbose("verbose",
                            cl::desc("List every field without a .moe equivalent, those without effect included"),
                            cl::sub(ImportCmd));
cl::opt<std::string> ImportName("name", cl::desc("The recipe's name (default: from the file)"), cl::value_desc("name"),
                                cl::sub(ImportCmd));
} // namespace

int runImport() {
  if (ImportFrom != "megatron-bridge") {
    llvm::errs() << "moec import: "
                 << (ImportFrom.empty() ? std::string("give the source with --from megatron-bridge")
                                        : "unknown source '" + ImportFrom +
                                              "'; the source is "
                                              "megatron-bridge")
                 << "\n";
    return ExitUsage;
  }
  if (ImportFile.empty()) {
    llvm::errs() << "moec import: expected one configuration file (use - for standard input)\n";
    return ExitUsage;
  }
  if (ImportGpus && ImportNodes) {
    llvm::errs() << "moec import: give --gpus or --nodes, not both\n";
    return ExitUsage;
  }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> Buf = llvm::MemoryBuffer::getFileOrSTDIN(ImportFile);
  if (!Buf) {
    llvm::errs() << "moec import: cannot read '" << ImportFile << "': " << Buf.getError().message() << "\n";
    return ExitUsage;
  }
  bridge::ImportOptions Opts;
  Opts.Model = ImportModel;
  Opts.Gpu = ImportGpu;
  Opts.Gpus = ImportGpus;
  Opts.Nodes = ImportNodes;
  Opts.RecipeName = ImportName;
  Opts.SourceName = ImportFile == "-" ? "<stdin>" : ImportFile.getValue();
  bridge::ImportResult Res = bridge::importBridge((*Buf)->getBuffer(), Opts);
  for (const bridge::ImportMessage &M : Res.Messages) {
    if (!M.QuietCategory.empty() && !ImportVerbose)
      continue;
    const char *Kind = M.K == bridge::ImportMessage::Kind::Error     ? "error"
                       : M.K == bridge::ImportMessage::Kind::Warning ? "warning"
                                                                     : "note";
    std::string Loc = M.Line ? fmt::format("{}:{}:{}", Opts.SourceName, M.Line, M.Column) : Opts.SourceName;
    llvm::errs() << fmt::format("{}: {}: {}\n", Loc, Kind, M.Message);
  }
  if (Res.hasErrors()) {
    llvm::errs() << "moec import: nothing written\n";
    return ExitErrors;
  }
  size_t Unmapped = 0;
  for (const bridge::ImportMessage *M : Res.unmapped())
    Unmapped += M->QuietCategory.empty();
  if (Unmapped)
    llvm::errs() << fmt::format("moec import: {} field{} with no .moe equivalent (listed in the recipe's header)\n",
                                Unmapped, Unmapped == 1 ? "" : "s");
  if (ImportOutput.empty()) {
    llvm::outs() << Res.Source;
    return ExitOK;
  }
  if (llvm::Error E = writeFileAtomically(ImportOutput, Res.Source)) {
    llvm::errs() << "moec import: " << llvm::toString(std::move(E)) << "\n";
    return ExitUsage;
  }
  return ExitOK;
}

} // namespace moec::driver
