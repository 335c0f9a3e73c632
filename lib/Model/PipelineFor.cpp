//===- PipelineFor.cpp - A recipe's pipeline ------------------------------===//
#include "moec/Model/Memory.h"

using namespace moec;

llvm::Expected<PipelinePlan> moec::pipelineFor(const Recipe &R) {
  const ParallelConfig &Par = R.Parallel;
  int64_t PerStep = R.MicroBatch * std::max<int64_t>(Par.DP, 1);
  PipelineInput In;
  In.DecoderLayers = R.Model.Layers;
  In.MtpLayers = R.Model.MtpLayers;
  In.PP = Par.PP;
  In.VPP = Par.VPP;
  In.Microbatches = PerStep > 0 ? std::max<int64_t>(R.GlobalBatch / PerStep, 1) : 1;
  In.Layout = Par.Layout ? &*Par.Layout : nullptr;
  return planPipeline(In);
}
