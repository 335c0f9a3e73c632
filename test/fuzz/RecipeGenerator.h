//===- RecipeGenerator.h - Well-typed, absurd recipes from bytes --*- C++ -*-===//
//
// A structure-aware generator for fuzz-plan: it walks the schema's field
// tables (lib/Sema/Schema.cpp) and writes, from the fuzzer's bytes, a .moe
// file whose every field has the right type but whose values may be absurd:
// sizes from 1 to 2^62, layouts that do not add up, sweeps, arithmetic, GPUs
// with a byte of memory, models with a million experts. Required fields are
// always set, so most files get through Sema to the rules and the planner.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_TEST_FUZZ_RECIPEGENERATOR_H
#define MOEC_TEST_FUZZ_RECIPEGENERATOR_H

#include <fuzzer/FuzzedDataProvider.h>
#include <string>

namespace moec::fuzz {

/// A file with one recipe `r`, and sometimes a gpu `g` and a model `m` of
/// its own.
std::string generateRecipeFile(FuzzedDataProvider &In);

} // namespace moec::fuzz

#endif
