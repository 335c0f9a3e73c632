//===- Schema.cpp - The field tables --------------------------------------===//
#include "moec/Sema/Schema.h"
#include "moec/Sema/Recipe.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include <cfloat>
#include <fmt/format.h>

using namespace moec;
using ast::DefKind;

namespace {
constexpr double NoMax = DBL_MAX;

// Enumerations come from RecipeEnums.def (Recipe.h), the one table the
// Recipe IR, the parse and these checks share.
const llvm::ArrayRef<llvm::StringLiteral> CpCommValues = enumNames<CpComm>();
const llvm::ArrayRef<llvm::StringLiteral> PrecisionValues = enumNames<Precision>();
const llvm::ArrayRef<llvm::StringLiteral> DispatcherValues = enumNames<Dispatcher>();
const llvm::ArrayRef<llvm::StringLiteral> GraphScopeValues = enumNames<GraphScope>();
const llvm::ArrayRef<llvm::StringLiteral> ArchValues = enumNames<GpuArch>();
const llvm::ArrayRef<llvm::StringLiteral> RouterValues = enumNames<Router>();
const llvm::ArrayRef<llvm::StringLiteral> OrderValues = enumNames<RankOrder>();
const llvm::ArrayRef<llvm::StringLiteral> FsdpImplValues = enumNames<FsdpImpl>();
const llvm::ArrayRef<llvm::StringLiteral> RouterDtypeValues = enumNames<RouterDtype>();
const llvm::ArrayRef<llvm::StringLiteral> OptimizerValues = enumNames<OptimizerKind>();
const llvm::ArrayRef<llvm::StringLiteral> LrDecayValues = enumNames<LrDecay>();
const llvm::ArrayRef<llvm::StringLiteral> GraphImplValues = enumNames<GraphImpl>();
const llvm::ArrayRef<llvm::StringLiteral> OffloadModuleValues = enumNames<OffloadModule>();
/// selective(...) also takes the seeds' shorthand (recompute-module-alias).
const std::vector<llvm::StringLiteral> ModuleValues = [] {
  std::vector<llvm::StringLiteral> V(enumNames<RecomputeModule>().begin(), enumNames<RecomputeModule>().end());
  V.push_back("up_proj");
  V.push_back("norm");
  return V;
}();

using P = Presence;
using T = FieldType;

#define FIELD(Owner, Path, Type, Presence, Default, Min, Max, Enum, Doc)                                               \
  FieldSpec { DefKind::Owner, Path, T::Type, P::Presence, Default, Min, Max, Enum, Doc }
#define COUNT(Owner, Path, Presence, Default, Min, Doc)                                                                \
  FIELD(Owner, Path, Count, Presence, Default, Min, NoMax, {}, Doc)

const FieldSpec RecipeFields[] = {
    FIELD(Recipe, "target", String, Default, "\"megatron-bridge@main\"", 0, 0, {},
          "the Megatron release the run uses (`moec targets` lists them); --target overrides it"),
    FIELD(Recipe, "model", ModelRef, Required, "", 0, 0, {},
          "the model: a catalog or user model name, or hf(\"config.json\")"),
    FIELD(Recipe, "cluster", ClusterRef, Optional, "", 0, 0, {},
          "a named cluster; or give the cluster section's fields"),
    FIELD(Recipe, "cluster.gpu", GpuRef, Optional, "", 0, 0, {},
          "GPU system (brings its node size and NVLink domain); required unless `cluster` names a cluster"),
    COUNT(Recipe, "cluster.nodes", Optional, "", 1, "nodes in the job (or give cluster.gpus)"),
    COUNT(Recipe, "cluster.gpus", Derived, "nodes x gpu.gpus_per_node", 1, "GPUs in the job, the world size"),
    COUNT(Recipe, "seq_len", Required, "", 1, "tokens per sequence"),
    COUNT(Recipe, "batch.micro", Required, "", 1, "sequences per micro batch"),
    COUNT(Recipe, "batch.global", Required, "", 1, "sequences per optimizer step"),
    COUNT(Recipe, "parallel.tp", Default, "1", 1, "tensor parallel size"),
    COUNT(Recipe, "parallel.cp", Default, "1", 1, "context parallel size"),
    COUNT(Recipe, "parallel.ep", Default, "1", 1, "expert parallel size"),
    COUNT(Recipe, "parallel.etp", Default, "1", 1, "expert tensor parallel size"),
    COUNT(Recipe, "parallel.pp", Default, "1", 1, "pipeline parallel size"),
    COUNT(Recipe, "parallel.vpp", Default, "1", 1, "virtual pipeline stages per pipeline rank"),
    COUNT(Recipe, "parallel.dp", Derived, "gpus / (tp x cp x pp)", 1,
          "data parallel size (dense layers); stating it makes it checked"),
    COUNT(Recipe, "parallel.edp", Derived, "gpus / (etp x ep x pp)", 1,
          "expert data parallel size; stating it makes it checked"),
    FIELD(Recipe, "parallel.sp", Bool, Derived, "tp > 1", 0, 0, {}, "sequence parallel"),
    FIELD(Recipe, "parallel.fsdp", Bool, Default, "false", 0, 0, {},
          "fully sharded data parallel instead of 3D parallel"),
    FIELD(Recipe, "parallel.cp_comm", Enum, Default, "p2p", 0, 0, CpCommValues, "context-parallel communication"),
    FIELD(Recipe, "parallel.layout", String, Optional, "", 0, 0, {},
          "explicit pipeline layout in Megatron-Core notation (E, t, m, L, |, (...)*n)"),
    FIELD(Recipe, "parallel.order", Enum, Default, "tp_cp_ep_dp_pp", 0, 0, OrderValues,
          "rank order of the process grid (Megatron's default, or --use-tp-pp-dp-mapping)"),
    FIELD(Recipe, "parallel.cp_hierarchy", CountList, Optional, "", 1, NoMax, {},
          "hierarchical context-parallel sizes, innermost first; their product is cp (needed by cp_comm = a2a_p2p)"),
    FIELD(Recipe, "parallel.fsdp_impl", Enum, Default, "megatron", 0, 0, FsdpImplValues,
          "FSDP flavour when parallel.fsdp is true: Megatron-FSDP or torch FSDP2"),
    FIELD(Recipe, "parallel.tp_comm_overlap", Bool, Default, "false", 0, 0, {},
          "overlap tensor-parallel communication with GEMMs (needs sequence parallel)"),
    FIELD(Recipe, "precision", Enum, Default, "bf16", 0, 0, PrecisionValues, "training precision recipe"),
    FIELD(Recipe, "dispatcher", Enum, Default, "alltoall", 0, 0, DispatcherValues, "MoE token dispatcher"),
    FIELD(Recipe, "fp8_param_gather", Bool, Derived,
          "the target's preset: true for fp8.delayed, fp8.tensorwise and mxfp8 under Megatron-Bridge, else false", 0, 0,
          {}, "keep parameters in FP8 and all-gather them in FP8 (Megatron fp8_param_gather; needs an FP8 precision)"),
    FIELD(Recipe, "fp4_param_gather", Bool, Derived,
          "the target's preset: true for nvfp4 under megatron-bridge@main, else false", 0, 0, {},
          "keep parameters in FP4 and all-gather them in FP4 (Megatron fp4_param; needs nvfp4)"),
    COUNT(Recipe, "bf16_layers.first", Default, "0", 0,
          "leading decoder layers kept in BF16 under an FP8/FP4 precision (Megatron first_last_layers_bf16)"),
    COUNT(Recipe, "bf16_layers.last", Default, "0", 0,
          "trailing decoder layers kept in BF16 under an FP8/FP4 precision (Megatron first_last_layers_bf16)"),
    FIELD(Recipe, "recompute", Recompute, Default, "none", 0, 0, ModuleValues,
          "activation recomputation: none, full, full(method = uniform, layers = N), selective(MODULE, ...)"),
    FIELD(Recipe, "cuda_graph", ScopeList, Default, "none", 0, 0, GraphScopeValues, "CUDA-graph scopes, or none"),
    FIELD(Recipe, "cuda_graph_impl", Enum, Default, "transformer_engine", 0, 0, GraphImplValues,
          "how scoped CUDA graphs are captured (ignored for none and full_iteration)"),
    FIELD(Recipe, "moe.capacity_factor", Number, Optional, "", 0.001, NoMax, {},
          "expert capacity factor; unset means dropless routing"),
    FIELD(Recipe, "moe.pad_to_capacity", Bool, Default, "false", 0, 0, {},
          "pad each expert's input to its capacity (drop-and-pad: static shapes)"),
    FIELD(Recipe, "moe.overlap_ep_comm", Bool, Default, "false", 0, 0, {},
          "overlap expert-parallel all-to-all with computation of another micro batch"),
    FIELD(Recipe, "moe.delay_wgrad", Bool, Default, "false", 0, 0, {},
          "delay expert weight-gradient computation to overlap it with communication"),
    COUNT(Recipe, "moe.dispatcher_sms", Optional, "", 1,
          "SMs the deepep or hybridep kernels take (Megatron moe_deepep_num_sms, moe_hybridep_num_sms; unset: 20 "
          "for deepep, 16 for hybridep)"),
    FIELD(Recipe, "moe.shared_expert_overlap", Bool, Default, "false", 0, 0, {},
          "overlap shared-expert computation with token dispatch"),
    FIELD(Recipe, "moe.router_dtype", Enum, Default, "fp32", 0, 0, RouterDtypeValues, "router computation precision"),
    FIELD(Recipe, "moe.force_balance", Bool, Default, "false", 0, 0, {},
          "route by random logits, balanced across experts in expectation, for benchmarks (Megatron "
          "moe_router_force_load_balancing): the router's own choice is ignored"),
    FIELD(Recipe, "moe.grouped_gemm", Bool, Default, "true", 0, 0, {}, "grouped GEMM for the experts of a rank"),
    FIELD(Recipe, "offload.optimizer", Number, Default, "0", 0, 1, {}, "fraction of optimizer state kept on the CPU"),
    FIELD(Recipe, "offload.overlap_copies", Bool, Default, "false", 0, 0, {},
          "overlap the offloaded optimizer's device-host copies with its host step (Megatron "
          "overlap_cpu_optimizer_d2h_h2d)"),
    FIELD(Recipe, "offload.activations", FlagOrList, Default, "false", 0, 0, OffloadModuleValues,
          "offload activations to the CPU: true offloads whole layers (Megatron cpu_offloading); a list offloads the "
          "inputs of those modules in every layer (fine_grained_activation_offloading with offload_modules)"),
    COUNT(Recipe, "offload.activation_layers", Optional, "", 0, "layers whose activations are offloaded"),
    FIELD(Recipe, "optimizer.type", Enum, Default, "adam", 0, 0, OptimizerValues,
          "optimizer (muon: Megatron's Muon for the matrices, Adam for the rest)"),
    FIELD(Recipe, "optimizer.lr", Number, Optional, "", 1e-12, NoMax, {},
          "peak learning rate (Megatron lr; unset: moerun's --lr, 1e-3)"),
    FIELD(Recipe, "optimizer.min_lr", Number, Default, "0", 0, NoMax, {},
          "learning rate at the end of the decay and after it (Megatron min_lr)"),
    COUNT(Recipe, "optimizer.warmup_steps", Default, "0", 0,
          "steps of linear warm-up from 0 to optimizer.lr (Megatron lr_warmup_iters)"),
    FIELD(Recipe, "optimizer.decay", Enum, Default, "constant", 0, 0, LrDecayValues,
          "learning-rate decay after the warm-up (Megatron lr_decay_style)"),
    COUNT(Recipe, "optimizer.decay_steps", Optional, "", 1,
          "step at which the decay reaches optimizer.min_lr (Megatron lr_decay_iters; unset: the run's last step)"),
    FIELD(Recipe, "optimizer.weight_decay", Number, Default, "0.01", 0, NoMax, {},
          "decoupled weight decay of the weight matrices; norms and biases are not decayed (Megatron weight_decay)"),
    FIELD(Recipe, "optimizer.adam_beta1", Number, Default, "0.9", 0, 0.99999, {},
          "Adam's first-moment decay, below 1 (Megatron adam_beta1)"),
    FIELD(Recipe, "optimizer.adam_beta2", Number, Default, "0.999", 0, 0.99999, {},
          "Adam's second-moment decay, below 1 (Megatron adam_beta2)"),
    FIELD(Recipe, "optimizer.adam_eps", Number, Default, "1e-8", 1e-30, 1, {},
          "Adam's denominator term (Megatron adam_eps)"),
    FIELD(Recipe, "optimizer.clip_grad", Number, Default, "1.0", 0, NoMax, {},
          "clip the global gradient norm to this; 0 turns clipping off (Megatron clip_grad)"),
    FIELD(Recipe, "optimizer.distributed", Bool, Derived,
          "false under torch FSDP2 (parallel.fsdp with fsdp_impl = torch, which shards the optimizer state itself), "
          "else true",
          0, 0, {},
          "shard optimizer state over data-parallel ranks (Megatron's distributed optimizer; with muon, its "
          "layer-wise distributed optimizer, dist_muon)"),
    FIELD(Recipe, "optimizer.precision_aware", Bool, Derived, "offload.optimizer > 0", 0, 0, {},
          "precision-aware optimizer (low-precision moments and master weights)"),
    FIELD(Recipe, "optimizer.overlap_grad_reduce", Bool, Default, "true", 0, 0, {},
          "overlap gradient reduce-scatter with the backward pass"),
    FIELD(Recipe, "optimizer.overlap_param_gather", Bool, Derived,
          "optimizer.distributed (the gather it overlaps is the distributed optimizer's)", 0, 0, {},
          "overlap parameter all-gather with the forward pass"),
    FIELD(Recipe, "data.source", DataSource, Default, "mock", 0, 0, {},
          "mock, or real(\"path/prefix\") for a Megatron indexed dataset"),
    FIELD(Recipe, "data.variable_length", Bool, Default, "false", 0, 0, {}, "variable-length (packed) batches"),
    FIELD(Recipe, "data.shuffle", Bool, Default, "false", 0, 0, {},
          "visit the samples of each pass over a real dataset in an order drawn from the run's seed"),
    FIELD(Recipe, "data.split", CountList, Optional, "", 0, NoMax, {},
          "weights of the training, validation and test parts of a real dataset's sequences, in file order "
          "(Megatron split: [969, 30, 1]; missing weights are 0); unset: every sequence trains"),
    COUNT(Recipe, "data.eval_interval", Optional, "", 1,
          "evaluate the loss on the validation part every this many steps (Megatron eval_interval); unset: never"),
    COUNT(Recipe, "data.eval_iters", Default, "100", 1,
          "global batches of validation samples per evaluation (Megatron eval_iters)"),
    COUNT(Recipe, "data.images_per_sample", Default, "1", 0,
          "images per training sample (VLM only; mock data carries none)"),
    COUNT(Recipe, "data.image_size", Default, "448", 1, "image side in pixels after resizing (VLM only)"),
    FIELD(Recipe, "vision.frozen", Bool, Default, "false", 0, 0, {},
          "VLM only: freeze the vision encoder and projector"),
    FIELD(Recipe, "language.frozen", Bool, Default, "false", 0, 0, {},
          "VLM only: freeze the language model (decoder, embedding, output layer): no gradients, optimizer state or "
          "weight-gradient GEMMs for it"),
};

const FieldSpec ModelFields[] = {
    COUNT(Model, "layers", Required, "", 1, "decoder layers"),
    COUNT(Model, "hidden", Required, "", 1, "hidden size"),
    COUNT(Model, "ffn_hidden", Optional, "", 1, "intermediate size of dense FFN layers"),
    COUNT(Model, "heads", Required, "", 1, "attention heads"),
    COUNT(Model, "kv_heads", Derived, "heads", 1, "key/value heads (query groups)"),
    COUNT(Model, "head_dim", Derived, "hidden / heads", 1, "dimension per attention head"),
    COUNT(Model, "vocab", Required, "", 1, "vocabulary size"),
    COUNT(Model, "mtp_layers", Default, "0", 0, "multi-token-prediction layers"),
    COUNT(Model, "max_seq_len", Optional, "", 1, "maximum position embeddings"),
    FIELD(Model, "rope_theta", Number, Optional, "", 1, NoMax, {},
          "RoPE base frequency (unset: 10000, Megatron's rotary_base default); moerun rotates by it"),
    FIELD(Model, "rope_fraction", Number, Optional, "", 1e-6, 1, {},
          "fraction of each attention head RoPE rotates (Megatron rotary_percent, Hugging Face "
          "partial_rotary_factor; Qwen3-Next 0.25); unset: all of it"),
    FIELD(Model, "mrope_section", CountList, Optional, "", 0, NoMax, {},
          "multimodal RoPE of a vision-language model (Megatron mrope_section, Hugging Face "
          "rope_scaling.mrope_section; Qwen3-VL [24, 20, 20]): how many of each head's rotary frequencies follow a "
          "token's time, row and column positions, interleaved; their sum is half the rotated dimensions; unset: "
          "one position per token"),
    FIELD(Model, "norm_epsilon", Number, Optional, "", 1e-12, 0.1, {},
          "epsilon of every RMSNorm (Megatron layernorm_epsilon, Hugging Face rms_norm_eps; the Qwen3 and "
          "DeepSeek-V3 checkpoints 1e-6); unset: Megatron's default 1e-5"),
    FIELD(Model, "qk_norm", Bool, Default, "false", 0, 0, {},
          "RMSNorm on queries and keys before attention (Megatron qk_layernorm; the Qwen3 family); with MLA, the "
          "norms of the query and key/value latents (DeepSeek-V3)"),
    FIELD(Model, "attention", Attention, Default, "gqa", 0, 0, {},
          "gqa, or mla(q_lora_rank, kv_lora_rank, qk_head_dim, qk_rope_head_dim, v_head_dim)"),
    COUNT(Model, "moe.experts", RequiredInSection, "", 1, "routed experts per MoE layer"),
    COUNT(Model, "moe.top_k", RequiredInSection, "", 1, "experts each token is routed to"),
    COUNT(Model, "moe.ffn_hidden", RequiredInSection, "", 1, "intermediate size of one routed expert"),
    COUNT(Model, "moe.shared_experts", Default, "0", 0, "shared experts per MoE layer"),
    COUNT(Model, "moe.shared_ffn_hidden", Optional, "", 1, "total intermediate size of the shared experts"),
    COUNT(Model, "moe.dense_layers", Default, "0", 0, "leading dense (non-MoE) layers"),
    FIELD(Model, "moe.router", Enum, Default, "softmax", 0, 0, RouterValues, "router score function"),
    FIELD(Model, "moe.expert_bias", Bool, Default, "false", 0, 0, {},
          "aux-loss-free load balancing with a per-expert bias"),
    FIELD(Model, "moe.shared_expert_gate", Bool, Default, "false", 0, 0, {},
          "a sigmoid gate per token on the shared experts' output (Megatron moe_shared_expert_gate; Qwen3-Next)"),
    FIELD(Model, "moe.pre_softmax", Bool, Default, "false", 0, 0, {},
          "softmax over all experts before the top-k selection (Megatron moe_router_pre_softmax); top_k = 1 with "
          "softmax needs it"),
    FIELD(Model, "moe.topk_scaling", Number, Optional, "", 1e-6, NoMax, {},
          "factor on the routing weights after the top-k (Megatron moe_router_topk_scaling_factor, DeepSeek's "
          "routed_scaling_factor); unset: none"),
    COUNT(Model, "moe.groups", Optional, "", 1, "expert groups for group-limited routing"),
    COUNT(Model, "moe.group_top_k", Optional, "", 1, "groups each token may route to"),
    COUNT(Model, "linear_attention.interval", RequiredInSection, "", 1,
          "every interval-th layer is full attention, the others linear (Gated DeltaNet)"),
    COUNT(Model, "linear_attention.key_heads", RequiredInSection, "", 1, "linear-attention key heads"),
    COUNT(Model, "linear_attention.value_heads", RequiredInSection, "", 1, "linear-attention value heads"),
    COUNT(Model, "linear_attention.head_dim", RequiredInSection, "", 1, "linear-attention head dimension"),
    COUNT(Model, "vision.layers", RequiredInSection, "", 1, "vision encoder depth"),
    COUNT(Model, "vision.hidden", RequiredInSection, "", 1, "vision encoder width"),
    COUNT(Model, "vision.heads", RequiredInSection, "", 1, "vision encoder heads"),
    COUNT(Model, "vision.ffn_hidden", RequiredInSection, "", 1, "vision encoder MLP size"),
    COUNT(Model, "vision.patch_size", RequiredInSection, "", 1, "image patch size in pixels"),
    COUNT(Model, "vision.spatial_merge", Default, "1", 1, "patches merged per side by the projector"),
    COUNT(Model, "vision.out_hidden", Optional, "", 1, "projector output width (the decoder's hidden size when unset)"),
    COUNT(Model, "vision.temporal_patch", Default, "2", 1,
          "frames per patch (Hugging Face temporal_patch_size; an image is that many identical frames)"),
    COUNT(Model, "vision.position_embeddings", Optional, "", 1,
          "rows of the learned position table, a square grid interpolated to each image (Hugging Face "
          "num_position_embeddings; Qwen3-VL 2304); unset: no learned positions"),
    FIELD(Model, "vision.deepstack_layers", CountList, Optional, "", 0, NoMax, {},
          "encoder blocks whose output, merged, the decoder adds to its visual tokens after its first layers "
          "(Hugging Face deepstack_visual_indexes; Qwen3-VL [8, 16, 24]); unset: none"),
    COUNT(Model, "vision.start_token", Optional, "", 0,
          "token id that opens an image in the text (Hugging Face vision_start_token_id; Qwen3-VL 151652); unset: "
          "vocab - 3"),
    COUNT(Model, "vision.image_token", Optional, "", 0,
          "token id of each of an image's placeholders, one per merged patch (Hugging Face image_token_id; Qwen3-VL "
          "151655); unset: vocab - 2"),
    COUNT(Model, "vision.end_token", Optional, "", 0,
          "token id that closes an image (Hugging Face vision_end_token_id; Qwen3-VL 151653); unset: vocab - 1"),
};

const FieldSpec GpuFields[] = {
    FIELD(Gpu, "arch", Enum, Required, "", 0, 0, ArchValues, "architecture"),
    COUNT(Gpu, "sm", Required, "", 0, "compute capability x 10 (90 Hopper, 100 Blackwell)"),
    FIELD(Gpu, "memory", Bytes, Required, "", 1, NoMax, {}, "HBM capacity per GPU"),
    FIELD(Gpu, "hbm", Bandwidth, Required, "", 1, NoMax, {}, "HBM bandwidth"),
    FIELD(Gpu, "bf16", FlopRate, Required, "", 1, NoMax, {}, "dense BF16 peak"),
    FIELD(Gpu, "fp8", FlopRate, Optional, "", 1, NoMax, {}, "dense FP8 peak"),
    FIELD(Gpu, "fp4", FlopRate, Optional, "", 1, NoMax, {}, "dense FP4 peak"),
    COUNT(Gpu, "multiprocessors", Optional, "", 1,
          "streaming multiprocessors per GPU (unset: 132, an H100); EP kernels overlapped with compute take their "
          "share"),
    COUNT(Gpu, "tensor_flops_per_clock", Optional, "", 1,
          "dense BF16 tensor-core FLOPs per clock per SM; with exp_per_clock, prices the softmax exponentials of "
          "attention (unset: attention at one efficiency of the BF16 peak)"),
    COUNT(Gpu, "exp_per_clock", Optional, "", 1, "softmax exponentials (MUFU.EX2 results) per clock per SM"),
    COUNT(Gpu, "gpus_per_node", Required, "", 1, "GPUs per node"),
    COUNT(Gpu, "nvlink_domain", Required, "", 1, "GPUs in one NVLink domain"),
    FIELD(Gpu, "nvlink", Bandwidth, Required, "", 1, NoMax, {}, "NVLink bandwidth per GPU per direction"),
    FIELD(Gpu, "network", Bandwidth, Required, "", 1, NoMax, {}, "scale-out bandwidth per GPU per direction"),
    FIELD(Gpu, "host_memory", Bandwidth, Optional, "", 1, NoMax, {},
          "host DRAM bandwidth of one node, shared by its GPUs (unset: 600GB/s, a two-socket DDR5 server)"),
    FIELD(Gpu, "host_link", Bandwidth, Optional, "", 1, NoMax, {},
          "CPU-GPU link per GPU per direction (unset: 64GB/s, PCIe Gen5 x16)"),
};

const FieldSpec ClusterFields[] = {
    FIELD(Cluster, "gpu", GpuRef, Required, "", 0, 0, {}, "GPU system"),
    COUNT(Cluster, "nodes", Optional, "", 1, "nodes"),
    COUNT(Cluster, "gpus", Derived, "nodes x gpu.gpus_per_node", 1, "GPUs"),
};
#undef COUNT
#undef FIELD
} // namespace

