//===- RecipePrinter.cpp - --dump-recipe ----------------------------------===//
#include "moec/Basic/Quantity.h"
#include "moec/Sema/Recipe.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Path.h"
#include <cmath>
#include <fmt/format.h>

using namespace moec;

static std::string where(const Provenance &P, const llvm::SourceMgr &SM) {
  if (P.IsDefault || !P.Range.Start.isValid())
    return "default";
  unsigned Buf = SM.FindBufferContainingLoc(P.Range.Start);
  if (!Buf)
    return "?";
  auto [Line, Col] = SM.getLineAndColumn(P.Range.Start, Buf);
  std::string File = llvm::sys::path::filename(SM.getMemoryBuffer(Buf)->getBufferIdentifier()).str();
  std::string S = fmt::format("{}:{}:{}", File, Line, Col);
  if (P.Chain.size() > 1)
    S += " via " + llvm::join(P.Chain, " -> ");
  return S;
}

void moec::printModelSummary(const ModelSpec &M, llvm::raw_ostream &OS) {
  OS << fmt::format("layers={} hidden={} heads={} kv_heads={} head_dim={} vocab={} mtp={}", M.Layers, M.Hidden, M.Heads,
                    M.KvHeads, M.HeadDim, M.Vocab, M.MtpLayers);
  if (M.FfnHidden)
    OS << fmt::format(" ffn={}", *M.FfnHidden);
  if (M.MLA)
    OS << fmt::format(" mla(q_lora={} kv_lora={} qk={} rope={} v={})", M.MLA->QLoraRank, M.MLA->KvLoraRank,
                      M.MLA->QkHeadDim, M.MLA->QkRopeHeadDim, M.MLA->VHeadDim);
  if (M.MoE)
    OS << fmt::format(" moe(experts={} top_k={} ffn={} shared={} dense={} router={}{}{})", M.MoE->Experts, M.MoE->TopK,
                      M.MoE->FfnHidden, M.MoE->SharedExperts, M.MoE->DenseLayers, enumName(M.MoE->RouterKind),
                      M.MoE->ExpertBias ? " bias" : "",
                      M.MoE->TopKScaling ? fmt::format(" scaling={}", *M.MoE->TopKScaling) : std::string());
  if (M.LinearAttention)
    OS << fmt::format(" linear(interval={} k={} v={} dim={})", M.LinearAttention->Interval, M.LinearAttention->KeyHeads,
                      M.LinearAttention->ValueHeads, M.LinearAttention->HeadDim);
  if (M.Vision)
    OS << fmt::format(" vision(layers={} hidden={} heads={} patch={})", M.Vision->Layers, M.Vision->Hidden,
                      M.Vision->Heads, M.Vision->PatchSize);
  if (M.RopeTheta)
    OS << (*M.RopeTheta == std::trunc(*M.RopeTheta) && *M.RopeTheta < 1e15
               ? fmt::format(" theta={}", int64_t(*M.RopeTheta))
               : fmt::format(" theta={}", *M.RopeTheta));
}

void moec::printGpuSummary(const GpuSpec &G, llvm::raw_ostream &OS) {
  auto Tera = [](double F) { return fmt::format("{:g}", F / 1e12); };
  OS << fmt::format("memory={:g}GB hbm={:g}TB/s bf16={}TF", G.MemoryBytes / 1e9, G.HbmBytesPerSec / 1e12,
                    Tera(G.Bf16Flops));
  if (G.Fp8Flops)
    OS << " fp8=" << Tera(*G.Fp8Flops) << "TF";
  if (G.Fp4Flops)
    OS << " fp4=" << Tera(*G.Fp4Flops) << "TF";
  OS << fmt::format(" gpus_per_node={} nvlink_domain={} nvlink={:g}GB/s network={:g}GB/s", G.GpusPerNode,
                    G.NVLinkDomain, G.NVLinkBytesPerSec / 1e9, G.NetworkBytesPerSec / 1e9);
}

void moec::printRecipe(const Recipe &R, const llvm::SourceMgr &SM, llvm::raw_ostream &OS) {
  auto Field = [&](llvm::StringRef Path, const std::string &Value) {
    OS << "  " << Path << " = " << Value << "  # " << where(R.origin(Path), SM) << "\n";
  };
  auto Count = [](int64_t N) { return Quantity::integer(N).format() + (N >= 1024 ? fmt::format(" ({})", N) : ""); };
  OS << "recipe " << R.PointName << "\n";
  Field("model", R.Model.Name);
  OS << "  model: ";
  printModelSummary(R.Model, OS);
  OS << "\n";
  Field("cluster.gpu", R.Gpu.Name);
  OS << "  cluster: " << R.Nodes << " nodes, " << R.WorldSize << " GPUs\n";
  Field("seq_len", Count(R.SeqLen));
  Field("batch.micro", Count(R.MicroBatch));
  Field("batch.global", Count(R.GlobalBatch));
  const ParallelConfig &P = R.Parallel;
  OS << fmt::format("  parallel: tp={} cp={} ep={} etp={} pp={} vpp={} dp={} edp={} sp={} fsdp={}\n", P.TP, P.CP, P.EP,
                    P.ETP, P.PP, P.VPP, P.DP, P.EDP, P.SequenceParallel, P.FSDP);
  for (const char *Path : {"parallel.tp", "parallel.cp", "parallel.ep", "parallel.etp", "parallel.pp", "parallel.vpp"})
    if (!R.origin(Path).IsDefault)
      OS << "    " << Path << "  # " << where(R.origin(Path), SM) << "\n";
  if (P.Layout)
    Field("parallel.layout", "\"" + *P.Layout + "\"");
  Field("precision", precisionName(R.Prec).str());
  Field("dispatcher", dispatcherName(R.Dispatch).str());
  std::string Recompute = "none";
  if (R.Recompute.Kind == RecomputeKind::Full)
    Recompute = "full" + (R.Recompute.Layers ? fmt::format("(layers = {})", *R.Recompute.Layers) : std::string());
  else if (R.Recompute.Kind == RecomputeKind::Selective) {
    std::vector<std::string> Names;
    for (RecomputeModule M : R.Recompute.Modules)
      Names.push_back(recomputeModuleName(M).str());
    Recompute = "selective(" + llvm::join(Names, ", ") + ")";
  }
  Field("recompute", Recompute);
  std::vector<std::string> Scopes;
  for (GraphScope S : R.CudaGraph)
    Scopes.push_back(graphScopeName(S).str());
  Field("cuda_graph", Scopes.empty() ? "none" : "[" + llvm::join(Scopes, ", ") + "]");
  Field("offload.optimizer", fmt::format("{}", R.OffloadOptimizer));
  Field("data.source", R.Data == DataSourceKind::Mock ? "mock" : "real(\"" + R.DataPath + "\")");
  Field("data.variable_length", R.VariableLength ? "true" : "false");
  if (R.Model.isVLM())
    Field("vision.frozen", R.VisionFrozen ? "true" : "false");
  Field("language.frozen", R.LanguageFrozen ? "true" : "false");
}
