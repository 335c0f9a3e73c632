//===- kernels/cuda/CudnnAttention.cpp ------------------------------------===//
#include "kernels/cuda/CudnnAttention.h"
#include "kernels/cuda/CudaCheck.h"

#include <cudnn_frontend.h>

#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

namespace moert::cuda {

namespace fe = cudnn_frontend;

namespace {

void checkCudnn(cudnnStatus_t S, const char *Call) {
  if (S != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuDNN: ") + Call + " failed: " + cudnnGetErrorString(S));
}

void checkGraph(fe::error_t E, const char *Stage, const DeviceAttentionShape &S) {
  if (E.is_good())
    return;
  throw std::runtime_error("cuDNN fused attention cannot run batch " + std::to_string(S.Batch) + ", " +
                           std::to_string(S.QTokens) + " tokens, " + std::to_string(S.QHeads) + " q / " +
                           std::to_string(S.KvHeads) + " kv heads of " + std::to_string(S.HeadDim) + " (" + Stage +
                           "): " + E.get_message());
}

// Tensor uids in the variant packs.
enum Uid : fe::graph::Tensor_attributes::uid_t { UQ = 1, UK, UV, UO, UStats, UDO, UDQ, UDK, UDV };

/// [Batch, Tokens, Heads, HeadDim] row-major, as cuDNN's (b, h, s, d).
std::vector<int64_t> bshdDims(const DeviceAttentionShape &S, int64_t Heads) {
  return {S.Batch, Heads, S.QTokens, S.HeadDim};
}
std::vector<int64_t> bshdStrides(const DeviceAttentionShape &S, int64_t Heads) {
  return {S.QTokens * Heads * S.HeadDim, S.HeadDim, Heads * S.HeadDim, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> bshd(fe::graph::Graph &G, const char *Name, Uid Id,
                                                   const DeviceAttentionShape &S, int64_t Heads) {
  return G.tensor(fe::graph::Tensor_attributes()
                      .set_name(Name)
                      .set_uid(Id)
                      .set_dim(bshdDims(S, Heads))
                      .set_stride(bshdStrides(S, Heads)));
}

void setOutput(const std::shared_ptr<fe::graph::Tensor_attributes> &T, Uid Id, const DeviceAttentionShape &S,
               int64_t Heads) {
  T->set_output(true).set_uid(Id).set_dim(bshdDims(S, Heads)).set_stride(bshdStrides(S, Heads));
}

std::shared_ptr<fe::graph::Graph> newGraph() {
  auto G = std::make_shared<fe::graph::Graph>();
  G->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return G;
}

/// The Lse tensor: [Batch, QHeads, Tokens, 1] fp32.
void setStats(const std::shared_ptr<fe::graph::Tensor_attributes> &T, const DeviceAttentionShape &S) {
  T->set_uid(UStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({S.Batch, S.QHeads, S.QTokens, 1})
      .set_stride({S.QHeads * S.QTokens, S.QTokens, 1, 1});
}

} // namespace

struct CudnnAttention::Impl {
  cudnnHandle_t Handle = nullptr;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, float, bool>;
  std::map<Key, std::shared_ptr<fe::graph::Graph>> Graphs;
  DeviceBuffer<char> Workspace;

  static Key keyOf(const DeviceAttentionShape &S, bool Backward) {
    return {S.Batch, S.QTokens, S.QHeads, S.KvHeads, S.HeadDim, S.Scale, Backward};
  }

  fe::graph::Graph &build(const DeviceAttentionShape &S, bool Backward) {
    auto It = Graphs.find(keyOf(S, Backward));
    if (It != Graphs.end())
      return *It->second;
    if (S.QTokens != S.KTokens)
      throw std::invalid_argument("cuDNN attention: whole sequences only (QTokens == KTokens)");
    if (S.vHeadDim() != S.HeadDim)
      throw std::invalid_argument("cuDNN attention: values as wide as keys only");
    auto G = newGraph();
    auto Q = bshd(*G, "Q", UQ, S, S.QHeads);
    auto K = bshd(*G, "K", UK, S, S.KvHeads);
    auto V = bshd(*G, "V", UV, S, S.KvHeads);
    if (!Backward) {
      auto Options = fe::graph::SDPA_attributes()
                         .set_name("sdpa_forward")
                         .set_generate_stats(true)
                         .set_attn_scale(S.Scale)
                         .set_causal_mask(true);
      auto [O, Stats] = G->sdpa(Q, K, V, Options);
      setOutput(O, UO, S, S.QHeads);
      Stats->set_output(true);
      setStats(Stats, S);
    } else {
      auto O = bshd(*G, "O", UO, S, S.QHeads);
      auto DO = bshd(*G, "dO", UDO, S, S.QHeads);
      auto Stats = G->tensor(fe::graph::Tensor_attributes().set_name("Stats"));
      setStats(Stats, S);
      auto Options =
          fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(S.Scale).set_causal_mask(true);
      auto [DQ, DK, DV] = G->sdpa_backward(Q, K, V, O, DO, Stats, Options);
      setOutput(DQ, UDQ, S, S.QHeads);
      setOutput(DK, UDK, S, S.KvHeads);
      setOutput(DV, UDV, S, S.KvHeads);
    }
    checkGraph(G->validate(), "validate", S);
    checkGraph(G->build_operation_graph(Handle), "build_operation_graph", S);
    checkGraph(G->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", S);
    checkGraph(G->check_support(Handle), "check_support", S);
    checkGraph(G->build_plans(Handle), "build_plans", S);
    int64_t Bytes = 0;
    checkGraph(G->get_workspace_size(Bytes), "get_workspace_size", S);
    if (size_t(Bytes) > Workspace.size())
      Workspace.resize(size_t(Bytes));
    return *Graphs.emplace(keyOf(S, Backward), G).first->second;
  }

  void run(fe::graph::Graph &G, const DeviceAttentionShape &S, std::unordered_map<int64_t, void *> &Pack,
           cudaStream_t Stream) {
    checkCudnn(cudnnSetStream(Handle, Stream), "cudnnSetStream");
    checkGraph(G.execute(Handle, Pack, Workspace.size() ? Workspace.data() : nullptr), "execute", S);
    MOERT_CUDA_CHECK_LAUNCH();
  }
};

CudnnAttention::CudnnAttention() : P(std::make_unique<Impl>()) { checkCudnn(cudnnCreate(&P->Handle), "cudnnCreate"); }

CudnnAttention::~CudnnAttention() {
  if (P && P->Handle)
    cudnnDestroy(P->Handle);
}

size_t CudnnAttention::version() { return cudnnGetVersion(); }

void CudnnAttention::forward(const DeviceAttentionShape &S, const bf16 *Q, const bf16 *K, const bf16 *V, bf16 *Out,
                             float *Lse, cudaStream_t Stream) {
  fe::graph::Graph &G = P->build(S, false);
  std::unordered_map<int64_t, void *> Pack{
      {UQ, const_cast<bf16 *>(Q)}, {UK, const_cast<bf16 *>(K)}, {UV, const_cast<bf16 *>(V)}, {UO, Out}, {UStats, Lse}};
  P->run(G, S, Pack, Stream);
}

void CudnnAttention::backward(const DeviceAttentionShape &S, const bf16 *Q, const bf16 *K, const bf16 *V,
                              const bf16 *Out, const bf16 *DOut, const float *Lse, bf16 *DQ, bf16 *DK, bf16 *DV,
                              cudaStream_t Stream) {
  fe::graph::Graph &G = P->build(S, true);
  std::unordered_map<int64_t, void *> Pack{{UQ, const_cast<bf16 *>(Q)},
                                           {UK, const_cast<bf16 *>(K)},
                                           {UV, const_cast<bf16 *>(V)},
                                           {UO, const_cast<bf16 *>(Out)},
                                           {UDO, const_cast<bf16 *>(DOut)},
                                           {UStats, const_cast<float *>(Lse)},
                                           {UDQ, DQ},
                                           {UDK, DK},
                                           {UDV, DV}};
  P->run(G, S, Pack, Stream);
}

} // namespace moert::cuda
