//===- kernels/cuda/CudaGraph.cpp -----------------------------------------===//
#include "kernels/cuda/CudaGraph.h"

#include "kernels/cuda/CudaCheck.h"

#include <sstream>

namespace moert::cuda {

namespace {
struct ScopeName {
  GraphScope Scope;
  const char *Name;
};
const ScopeName Names[] = {{GraphScope::Attn, "attn"},
                           {GraphScope::Mlp, "mlp"},
                           {GraphScope::Moe, "moe"},
                           {GraphScope::MoeRouter, "moe_router"},
                           {GraphScope::MoePreprocess, "moe_preprocess"},
                           {GraphScope::Mamba, "mamba"},
                           {GraphScope::FullIteration, "full_iteration"}};

std::string keyText(const std::vector<int64_t> &Key) {
  std::ostringstream OS;
  OS << "[";
  for (size_t I = 0; I < Key.size(); ++I)
    OS << (I ? ", " : "") << Key[I];
  OS << "]";
  return OS.str();
}
} // namespace

std::optional<GraphScope> parseGraphScope(const std::string &Name) {
  for (const ScopeName &N : Names)
    if (Name == N.Name)
      return N.Scope;
  return std::nullopt;
}

const char *graphScopeName(GraphScope S) {
  for (const ScopeName &N : Names)
    if (N.Scope == S)
      return N.Name;
  return "?";
}

std::string whyNotCapturable(GraphScope Scope, const GraphConditions &C) {
  std::string Name = graphScopeName(Scope);
  if (Scope == GraphScope::Mamba)
    return "CUDA-graph scope 'mamba': this runtime has no mamba layers";
  if (C.VariableLength)
    return "CUDA-graph scope '" + Name +
           "' needs a fixed sequence length, but the data has variable-length "
           "sequences (shapes change every step)";
  bool ExpertCountsDynamic = C.MoeModel && C.StaticCapacity <= 0;
  if (Scope == GraphScope::MoePreprocess && ExpertCountsDynamic && C.EpSize > 1)
    return "CUDA-graph scope 'moe_preprocess' with EP " + std::to_string(C.EpSize) +
           ": the token counts per expert are exchanged and read on the host "
           "every step; set a static expert capacity (pad to capacity) or "
           "drop the scope";
  if ((Scope == GraphScope::Moe || Scope == GraphScope::FullIteration) && ExpertCountsDynamic)
    return "CUDA-graph scope '" + Name +
           "': the expert GEMMs run over per-expert token counts that vary "
           "every step; set a static expert capacity (pad to capacity) or "
           "capture only attn / moe_router";
  return "";
}

ScopeGraph::ScopeGraph(GraphScope Scope, const GraphConditions &C) : Scope(Scope) {
  std::string Why = whyNotCapturable(Scope, C);
  if (!Why.empty())
    throw GraphRefused(Why);
}

ScopeGraph::~ScopeGraph() {
  if (Exec)
    cudaGraphExecDestroy(Exec);
  if (Graph)
    cudaGraphDestroy(Graph);
}

void ScopeGraph::run(cudaStream_t Stream, const std::vector<int64_t> &ShapeKey,
                     const std::function<void(cudaStream_t)> &Body) {
  if (!Stream)
    throw GraphRefused(std::string("CUDA-graph scope '") + graphScopeName(Scope) +
                       "': the legacy default stream cannot be captured; "
                       "run the scope on a created stream");
  if (Exec) {
    if (ShapeKey != Key)
      throw GraphRefused(std::string("CUDA-graph scope '") + graphScopeName(Scope) + "' was captured for shapes " +
                         keyText(Key) + " but is now run with " + keyText(ShapeKey) +
                         "; replaying would use the old sizes");
    MOERT_CUDA_CHECK(cudaGraphLaunch(Exec, Stream));
    ++Replays;
    return;
  }
  MOERT_CUDA_CHECK(cudaStreamBeginCapture(Stream, cudaStreamCaptureModeThreadLocal));
  try {
    Body(Stream);
  } catch (...) {
    cudaGraph_t Broken = nullptr;
    cudaStreamEndCapture(Stream, &Broken);
    if (Broken)
      cudaGraphDestroy(Broken);
    throw;
  }
  MOERT_CUDA_CHECK(cudaStreamEndCapture(Stream, &Graph));
  MOERT_CUDA_CHECK(cudaGraphInstantiate(&Exec, Graph, 0));
  Key = ShapeKey;
  MOERT_CUDA_CHECK(cudaGraphLaunch(Exec, Stream));
}

} // namespace moert::cuda
