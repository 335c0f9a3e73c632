//===- checkpoint/CheckpointDir.cpp - A checkpoint directory --------------===//
#include "checkpoint/CheckpointDir.h"

#include "checkpoint/SafeTensors.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

using namespace moert;
namespace json = llvm::json;
namespace fs = llvm::sys::fs;

namespace {

constexpr const char *LatestFile = "latest_checkpointed_iteration.txt";
constexpr const char *ManifestFile = "manifest.json";
constexpr const char *Format = "moerun-checkpoint";

std::string join(const std::string &A, const std::string &B) {
  llvm::SmallString<256> P(A);
  llvm::sys::path::append(P, B);
  return std::string(P);
}

/// fsync of a file or a directory, so that a rename or a write survives a
/// crash of the machine, not only of the process.
bool syncPath(const std::string &Path, std::string &Error) {
  int Fd = ::open(Path.c_str(), O_RDONLY | O_CLOEXEC);
  if (Fd < 0 || ::fsync(Fd) != 0) {
    Error = "cannot sync '" + Path + "': " + std::strerror(errno);
    if (Fd >= 0)
      ::close(Fd);
    return false;
  }
  ::close(Fd);
  return true;
}

/// Writes Text to Path whole: a temporary beside it, fsync, rename.
bool replaceFile(const std::string &Path, const std::string &Text, std::string &Error) {
  std::string Tmp = Path + ".tmp";
  int Fd = ::open(Tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool Ok = Fd >= 0 && ::write(Fd, Text.data(), Text.size()) == ssize_t(Text.size()) && ::fsync(Fd) == 0;
  if (Fd >= 0 && ::close(Fd) != 0)
    Ok = false;
  if (!Ok || std::rename(Tmp.c_str(), Path.c_str()) != 0) {
    Error = "cannot write '" + Path + "': " + std::strerror(errno);
    return false;
  }
  return true;
}

bool removeTree(const std::string &Path, std::string &Error) {
  if (std::error_code EC = fs::remove_directories(Path, /*IgnoreErrors=*/false)) {
    Error = "cannot remove '" + Path + "': " + EC.message();
    return false;
  }
  return true;
}

/// Steps of the whole checkpoints (iter_N directories) in Dir, ascending.
std::vector<int64_t> checkpointSteps(const std::string &Dir) {
  std::vector<int64_t> Steps;
  std::error_code EC;
  for (fs::directory_iterator It(Dir, EC), End; !EC && It != End; It.increment(EC)) {
    llvm::StringRef Name = llvm::sys::path::filename(It->path());
    int64_t Step;
    if (Name.consume_front("iter_") && !Name.getAsInteger(10, Step) && checkpointDirName(Step) == "iter_" + Name.str())
      Steps.push_back(Step);
  }
  std::sort(Steps.begin(), Steps.end());
  return Steps;
}

} // namespace

std::string moert::checkpointDirName(int64_t Step) {
  char Buf[32];
  std::snprintf(Buf, sizeof Buf, "iter_%07lld", (long long)Step);
  return Buf;
}

std::string moert::tensorFileName(int Rank) {
  char Buf[48];
  std::snprintf(Buf, sizeof Buf, "tensors-%05d.safetensors", Rank);
  return Buf;
}

std::string moert::checkpointStagingPath(const std::string &Dir, int64_t Step) {
  return join(Dir, checkpointDirName(Step) + ".partial");
}

std::string CheckpointManifest::toJSON() const {
  json::Object Lay;
  for (const auto &[K, V] : Layout)
    Lay[K] = V;
  json::Object Ts;
  for (const auto &[Name, T] : Tensors) {
    json::Array Shape;
    for (int64_t D : T.Shape)
      Shape.push_back(D);
    Ts[Name] = json::Object{{"dtype", "F32"}, {"shape", std::move(Shape)}, {"file", T.File}};
  }
  json::Object Root{{"format", Format},
                    {"version", Version},
                    {"step", Step},
                    {"consumed_samples", ConsumedSamples},
                    {"seed", std::to_string(Seed)},
                    {"recipe", Recipe},
                    {"recipe_hash", RecipeHash},
                    {"layout", std::move(Lay)},
                    {"distributed_optimizer", DistributedOptimizer},
                    {"optimizer_steps", OptimizerSteps},
                    {"tensors", std::move(Ts)}};
  std::string Text;
  llvm::raw_string_ostream OS(Text);
  OS << llvm::formatv("{0:2}", json::Value(std::move(Root))) << "\n";
  return OS.str();
}

bool CheckpointManifest::parse(const std::string &Text, CheckpointManifest &M, std::string &Error) {
  llvm::Expected<json::Value> V = json::parse(Text);
  if (!V) {
    Error = "not JSON: " + llvm::toString(V.takeError());
    return false;
  }
  const json::Object *Root = V->getAsObject();
  auto Bad = [&](const std::string &What) {
    Error = What;
    return false;
  };
  if (!Root || Root->getString("format") != llvm::StringRef(Format))
    return Bad("not a moerun checkpoint manifest");
  if (Root->getInteger("version") != int64_t(Version))
    return Bad("manifest version " + std::to_string(Root->getInteger("version").getValueOr(-1)) +
               ", this moerun reads version " + std::to_string(Version));
  auto Int = [&](const char *Key, int64_t &Out) {
    auto I = Root->getInteger(Key);
    if (!I || *I < 0)
      return Bad(std::string("'") + Key + "' is missing or negative");
    Out = *I;
    return true;
  };
  auto Seed = Root->getString("seed");
  const json::Object *Lay = Root->getObject("layout");
  const json::Object *Ts = Root->getObject("tensors");
  if (!Int("step", M.Step) || !Int("consumed_samples", M.ConsumedSamples) || !Int("optimizer_steps", M.OptimizerSteps))
    return false;
  if (!Seed || Seed->getAsInteger(10, M.Seed) || !Lay || !Ts)
    return Bad("'seed', 'layout' or 'tensors' is missing");
  M.Recipe = Root->getString("recipe").getValueOr("").str();
  M.RecipeHash = Root->getString("recipe_hash").getValueOr("").str();
  M.DistributedOptimizer = Root->getBoolean("distributed_optimizer").getValueOr(false);
  for (const auto &[K, Val] : *Lay)
    if (auto I = Val.getAsInteger())
      M.Layout[K.str()] = *I;
  for (const auto &[Name, Val] : *Ts) {
    const json::Object *T = Val.getAsObject();
    const json::Array *Shape = T ? T->getArray("shape") : nullptr;
    auto File = T ? T->getString("file") : llvm::None;
    if (!Shape || !File || File->contains('/'))
      return Bad("tensor '" + Name.str() + "' lacks a shape or a file of the checkpoint");
    Tensor &Out = M.Tensors[Name.str()];
    Out.File = File->str();
    for (const json::Value &D : *Shape) {
      auto I = D.getAsInteger();
      if (!I || *I < 0)
        return Bad("tensor '" + Name.str() + "' has a bad shape");
      Out.Shape.push_back(*I);
    }
  }
  return true;
}

bool moert::beginCheckpoint(const std::string &Dir, int64_t Step, std::string &Staging, std::string &Error) {
  if (std::error_code EC = fs::create_directories(Dir)) {
    Error = "cannot create '" + Dir + "': " + EC.message();
    return false;
  }
  Staging = checkpointStagingPath(Dir, Step);
  if (fs::exists(Staging) && !removeTree(Staging, Error))
    return false;
  if (std::error_code EC = fs::create_directory(Staging)) {
    Error = "cannot create '" + Staging + "': " + EC.message();
    return false;
  }
  return true;
}

bool moert::commitCheckpoint(const std::string &Dir, const std::string &Staging, CheckpointManifest M, int Keep,
                             std::string &Error) {
  M.Tensors.clear();
  std::error_code EC;
  for (fs::directory_iterator It(Staging, EC), End; !EC && It != End; It.increment(EC)) {
    std::string Name = llvm::sys::path::filename(It->path()).str();
    if (!llvm::StringRef(Name).endswith(".safetensors"))
      continue;
    SafeTensorsFile F;
    if (!F.open(It->path(), Error))
      return false;
    for (const auto &[T, E] : F.tensors()) {
      if (M.Tensors.count(T)) {
        Error = "tensor '" + T + "' is in two files of '" + Staging + "'";
        return false;
      }
      M.Tensors[T] = {E.Shape, Name};
    }
  }
  if (EC) {
    Error = "cannot list '" + Staging + "': " + EC.message();
    return false;
  }
  std::string Final = join(Dir, checkpointDirName(M.Step));
  if (!replaceFile(join(Staging, ManifestFile), M.toJSON(), Error) || !syncPath(Staging, Error))
    return false;
  // A checkpoint of this step saved before (a rerun from an older one) goes
  // first; the latest file does not name it while it is replaced, unless it
  // is this very step, whose new copy is the same training state.
  if (fs::exists(Final) && !removeTree(Final, Error))
    return false;
  if (std::rename(Staging.c_str(), Final.c_str()) != 0) {
    Error = "cannot rename '" + Staging + "' to '" + Final + "': " + std::strerror(errno);
    return false;
  }
  if (!syncPath(Dir, Error) || !replaceFile(join(Dir, LatestFile), std::to_string(M.Step) + "\n", Error) ||
      !syncPath(Dir, Error))
    return false;
  if (Keep > 0) {
    std::vector<int64_t> Steps = checkpointSteps(Dir);
    for (size_t I = 0; I + size_t(Keep) < Steps.size(); ++I)
      if (Steps[I] != M.Step && !removeTree(join(Dir, checkpointDirName(Steps[I])), Error))
        return false;
  }
  return true;
}

bool moert::findLatestCheckpoint(const std::string &Dir, bool &Found, std::string &Path, CheckpointManifest &M,
                                 std::string &Error) {
  Found = false;
  std::string Latest = join(Dir, LatestFile);
  if (!fs::exists(Latest))
    return true;
  auto Buf = llvm::MemoryBuffer::getFile(Latest);
  int64_t Step;
  if (!Buf || llvm::StringRef((*Buf)->getBuffer()).trim().getAsInteger(10, Step) || Step < 0) {
    Error = "'" + Latest + "' does not hold a step number";
    return false;
  }
  Path = join(Dir, checkpointDirName(Step));
  std::string ManifestPath = join(Path, ManifestFile);
  auto Text = llvm::MemoryBuffer::getFile(ManifestPath);
  if (!Text) {
    Error = "'" + Latest + "' names step " + std::to_string(Step) + " but '" + ManifestPath +
            "' cannot be read: " + Text.getError().message();
    return false;
  }
  if (!CheckpointManifest::parse(std::string((*Text)->getBuffer()), M, Error)) {
    Error = "'" + ManifestPath + "': " + Error;
    return false;
  }
  if (M.Step != Step) {
    Error = "'" + ManifestPath + "' is of step " + std::to_string(M.Step) + ", the latest file says " +
            std::to_string(Step);
    return false;
  }
  Found = true;
  return true;
}
