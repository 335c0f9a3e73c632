//===- fuzz-plan.cpp - `moec plan` on generated, well-typed recipes -------===//
//
// The generator (RecipeGenerator.h) turns the fuzzer's bytes into a recipe
// that follows the schema's types with absurd values; the pipeline checks it
// and, for every point without an error, builds the plan and writes it as
// TOML and JSON, and reads the TOML back with the runtime's plan reader.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"
#include "RecipeGenerator.h"

#include "llvm/Support/raw_ostream.h"
#include <cstdlib>

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  moec::fuzz::warmUp();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  FuzzedDataProvider In(Data, Size);
  std::string Text = moec::fuzz::generateRecipeFile(In);
  if (getenv("MOEC_FUZZ_PRINT"))
    llvm::errs() << Text << "\n";
  moec::fuzz::PipelineResult R = moec::fuzz::runPipeline(Text, "generated.moe", /*BuildPlans=*/true);
  // How far generated recipes get, for tuning the generator.
  if (getenv("MOEC_FUZZ_STATS"))
    llvm::errs() << "recipes " << R.Recipes << " plans " << R.Plans << "\n";
  return 0;
}
