//===- TargetDefaults.h - What a recipe's defaults mean per target -*- C++ -*-===//
//
// Where releases differ in what an unset field means, the recipe follows its
// target, and so do the memory model and the export that read the Recipe.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_SEMA_TARGETDEFAULTS_H
#define MOEC_SEMA_TARGETDEFAULTS_H

#include "moec/Sema/Recipe.h"

namespace moec {

/// Whether the target's mixed-precision preset for P gathers parameters in
/// FP8. Megatron-Bridge (training/mixed_precision.py, 0.3.1 and main): on
/// for the delayed, current (tensorwise) and MXFP8 presets, off for the
/// subchannel (blockwise) and NVFP4 ones. Megatron-LM: off unless
/// --fp8-param-gather is given.
bool presetFp8ParamGather(Target T, Precision P);
/// Whether the target's NVFP4 preset gathers parameters in FP4: Bridge main's
/// bf16_with_nvfp4_mixed sets fp4_param_gather; 0.3.1 has no such field.
bool presetFp4ParamGather(Target T, Precision P);

} // namespace moec

#endif
