//===- kernels/cuda/CudaGraph.h - CUDA-graph capture of the plan's scopes -===//
//
// A plan may ask for CUDA graphs over scopes of the step (recipe key
// cuda_graph: attn, mlp, moe, moe_router, moe_preprocess, full_iteration).
// A graph replays the exact kernels, pointers and sizes it captured, so it is
// only correct when every shape in the scope is the same on every step. This
// helper decides that from the run's conditions before capturing anything,
// and refuses with a message naming the scope and the dynamic shape instead
// of capturing something that would replay wrong:
//
//  * attn, mlp, moe_router: static once the sequence length is fixed
//    (refused with variable-length data);
//  * moe_preprocess: the permutation is static, but with EP > 1 the
//    all-to-all counts are exchanged and read on the host each step: refused
//    unless a static expert capacity (pad to capacity) fixes them;
//  * moe, full_iteration (on an MoE model): the expert GEMMs run over
//    per-expert token counts that vary per step: refused unless a static
//    capacity is set;
//  * mamba: this runtime has no mamba layers.
//
// Once captured, a ScopeGraph replays only for the same shape key (the sizes
// the caller derives the scope's launches from); a different key throws
// rather than replaying stale sizes.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_KERNELS_CUDA_CUDAGRAPH_H
#define MOERT_KERNELS_CUDA_CUDAGRAPH_H

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace moert::cuda {

enum class GraphScope { Attn, Mlp, Moe, MoeRouter, MoePreprocess, Mamba, FullIteration };

/// The plan's spelling ("attn", "moe_router", ...); nullopt if unknown.
std::optional<GraphScope> parseGraphScope(const std::string &Name);
const char *graphScopeName(GraphScope S);

/// What decides whether a scope's shapes are static.
struct GraphConditions {
  bool MoeModel = true;
  int64_t EpSize = 1;
  /// Tokens per expert when the plan pads/drops to a static capacity; 0 when
  /// expert token counts are whatever the router produces (dynamic).
  int64_t StaticCapacity = 0;
  /// Sequences of varying length from step to step.
  bool VariableLength = false;
};

/// Thrown when a scope cannot be captured, or a replay would be wrong.
class GraphRefused : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Empty when Scope is capturable under C, else the reason.
std::string whyNotCapturable(GraphScope Scope, const GraphConditions &C);

class ScopeGraph {
public:
  /// Throws GraphRefused when whyNotCapturable() gives a reason.
  ScopeGraph(GraphScope Scope, const GraphConditions &C);
  ~ScopeGraph();
  ScopeGraph(const ScopeGraph &) = delete;
  ScopeGraph &operator=(const ScopeGraph &) = delete;

  /// The first call captures Body's work on Stream (which must not be the
  /// legacy default stream) and launches it; later calls with the same
  /// ShapeKey launch the graph without calling Body. Body must not
  /// synchronize or allocate (CUDA refuses those during capture).
  void run(cudaStream_t Stream, const std::vector<int64_t> &ShapeKey, const std::function<void(cudaStream_t)> &Body);
  bool captured() const { return Exec != nullptr; }
  int64_t replays() const { return Replays; }
  GraphScope scope() const { return Scope; }

private:
  GraphScope Scope;
  std::vector<int64_t> Key;
  cudaGraph_t Graph = nullptr;
  cudaGraphExec_t Exec = nullptr;
  int64_t Replays = 0;
};

} // namespace moert::cuda

#endif
