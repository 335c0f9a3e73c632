//===- fuzz-check.cpp - The whole `moec check` pipeline on bytes ----------===//
//
// Parse, Sema (imports, extends, sweeps, hf(...) calls), every rule with the
// planner, and the text, JSON and SARIF renderers: any input gives
// diagnostics, never a crash, a hang or a leak.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  moec::fuzz::warmUp();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  moec::fuzz::runPipeline(llvm::StringRef(reinterpret_cast<const char *>(Data), Size), "fuzz.moe",
                          /*BuildPlans=*/false);
  return 0;
}