llvm::ArrayRef<FieldSpec> moec::schemaFor(DefKind Kind) {
  switch (Kind) {
  case DefKind::Recipe:
    return RecipeFields;
  case DefKind::Model:
    return ModelFields;
  case DefKind::Gpu:
    return GpuFields;
  case DefKind::Cluster:
    return ClusterFields;
  }
  llvm_unreachable("unknown definition kind");
}

const FieldSpec *moec::lookupField(DefKind Kind, llvm::StringRef Path) {
  for (const FieldSpec &F : schemaFor(Kind))
    if (F.Path == Path)
      return &F;
  return nullptr;
}

bool moec::isSection(DefKind Kind, llvm::StringRef Path) {
  for (const FieldSpec &F : schemaFor(Kind))
    if (F.Path.size() > Path.size() && F.Path.startswith(Path) && F.Path[Path.size()] == '.')
      return true;
  return false;
}

llvm::ArrayRef<llvm::StringLiteral> moec::recomputeModules() { return ModuleValues; }

std::string moec::describeType(const FieldSpec &F) {
  switch (F.Type) {
  case T::Count:
    return "a count";
  case T::Number:
    return "a number";
  case T::Bool:
    return "true or false";
  case T::String:
    return "a string";
  case T::Bytes:
    return "bytes (e.g. 80GB)";
  case T::Bandwidth:
    return "a bandwidth (e.g. 450GB/s)";
  case T::FlopRate:
    return "a compute rate (e.g. 989TFLOPS)";
  case T::Enum:
    return "one of " + llvm::join(F.EnumValues.begin(), F.EnumValues.end(), ", ");
  case T::ScopeList:
    return "none or a list of " + llvm::join(F.EnumValues.begin(), F.EnumValues.end(), ", ");
  case T::FlagOrList:
    return "true, false or a list of " + llvm::join(F.EnumValues.begin(), F.EnumValues.end(), ", ");
  case T::CountList:
    return "a list of counts";
  case T::ModelRef:
    return "a model name or hf(\"config.json\")";
  case T::GpuRef:
    return "a gpu name";
  case T::ClusterRef:
    return "a cluster name";
  case T::Recompute:
    return "none, full, full(...) or selective(...)";
  case T::DataSource:
    return "mock or real(\"path\")";
  case T::Attention:
    return "gqa or mla(...)";
  }
  llvm_unreachable("unknown field type");
}

