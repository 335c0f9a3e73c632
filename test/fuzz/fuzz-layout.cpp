//===- fuzz-layout.cpp - The pipeline-layout string parser ----------------===//
//
// parsePipelineLayout on any string: either stages or an error whose offset
// lies inside the string; the stages' layer counts add up; expansion stays
// bounded by MaxItems. balancedPipelineLayout on the parsed counts gives a
// layout that parses back to the same totals.
//
//===----------------------------------------------------------------------===//
#include "moec/Layout/PipelineLayout.h"

#include "llvm/Support/raw_ostream.h"
#include <cstdlib>

using namespace moec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *Data, size_t Size) {
  llvm::StringRef Text(reinterpret_cast<const char *>(Data), Size);
  PipelineLayout Out;
  LayoutError Err;
  // A small bound, so that expansion limits are reached quickly.
  const size_t MaxItems = 1u << 12;
  if (!parsePipelineLayout(Text, Out, Err, MaxItems)) {
    if (Err.Message.empty() || Err.Offset > Text.size()) {
      llvm::errs() << "bad error: offset " << Err.Offset << " of " << Text.size() << ": " << Err.Message << "\n";
      abort();
    }
    return 0;
  }
  int64_t Decoder = 0, Mtp = 0;
  for (const LayoutStage &S : Out.Stages) {
    if (S.DecoderLayers < 0 || S.MtpLayers < 0)
      abort();
    Decoder += S.DecoderLayers;
    Mtp += S.MtpLayers;
  }
  if (Decoder != Out.decoderLayers() || Mtp != Out.mtpLayers() || Decoder + Mtp > int64_t(MaxItems))
    abort();
  if (Out.Stages.empty())
    return 0;
  std::string Balanced = balancedPipelineLayout(Decoder, Mtp, int64_t(Out.Stages.size()));
  if (Balanced.empty())
    return 0;
  PipelineLayout Again;
  if (!parsePipelineLayout(Balanced, Again, Err) || Again.Stages.size() != Out.Stages.size() ||
      Again.decoderLayers() != Decoder || Again.mtpLayers() != Mtp) {
    llvm::errs() << "balanced layout '" << Balanced << "' does not parse back to " << Decoder << " decoder, " << Mtp
                 << " MTP layers over " << Out.Stages.size() << " stages\n";
    abort();
  }
  return 0;
}
