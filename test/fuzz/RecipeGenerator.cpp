//===- RecipeGenerator.cpp - Well-typed, absurd recipes from bytes --------===//
#include "RecipeGenerator.h"
#include "FuzzCommon.h"

#include "moec/Sema/Schema.h"

#include <cinttypes>
#include <cstdint>
#include <fmt/format.h>
#include <map>

using namespace moec;

namespace {
using ast::DefKind;

class Generator {
public:
  explicit Generator(FuzzedDataProvider &In) : In(In) {}

  std::string file() {
    // Half the inputs start from a recipe whose sizes divide, so that they
    // reach the planner, and then set a few fields to absurd values.
    if (In.ConsumeBool())
      return consistentRecipe();
    std::string Out;
    bool OwnGpu = In.ConsumeIntegralInRange(0, 7) == 0;
    bool OwnModel = In.ConsumeIntegralInRange(0, 3) == 0;
    if (OwnGpu)
      Out += definition(DefKind::Gpu, "g", /*Sweeps=*/false);
    if (OwnModel)
      Out += definition(DefKind::Model, "m", /*Sweeps=*/false);
    GpuName = OwnGpu ? "g" : pick(fuzz::catalogNames(DefKind::Gpu));
    ModelName = OwnModel ? "m" : pick(fuzz::catalogNames(DefKind::Model));
    Out += definition(DefKind::Recipe, "r", /*Sweeps=*/true);
    return Out;
  }

private:
  FuzzedDataProvider &In;
  std::string GpuName, ModelName;
  unsigned SweptFields = 0;

  bool chance(unsigned OneIn) { return In.ConsumeIntegralInRange<unsigned>(0, OneIn - 1) == 0; }

  std::string pick(const std::vector<std::string> &Names) {
    return Names.empty() ? std::string("none") : Names[In.ConsumeIntegralInRange<size_t>(0, Names.size() - 1)];
  }

  /// Mostly plausible sizes (small powers of two), sometimes extreme ones.
  int64_t count(int64_t Min) {
    static const int64_t Extreme[] = {0,
                                      1,
                                      3,
                                      7,
                                      1000,
                                      4096,
                                      65535,
                                      1 << 20,
                                      int64_t(1) << 31,
                                      int64_t(1) << 40,
                                      int64_t(1) << 53,
                                      int64_t(1) << 62,
                                      INT64_MAX};
    int64_t V;
    switch (In.ConsumeIntegralInRange(0, 5)) {
    case 0:
      V = In.PickValueInArray(Extreme);
      break;
    case 1:
      V = In.ConsumeIntegralInRange<int64_t>(0, 300);
      break;
    default:
      V = int64_t(1) << In.ConsumeIntegralInRange(0, 8);
      break;
    }
    return std::max(V, Min);
  }

  /// A count as .moe text: a literal, `4K`, or an expression that evaluates
  /// to one (or overflows, or divides by zero: located errors expected).
  std::string countText(int64_t Min) {
    int64_t V = count(Min);
    switch (In.ConsumeIntegralInRange(0, 9)) {
    case 0:
      return fmt::format("{}K", std::max<int64_t>(1, V % 4096));
    case 1:
      return fmt::format("{} * {}", V, count(0));
    case 2:
      return fmt::format("({} + {}) / {}", V, count(0), count(0));
    case 3:
      return fmt::format("{} - {}", V, count(0));
    default:
      return std::to_string(V);
    }
  }

  std::string number(double Min, double Max) {
    static const double Extreme[] = {0.0, 1e-300, 0.001, 0.5, 1.0, 1.5, 2.0, 1e9, 1e300};
    double V = chance(3) ? In.PickValueInArray(Extreme) : In.ConsumeFloatingPointInRange(0.0, 8.0);
    V = std::min(std::max(V, Min), Max);
    return fmt::format("{:e}", V);
  }

  std::string quantity(const char *const *Units, size_t NumUnits) {
    static const char *Magnitudes[] = {"1", "3", "80", "141", "989", "0.5", "1e6", "1e-6", "123456789"};
    return fmt::format("{}{}", In.PickValueInArray(Magnitudes),
                       Units[In.ConsumeIntegralInRange<size_t>(0, NumUnits - 1)]);
  }

  std::string nameOf(llvm::ArrayRef<llvm::StringLiteral> Values) {
    return Values.empty() ? std::string("none") : Values[In.ConsumeIntegralInRange<size_t>(0, Values.size() - 1)].str();
  }