void moec::printSchemaMarkdown(llvm::raw_ostream &OS) {
  for (DefKind K : {DefKind::Recipe, DefKind::Model, DefKind::Gpu, DefKind::Cluster}) {
    OS << "### " << ast::defKindName(K) << " fields\n\n";
    OS << "| field | type | default | meaning |\n| --- | --- | --- | --- |\n";
    for (const FieldSpec &F : schemaFor(K)) {
      std::string Default;
      switch (F.Req) {
      case P::Required:
        Default = "required";
        break;
      case P::RequiredInSection:
        Default = "required in its section";
        break;
      case P::Optional:
        Default = "unset";
        break;
      case P::Default:
        Default = "`" + F.DefaultText.str() + "`";
        break;
      case P::Derived:
        Default = "derived: " + F.DefaultText.str();
        break;
      }
      std::string Type = describeType(F);
      if ((F.Type == T::Count || F.Type == T::Number) && (F.Min > 0 || F.Max != NoMax))
        Type += F.Max == NoMax ? fmt::format(", at least {}", F.Min) : fmt::format(", {} to {}", F.Min, F.Max);
      // A literal '|' would end a Markdown table cell.
      auto Escape = [](llvm::StringRef S) {
        std::string Out;
        for (char C : S) {
          if (C == '|')
            Out += '\\';
          Out += C;
        }
        return Out;
      };
      OS << "| `" << F.Path << "` | " << Escape(Type) << " | " << Escape(Default) << " | " << Escape(F.Doc) << " |\n";
    }
    OS << "\n";
  }
}
