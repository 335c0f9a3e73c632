//===- PipelineFor.cpp - A recipe's pipeline ------------------------------===//
#include "moec/Model/Memory.h"
#include "llvm/ADT/StringMap.h"
#include <fmt/format.h>

using namespace moec;

static PipelineInput pipelineInputOf(const Recipe &R) {
  const ParallelConfig &Par = R.Parallel;
  int64_t PerStep = R.MicroBatch * std::max<int64_t>(Par.DP, 1);
  PipelineInput In;
  In.DecoderLayers = R.Model.Layers;
  In.MtpLayers = R.Model.MtpLayers;
  In.PP = Par.PP;
  In.VPP = Par.VPP;
  In.Microbatches = PerStep > 0 ? std::max<int64_t>(R.GlobalBatch / PerStep, 1) : 1;
  In.Layout = Par.Layout ? &*Par.Layout : nullptr;
  return In;
}

llvm::Expected<PipelinePlan> moec::pipelineFor(const Recipe &R) { return planPipeline(pipelineInputOf(R)); }

llvm::Expected<std::shared_ptr<const PipelinePlan>> moec::sharedPipelineFor(const Recipe &R) {
  PipelineInput In = pipelineInputOf(R);
  std::string Key = fmt::format("{}/{}/{}/{}/{}/{}/{}", In.DecoderLayers, In.MtpLayers, In.PP, In.VPP, In.Microbatches,
                                In.MicrobatchGroupSize, In.Layout ? *In.Layout : "-");
  // moec is single-threaded; a bounded cache keeps sweeps of many distinct
  // pipelines from growing without limit.
  static llvm::StringMap<std::shared_ptr<const PipelinePlan>> Cache;
  auto It = Cache.find(Key);
  if (It != Cache.end())
    return It->second;
  llvm::Expected<PipelinePlan> P = planPipeline(In);
  if (!P)
    return P.takeError();
  if (Cache.size() >= 256)
    Cache.clear();
  auto Shared = std::make_shared<const PipelinePlan>(std::move(*P));
  Cache[Key] = Shared;
  return Shared;
}