  /// Megatron-Core layout text: mostly built from stage pieces, sometimes
  /// random characters of the layout alphabet.
  std::string layout() {
    std::string S;
    if (chance(4)) {
      static const char Alphabet[] = "Etml|()*0123456789L";
      size_t N = In.ConsumeIntegralInRange<size_t>(0, 24);
      for (size_t I = 0; I < N; ++I)
        S += Alphabet[In.ConsumeIntegralInRange<size_t>(0, sizeof(Alphabet) - 2)];
      return S;
    }
    S = chance(4) ? "" : "E";
    unsigned Stages = In.ConsumeIntegralInRange(1, 8);
    for (unsigned I = 0; I < Stages; ++I) {
      if (I)
        S += "|";
      switch (In.ConsumeIntegralInRange(0, 3)) {
      case 0:
        S += fmt::format("t*{}", In.ConsumeIntegralInRange(0, 80));
        break;
      case 1:
        S += fmt::format("(tt|)*{}", In.ConsumeIntegralInRange(0, 40));
        break;
      default:
        S += std::string(In.ConsumeIntegralInRange(0, 8), 't');
        break;
      }
    }
    if (chance(3))
      S += "m";
    if (!chance(4))
      S += "L";
    return S;
  }

  std::string scalar(const FieldSpec &F) {
    static const char *BytesUnits[] = {"B", "KB", "MB", "GB", "TB", "GiB", "TiB"};
    static const char *BandwidthUnits[] = {"B/s", "MB/s", "GB/s", "TB/s", "GiB/s"};
    static const char *FlopUnits[] = {"GFLOPS", "TFLOPS", "PFLOPS"};
    switch (F.Type) {
    case FieldType::Count:
      return countText(int64_t(F.Min));
    case FieldType::Number:
      return number(F.Min, F.Max);
    case FieldType::Bool:
      return In.ConsumeBool() ? "true" : "false";
    case FieldType::String:
      return "\"" + (F.Path == "parallel.layout" ? layout() : std::string("x")) + "\"";
    case FieldType::Bytes:
      return quantity(BytesUnits, std::size(BytesUnits));
    case FieldType::Bandwidth:
      return quantity(BandwidthUnits, std::size(BandwidthUnits));
    case FieldType::FlopRate:
      return quantity(FlopUnits, std::size(FlopUnits));
    case FieldType::Enum:
      return nameOf(F.EnumValues);
    case FieldType::ScopeList: {
      if (chance(3))
        return "none";
      std::string S = "[" + nameOf(F.EnumValues);
      for (unsigned I = In.ConsumeIntegralInRange(0, 3); I > 0; --I)
        S += ", " + nameOf(F.EnumValues);
      return S + "]";
    }
    case FieldType::FlagOrList: {
      if (chance(2))
        return In.ConsumeBool() ? "true" : "false";
      std::string S = "[" + nameOf(F.EnumValues);
      for (unsigned I = In.ConsumeIntegralInRange(0, 3); I > 0; --I)
        S += ", " + nameOf(F.EnumValues);
      return S + "]";
    }
    case FieldType::CountList: {
      std::string S = "[" + countText(1);
      for (unsigned I = In.ConsumeIntegralInRange(0, 3); I > 0; --I)
        S += ", " + countText(1);
      return S + "]";
    }
    case FieldType::ModelRef:
      return ModelName;
    case FieldType::GpuRef:
      return GpuName;
    case FieldType::ClusterRef:
      return "";
    case FieldType::Recompute:
      switch (In.ConsumeIntegralInRange(0, 4)) {
      case 0:
        return "none";
      case 1:
        return "full";
      case 2:
        return fmt::format("full(method = {}, layers = {})", In.ConsumeBool() ? "uniform" : "block", countText(0));
      default: {
        std::string S = "selective(" + nameOf(recomputeModules());
        for (unsigned I = In.ConsumeIntegralInRange(0, 3); I > 0; --I)
          S += ", " + nameOf(recomputeModules());
        return S + ")";
      }
      }
    case FieldType::DataSource:
      return In.ConsumeBool() ? "mock" : "real(\"/nonexistent/prefix\")";
    case FieldType::Attention:
      if (In.ConsumeBool())
        return "gqa";
      return fmt::format("mla(q_lora_rank = {}, kv_lora_rank = {}, qk_head_dim = {}, qk_rope_head_dim = {}, "
                         "v_head_dim = {})",
                         countText(1), countText(1), countText(1), countText(1), countText(1));
    }
    return "0";
  }

  /// A value, or for a recipe sometimes `sweep [...]` (at most two swept
  /// fields of four values: planning every point must stay fast).
  std::string value(const FieldSpec &F, bool Sweeps) {
    if (Sweeps && SweptFields < 2 && F.Type != FieldType::ModelRef && F.Type != FieldType::GpuRef && chance(12)) {
      ++SweptFields;
      std::string S = "sweep [" + scalar(F);
      for (unsigned I = In.ConsumeIntegralInRange(0, 3); I > 0; --I)
        S += ", " + scalar(F);
      return S + "]";
    }
    return scalar(F);
  }

