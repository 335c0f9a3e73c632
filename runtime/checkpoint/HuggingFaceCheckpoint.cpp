//===- checkpoint/HuggingFaceCheckpoint.cpp - A Hugging Face model dir ----===//
#include "checkpoint/HuggingFaceCheckpoint.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace moert;
namespace json = llvm::json;

namespace {

/// The JSON object of a file, or null with Error set.
std::unique_ptr<json::Value> readJson(const std::string &Path, std::string &Error) {
  auto Buffer = llvm::MemoryBuffer::getFile(Path);
  if (!Buffer) {
    Error = "cannot read '" + Path + "': " + Buffer.getError().message();
    return nullptr;
  }
  llvm::Expected<json::Value> Parsed = json::parse((*Buffer)->getBuffer());
  if (!Parsed) {
    Error = "'" + Path + "' is not JSON: " + llvm::toString(Parsed.takeError());
    return nullptr;
  }
  if (!Parsed->getAsObject()) {
    Error = "'" + Path + "' is not a JSON object";
    return nullptr;
  }
  return std::make_unique<json::Value>(std::move(*Parsed));
}

bool exists(const std::string &Path) { return static_cast<bool>(llvm::MemoryBuffer::getFile(Path)); }

} // namespace

bool HuggingFaceCheckpoint::open(const std::string &Dir, std::string &Error) {
  std::unique_ptr<json::Value> Config = readJson(Dir + "/config.json", Error);
  if (!Config)
    return false;
  if (auto Type = Config->getAsObject()->getString("model_type"))
    ModelType = Type->str();
  const std::string Single = Dir + "/model.safetensors", Index = Dir + "/model.safetensors.index.json";
  auto Open = [&](const std::string &File) -> const SafeTensorsFile * {
    Files.push_back(std::make_unique<SafeTensorsFile>());
    if (!Files.back()->open(File, Error))
      return nullptr;
    return Files.back().get();
  };
  if (!exists(Index)) {
    const SafeTensorsFile *F = Open(Single);
    if (!F)
      return false;
    for (const auto &[Name, Entry] : F->tensors())
      FileOf[Name] = F;
    return true;
  }
  std::unique_ptr<json::Value> Parsed = readJson(Index, Error);
  if (!Parsed)
    return false;
  const json::Object *Map = Parsed->getAsObject()->getObject("weight_map");
  if (!Map) {
    Error = "'" + Index + "' has no weight_map object";
    return false;
  }
  std::map<std::string, const SafeTensorsFile *> Shards;
  for (const auto &[Key, Value] : *Map) {
    auto Shard = Value.getAsString();
    if (!Shard || Shard->contains('/')) {
      Error = "'" + Index + "': tensor '" + Key.str() + "' names no shard file of the directory";
      return false;
    }
    const SafeTensorsFile *&F = Shards[Shard->str()];
    if (!F && !(F = Open(Dir + "/" + Shard->str())))
      return false;
    if (!F->tensors().count(Key.str())) {
      Error = "'" + Index + "' puts tensor '" + Key.str() + "' in '" + Shard->str() + "', which lacks it";
      return false;
    }
    FileOf[Key.str()] = F;
  }
  return true;
}

const SafeTensorEntry *HuggingFaceCheckpoint::find(const std::string &Name) const {
  auto It = FileOf.find(Name);
  return It == FileOf.end() ? nullptr : &It->second->tensors().at(Name);
}

bool HuggingFaceCheckpoint::read(const std::string &Name, std::vector<float> &Out, std::string &Error) const {
  auto It = FileOf.find(Name);
  if (It == FileOf.end()) {
    Error = "the checkpoint has no tensor '" + Name + "'";
    return false;
  }
  return It->second->read(Name, Out, Error);
}
