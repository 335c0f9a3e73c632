//===- checkpoint/HuggingFaceCheckpoint.h - A Hugging Face model dir -*- C++ -*-===//
//
// The directory `save_pretrained` writes and `moerun --init-from-hf DIR`
// reads: config.json (of which the reader keeps model_type, which names the
// family's tensor conventions) and the weights, either one model.safetensors
// or shards listed by model.safetensors.index.json ("weight_map": tensor
// name -> shard file), as transformers' modeling_utils saves a model above
// its shard size. Tensors are read as float (SafeTensors.h: F32, BF16, F16).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_CHECKPOINT_HUGGINGFACECHECKPOINT_H
#define MOERT_CHECKPOINT_HUGGINGFACECHECKPOINT_H

#include "checkpoint/SafeTensors.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moert {

class HuggingFaceCheckpoint {
public:
  /// False with Error set when config.json or the weights are missing or
  /// malformed, or the index names a tensor its shard lacks.
  bool open(const std::string &Dir, std::string &Error);
  /// config.json's model_type ("qwen3_next", "deepseek_v3", ...).
  const std::string &modelType() const { return ModelType; }
  /// The tensor's entry (shape, dtype), or null when the checkpoint has none.
  const SafeTensorEntry *find(const std::string &Name) const;
  bool has(const std::string &Name) const { return find(Name) != nullptr; }
  bool read(const std::string &Name, std::vector<float> &Out, std::string &Error) const;

private:
  std::string ModelType;
  std::vector<std::unique_ptr<SafeTensorsFile>> Files;
  std::map<std::string, const SafeTensorsFile *> FileOf;
};

} // namespace moert

#endif