  std::string definition(DefKind Kind, const char *Name, bool Sweeps) {
    std::string Out = fmt::format("{} {} {{\n", defKindName(Kind).str(), Name);
    for (const FieldSpec &F : schemaFor(Kind)) {
      if (F.Type == FieldType::ClusterRef)
        continue; // the recipe states its cluster section instead
      bool Set = F.Req == Presence::Required || F.Req == Presence::RequiredInSection ? !chance(40) : chance(4);
      // A recipe needs a GPU and a size for its cluster.
      if (Kind == DefKind::Recipe && (F.Path == "cluster.gpu" || F.Path == "cluster.nodes"))
        Set = !chance(40);
      // Sections with required fields are all-or-nothing: enter them rarely.
      if (F.Req == Presence::RequiredInSection && Kind == DefKind::Model) {
        llvm::StringRef Section = F.section();
        Set = Section == "moe" ? !chance(8) : (Section == "vision" ? VisionOn : LinearOn);
      }
      if (F.Path == "layers")
        VisionOn = chance(6), LinearOn = chance(6);
      if (Set)
        Out += fmt::format("  {} = {}\n", F.Path.str(), value(F, Sweeps));
    }
    return Out + "}\n";
  }

  bool VisionOn = false, LinearOn = false;

  std::string consistentRecipe() {
    struct Base {
      const char *Model, *Gpu;
      int64_t GpusPerNode, Layers;
    };
    // tiny_moe fits any memory, so its points get furthest; listed thrice.
    static const Base Bases[] = {{"tiny_moe", "cpu", 2, 4},
                                 {"tiny_moe", "cpu", 2, 4},
                                 {"tiny_moe", "cpu", 2, 4},
                                 {"qwen3_30b_a3b", "h100_sxm", 8, 48},
                                 {"deepseek_v3", "h100_sxm", 8, 61},
                                 {"mixtral_8x7b", "b200", 8, 32},
                                 {"qwen3_next_80b_a3b", "gb200_nvl72", 4, 48}};
    const Base &B = In.PickValueInArray(Bases);
    GpuName = B.Gpu;
    ModelName = B.Model;
    auto Pow2 = [&](int Max) { return int64_t(1) << In.ConsumeIntegralInRange(0, Max); };
    int64_t TP = Pow2(2), CP = Pow2(2), PP = Pow2(3), DP = Pow2(In.ConsumeIntegralInRange(0, 7) == 0 ? 6 : 3);
    // At most 256 ranks: a plan's cost is linear in its ranks (1024 take
    // 0.06 s in a release build but over a second under the sanitizers,
    // which would read as a hang); absurd sizes come from the overrides.
    while (TP * CP * PP * DP > 256)
      (DP > 1 ? DP : PP > 1 ? PP : CP) /= 2;
    int64_t World = TP * CP * PP * DP;
    // ep divides tp x cp x dp so that edp is whole.
    int64_t EP = std::min(Pow2(4), TP * CP * DP);
    int64_t Micro = Pow2(2);
    std::map<std::string, std::string> Fields = {
        {"model", B.Model},
        {"cluster.gpu", B.Gpu},
        {"cluster.gpus", std::to_string(std::max(World, B.GpusPerNode))},
        {"seq_len", std::to_string(int64_t(1) << In.ConsumeIntegralInRange(7, 15))},
        {"batch.micro", std::to_string(Micro)},
        {"batch.global", std::to_string(Micro * DP * Pow2(4))},
        {"parallel.tp", std::to_string(TP)},
        {"parallel.cp", std::to_string(CP)},
        {"parallel.ep", std::to_string(EP)},
        {"parallel.pp", std::to_string(PP)},
    };
    if (PP > 1 && In.ConsumeBool())
      Fields["parallel.vpp"] = std::to_string(In.ConsumeIntegralInRange<int64_t>(1, 4));
    // Then up to three fields of the schema, set to anything of their type.
    llvm::ArrayRef<FieldSpec> Schema = schemaFor(DefKind::Recipe);
    for (unsigned I = In.ConsumeIntegralInRange(0, 3); I > 0; --I) {
      const FieldSpec &F = Schema[In.ConsumeIntegralInRange<size_t>(0, Schema.size() - 1)];
      if (F.Type != FieldType::ClusterRef && F.Type != FieldType::ModelRef && F.Type != FieldType::GpuRef)
        Fields[F.Path.str()] = value(F, /*Sweeps=*/true);
    }
    std::string Out = "recipe r {\n";
    for (const auto &[Path, Value] : Fields)
      Out += fmt::format("  {} = {}\n", Path, Value);
    return Out + "}\n";
  }
};
} // namespace

std::string fuzz::generateRecipeFile(FuzzedDataProvider &In) { return Generator(In).file(); }
