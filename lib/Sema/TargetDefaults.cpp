//===- TargetDefaults.cpp -------------------------------------------------===//
#include "moec/Sema/TargetDefaults.h"

using namespace moec;

bool moec::presetFp8ParamGather(Target T, Precision P) {
  if (getTargetInfo(T).Kind != Framework::Bridge)
    return false;
  return P == Precision::FP8Delayed || P == Precision::FP8Tensorwise || P == Precision::MXFP8;
}

bool moec::presetFp4ParamGather(Target T, Precision P) {
  return P == Precision::NVFP4 && getTargetInfo(T).Kind == Framework::Bridge && getTargetInfo(T).CoreMinor >= 20;
}
