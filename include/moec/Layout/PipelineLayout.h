//===- PipelineLayout.h - Megatron-Core pipeline layout strings -*- C++ -*-===//
//
// Megatron-Core describes an uneven pipeline split as a string: `E`
// embedding, `t` decoder layer, `m` MTP layer, `L` loss, `|` a boundary
// between (virtual) stages, `(...)*n` and `x*n` repetition. For example
// "Et|(tt|)*30mL" is DeepSeek-V3's 61 layers plus one MTP layer over 32
// virtual stages. Virtual stage i runs on pipeline rank i mod PP as model
// chunk i / PP.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_LAYOUT_PIPELINELAYOUT_H
#define MOEC_LAYOUT_PIPELINELAYOUT_H

#include "llvm/ADT/StringRef.h"
#include <cstdint>
#include <string>
#include <vector>

namespace moec {

struct LayoutStage {
  bool Embedding = false;
  bool Loss = false;
  int64_t DecoderLayers = 0;
  int64_t MtpLayers = 0;
  /// Where the stage starts in the expanded string, for messages.
  size_t Index = 0;
};

struct LayoutError {
  size_t Offset = 0; // byte offset in the original string
  size_t Length = 1;
  std::string Message;
};

struct PipelineLayout {
  std::vector<LayoutStage> Stages;
  int64_t decoderLayers() const;
  int64_t mtpLayers() const;
};

/// Parses a layout string; on failure returns false and fills Err. Bounded:
/// an expansion past MaxItems items is an error, not an allocation.
bool parsePipelineLayout(llvm::StringRef Text, PipelineLayout &Out, LayoutError &Err, size_t MaxItems = 1u << 20);

/// A balanced layout of DecoderLayers decoder and MtpLayers MTP layers over
/// Stages virtual stages, counting the embedding and the loss as one layer
/// each, in compressed notation. Empty if some stage would be empty.
std::string balancedPipelineLayout(int64_t DecoderLayers, int64_t MtpLayers, int64_t Stages);

} // namespace moec

#endif
