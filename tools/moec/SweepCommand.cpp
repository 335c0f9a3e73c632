//===- SweepCommand.cpp - moec sweep ===//
#include "Commands.h"
#include "Driver.h"

#include "moec/Diag/DiagnosticRenderers.h"
#include "moec/Emit/Sweep.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"
#include <fmt/format.h>

namespace moec::driver {

int runSweep() {
  if (CheckFiles.size() != 1) {
    llvm::errs() << "moec sweep: expected one recipe file\n";
    return ExitUsage;
  }
  // Every point's errors decide whether it is pruned: no error cap here.
  std::unique_ptr<Compilation> C = compile(/*RunRules=*/true, /*CapErrors=*/false);
  const std::vector<Diagnostic> &Final = C->Diags->finish();
  if (C->Unreadable)
    return ExitUsage;
  // Errors outside any recipe point (syntax, names) stop the sweep.
  if (llvm::any_of(Final, [](const Diagnostic &D) { return D.Sev == Severity::Error && D.Recipe.empty(); })) {
    renderText(Final, C->SM, llvm::errs(), false, ShowRemarks);
    return ExitErrors;
  }
  std::vector<SweepPoint> Points = evaluateSweep(C->Recipes, Final);
  // Feasible points come first, ranked; then the pruned ones by name.
  size_t NumFeasible = llvm::count_if(Points, [](const SweepPoint &S) { return S.Feasible; });
  llvm::ArrayRef<SweepPoint> Feasible = llvm::makeArrayRef(Points).take_front(NumFeasible);
  llvm::ArrayRef<SweepPoint> Pruned = llvm::makeArrayRef(Points).drop_front(NumFeasible);
  if (SweepCSV) {
    llvm::outs() << "rank,point,tokens_per_s_per_gpu,step_time_s,mfu,peak_gb,capacity_gb,feasible,reason\n";
    auto Quote = [](const std::string &S) {
      std::string Out = "\"";
      for (char Ch : S)
        Out += Ch == '"' ? std::string("\"\"") : std::string(1, Ch);
      return Out + "\"";
    };
    for (const SweepPoint &S : Feasible)
      llvm::outs() << fmt::format("{},{},{:.1f},{:.4f},{:.4f},{:.2f},{:.2f},true,\n", S.Rank, Quote(S.Name),
                                  S.TokensPerSecPerGpu, S.StepTime, S.MFU, S.PeakBytes / 1e9, S.CapacityBytes / 1e9);
    for (const SweepPoint &S : Pruned)
      llvm::outs() << fmt::format(",{},,,,,,false,{}\n", Quote(S.Name), Quote(S.Reason));
    return ExitOK;
  }
  size_t Width = 5;
  for (const SweepPoint &S : Feasible)
    Width = std::max(Width, S.Name.size());
  llvm::outs() << fmt::format("{:>4}  {:<{}}  {:>12}  {:>8}  {:>6}  {:>14}\n", "rank", "point", Width, "tokens/s/GPU",
                              "step s", "MFU", "peak / HBM GB");
  for (const SweepPoint &S : Feasible)
    llvm::outs() << fmt::format("{:>4}  {:<{}}  {:>12.0f}  {:>8.2f}  {:>5.1f}%  {:>6.1f} / {:<6.1f}\n", S.Rank, S.Name,
                                Width, S.TokensPerSecPerGpu, S.StepTime, 100 * S.MFU, S.PeakBytes / 1e9,
                                S.CapacityBytes / 1e9);
  if (!Pruned.empty()) {
    llvm::outs() << fmt::format("\npruned {} infeasible point{}:\n", Pruned.size(), Pruned.size() == 1 ? "" : "s");
    for (const SweepPoint &S : Pruned)
      llvm::outs() << "  " << S.Name << ": " << S.Reason << "\n";
  }
  return ExitOK;
}

} // namespace moec::driver
