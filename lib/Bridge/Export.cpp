//===- Export.cpp - A recipe as Megatron-Bridge configuration -------------===//
//
// The field map is docs/megatron-bridge.md; every key written here is named
// there with the .moe field it comes from. Facts cited as "rule N" are from
// the Megatron-Bridge reference notes (§2) that the docs summarise.
//
//===----------------------------------------------------------------------===//
#include "moec/Bridge/Export.h"
#include "moec/Sema/TargetDefaults.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include <fmt/format.h>
#include <tuple>
#include <yaml-cpp/yaml.h>

using namespace moec;
using namespace moec::bridge;

llvm::StringRef bridge::mixedPrecisionPreset(Precision P) {
  switch (P) {
  case Precision::BF16:
    return "bf16_mixed";
  case Precision::FP8Delayed:
    return "bf16_with_fp8_delayed_scaling_mixed";
  case Precision::FP8Tensorwise:
    return "bf16_with_fp8_current_scaling_mixed";
  case Precision::FP8Blockwise:
    return "bf16_with_fp8_subchannel_scaling_mixed";
  case Precision::MXFP8:
    return "bf16_with_mxfp8_mixed";
  case Precision::NVFP4:
    return "bf16_with_nvfp4_mixed";
  }
  llvm_unreachable("unknown precision");
}

namespace {
llvm::StringRef cpCommName(CpComm C) {
  switch (C) {
  case CpComm::P2P:
    return "p2p";
  case CpComm::A2A:
    return "a2a";
  case CpComm::AllGather:
    return "all_gather";
  case CpComm::A2AP2P:
    return "a2a+p2p";
  }
  llvm_unreachable("unknown cp_comm");
}

class Exporter {
public:
  Exporter(const Recipe &R, const ExportOptions &Opts) : R(R), Opts(Opts) {}

  BridgeExport run() {
    E.RecipeName = R.PointName.empty() ? R.Name : R.PointName;
    E.ModelName = R.Model.Name;
    E.GpuName = R.Gpu.Name;
    E.Gpus = R.WorldSize;
    E.Nodes = R.Nodes;
    E.GpusPerNode = R.Gpu.GpusPerNode;
    if (Opts.Architecture)
      architecture();
    parallelism();
    batch();
    precision();
    if (R.Model.isMoE())
      moe();
    recompute();
    cudaGraphs();
    offload();
    optimizer();
    model();
    data();
    environment();
    return std::move(E);
  }

private:
  const Recipe &R;
  const ExportOptions &Opts;
  BridgeExport E;

  /// The Megatron-Core minor version of the target (0.16 -> 16): the keys
  /// follow the release the configuration is written for.
  unsigned coreMinor() const { return getTargetInfo(R.Tgt).CoreMinor; }

  /// Whether the target's Bridge recipe for this model has a
  /// CommOverlapConfig: an override of comm_overlap.* on a recipe whose
  /// comm_overlap is None is refused (omegaconf_utils.py), and its setup
  /// would overwrite the model.* spelling where it exists. In 0.3.1 only the
  /// DeepSeek-V3 recipes set one (recipes/deepseek/deepseek_v3.py; Qwen3's
  /// is commented out, recipes/qwen/qwen3_moe.py:107); main's per-GPU perf
  /// recipes all do (recipes/qwen/h100/qwen3_moe.py and the others).
  bool recipeHasCommOverlap() const {
    return coreMinor() >= 20 || llvm::StringRef(R.Model.Name).startswith("deepseek_v3");
  }
  /// Whether the target's Bridge recipe for this model sets a
  /// MixedPrecisionConfig rather than a preset name. Overrides cannot edit a
  /// name field by field: Hydra refuses `mixed_precision.X=...` on a string,
  /// and a whole mapping stays a dict that Bridge cannot finalize
  /// (test/megatron/exports.py finds both). Only the DeepSeek-V3 recipes
  /// build the object (0.3.1 recipes/deepseek/deepseek_v3.py:146; main
  /// recipes/deepseek/h100/deepseek_v3.py:206); the others inherit
  /// "bf16_mixed" (0.3.1 recipes/common.py:124, main recipes/common.py:130).
  bool recipeHasMixedPrecisionConfig() const { return llvm::StringRef(R.Model.Name).startswith("deepseek_v3"); }
  /// The key of a CommOverlapConfig field that Bridge copies onto the model.
  std::string commOverlapKey(llvm::StringRef Field) const {
    return (recipeHasCommOverlap() ? "comm_overlap." : "model.") + Field.str();
  }

  void set(llvm::StringRef Key, Value V, llvm::StringRef From) {
    E.Overrides.push_back({Key.str(), std::move(V), From.str()});
  }
  void drop(llvm::StringRef Field, llvm::StringRef V, llvm::StringRef Why) {
    E.Dropped.push_back({Field.str(), V.str(), Why.str()});
  }
  void env(llvm::StringRef Name, llvm::StringRef V, llvm::StringRef Why) {
    E.Env.push_back({Name.str(), V.str(), Why.str()});
  }

  void architecture() {
    const ModelSpec &M = R.Model;
    set("model.num_layers", Value::integer(M.Layers), "model.layers");
    set("model.hidden_size", Value::integer(M.Hidden), "model.hidden");
    if (M.FfnHidden)
      set("model.ffn_hidden_size", Value::integer(*M.FfnHidden), "model.ffn_hidden");
    set("model.num_attention_heads", Value::integer(M.Heads), "model.heads");
    set("model.num_query_groups", Value::integer(M.KvHeads), "model.kv_heads");
    set("model.kv_channels", Value::integer(M.HeadDim), "model.head_dim");
    set("model.vocab_size", Value::integer(M.Vocab), "model.vocab");
    set("model.mtp_num_layers", M.MtpLayers ? Value::integer(M.MtpLayers) : Value::null(), "model.mtp_layers");
    set("model.qk_layernorm", Value::boolean(M.QkNorm), "model.qk_norm");
    if (M.MaxSeqLen)
      set("model.max_position_embeddings", Value::integer(*M.MaxSeqLen), "model.max_seq_len");
    // Unset: the provider's rotary_base (GPTModelProvider's 10000).
    if (M.RopeTheta)
      set("model.rotary_base", Value::real(*M.RopeTheta), "model.rope_theta");
    if (M.RopeFraction)
      set("model.rotary_percent", Value::real(*M.RopeFraction), "model.rope_fraction");
    if (!M.MropeSection.empty()) {
      std::vector<Value> Section;
      for (int64_t N : M.MropeSection)
        Section.push_back(Value::integer(N));
      set("model.mrope_section", Value::list(std::move(Section)), "model.mrope_section");
    }
    // Unset: the provider's layernorm_epsilon (GPTModelProvider's 1e-5).
    if (M.NormEpsilon)
      set("model.layernorm_epsilon", Value::real(*M.NormEpsilon), "model.norm_epsilon");
    if (M.MLA) {
      set("model.q_lora_rank", Value::integer(M.MLA->QLoraRank), "model.attention = mla(q_lora_rank)");
      set("model.kv_lora_rank", Value::integer(M.MLA->KvLoraRank), "model.attention = mla(kv_lora_rank)");
      set("model.qk_head_dim", Value::integer(M.MLA->QkHeadDim), "model.attention = mla(qk_head_dim)");
      set("model.qk_pos_emb_head_dim", Value::integer(M.MLA->QkRopeHeadDim), "model.attention = mla(qk_rope_head_dim)");
      set("model.v_head_dim", Value::integer(M.MLA->VHeadDim), "model.attention = mla(v_head_dim)");
    }
    if (M.MoE) {
      const MoESpec &X = *M.MoE;
      set("model.num_moe_experts", Value::integer(X.Experts), "model.moe.experts");
      set("model.moe_router_topk", Value::integer(X.TopK), "model.moe.top_k");
      set("model.moe_ffn_hidden_size", Value::integer(X.FfnHidden), "model.moe.ffn_hidden");
      if (X.SharedExperts > 0)
        set("model.moe_shared_expert_intermediate_size",
            Value::integer(X.SharedFfnHidden ? *X.SharedFfnHidden : X.SharedExperts * X.FfnHidden),
            "model.moe.shared_ffn_hidden");
      // MCore's per-layer pattern: 0 for a dense layer, 1 for a MoE layer.
      std::vector<Value> Freq;
      for (int64_t L = 0; L < M.Layers; ++L)
        Freq.push_back(Value::integer(L < X.DenseLayers ? 0 : 1));
      set("model.moe_layer_freq", X.DenseLayers ? Value::list(std::move(Freq)) : Value::integer(1),
          "model.moe.dense_layers");
      set("model.moe_router_score_function", Value::string(enumName(X.RouterKind)), "model.moe.router");
      set("model.moe_router_enable_expert_bias", Value::boolean(X.ExpertBias), "model.moe.expert_bias");
      set("model.moe_router_pre_softmax", Value::boolean(X.PreSoftmax), "model.moe.pre_softmax");
      if (X.Groups)
        set("model.moe_router_num_groups", Value::integer(*X.Groups), "model.moe.groups");
      if (X.GroupTopK)
        set("model.moe_router_group_topk", Value::integer(*X.GroupTopK), "model.moe.group_top_k");
      if (X.TopKScaling)
        set("model.moe_router_topk_scaling_factor", Value::real(*X.TopKScaling), "model.moe.topk_scaling");
      if (X.SharedExpertGate)
        set("model.moe_shared_expert_gate", Value::boolean(true), "model.moe.shared_expert_gate");
    }
    if (M.LinearAttention)
      drop("model.linear_attention", "{...}",
           "Megatron-Bridge's Qwen3-Next provider takes the Gated-DeltaNet layout from the Hugging Face config; "
           "it is not written as overrides");
    if (M.Vision)
      drop("model.vision", "{...}",
           "Megatron-Bridge's VL providers take the vision encoder from the Hugging Face config; it is not "
           "written as overrides");
  }

  void parallelism() {
    const ParallelConfig &P = R.Parallel;
    set("model.tensor_model_parallel_size", Value::integer(P.TP), "parallel.tp");
    set("model.pipeline_model_parallel_size", Value::integer(P.PP), "parallel.pp");
    // Megatron takes None (not 1) for no interleaving (rule: VPP None or >= 2).
    set("model.virtual_pipeline_model_parallel_size", P.VPP > 1 ? Value::integer(P.VPP) : Value::null(),
        "parallel.vpp");
    if (!P.Layout) {
      // The Bridge recipe's own layout would otherwise remain (DeepSeek-V3's
      // implies 16 stages, whatever pp the recipe says).
      set("model.pipeline_model_parallel_layout", Value::null(), "parallel.layout");
    } else {
      set("model.pipeline_model_parallel_layout", Value::string(*P.Layout), "parallel.layout");
      // A layout places the embedding and the loss itself; Megatron refuses
      // it together with the recipes' uneven-split settings.
      set("model.account_for_embedding_in_pipeline_split", Value::boolean(false), "implied by parallel.layout");
      set("model.account_for_loss_in_pipeline_split", Value::boolean(false), "implied by parallel.layout");
      set("model.num_layers_in_first_pipeline_stage", Value::null(), "implied by parallel.layout");
      set("model.num_layers_in_last_pipeline_stage", Value::null(), "implied by parallel.layout");
    }
    set("model.context_parallel_size", Value::integer(P.CP), "parallel.cp");
    if (P.CP > 1 || P.CpCommKind != CpComm::P2P)
      set("model.cp_comm_type", Value::string(cpCommName(P.CpCommKind)), "parallel.cp_comm");
    if (!P.CpHierarchy.empty()) {
      std::vector<Value> Sizes;
      for (int64_t S : P.CpHierarchy)
        Sizes.push_back(Value::integer(S));
      set("model.hierarchical_context_parallel_sizes", Value::list(std::move(Sizes)), "parallel.cp_hierarchy");
    }
    set("model.expert_model_parallel_size", Value::integer(P.EP), "parallel.ep");
    // Always explicit: Megatron's default (None) means ETP = TP, moec's is 1.
    set("model.expert_tensor_parallel_size", Value::integer(P.ETP), "parallel.etp");
    // Megatron-Core 0.16 refuses sequence parallelism without TP (later
    // releases turn it off): never written true at tp = 1.
    set("model.sequence_parallel", Value::boolean(P.SequenceParallel && P.TP > 1), "parallel.sp");
    if (P.TpCommOverlap)
      set(commOverlapKey("tp_comm_overlap"), Value::boolean(true), "parallel.tp_comm_overlap");
    if (P.FSDP) {
      if (P.FsdpKind == FsdpImpl::Megatron) {
        set("ddp.use_megatron_fsdp", Value::boolean(true), "parallel.fsdp");
        // moec's FSDP shards parameters, gradients and optimizer state.
        set("ddp.data_parallel_sharding_strategy", Value::string("optim_grads_params"), "parallel.fsdp");
        // Megatron-FSDP checkpoints only in this format (rule 47).
        set("checkpoint.ckpt_format", Value::string("fsdp_dtensor"), "implied by parallel.fsdp_impl = megatron");
      } else {
        set("dist.use_torch_fsdp2", Value::boolean(true), "parallel.fsdp_impl = torch");
      }
    }
    // Bridge passes DistributedInitConfig.use_tp_pp_dp_mapping to
    // initialize_model_parallel's order (training/initialize.py).
    if (P.Order == RankOrder::TpCpEpPpDp)
      set("dist.use_tp_pp_dp_mapping", Value::boolean(true), "parallel.order");
  }

  void batch() {
    set("train.micro_batch_size", Value::integer(R.MicroBatch), "batch.micro");
    set("train.global_batch_size", Value::integer(R.GlobalBatch), "batch.global");
    set("model.seq_length", Value::integer(R.SeqLen), "seq_len");
    // Bridge keeps the two equal and validates that they are. 0.3.1's
    // GPTDatasetConfig field is Megatron-Core's sequence_length (seq_length
    // is a read-only alias there).
    // The VL recipes' HFDatasetConversationProvider names it seq_length in
    // 0.3.1 too (data/vlm_datasets/hf_provider.py:49).
    set(coreMinor() < 20 && !R.Model.isVLM() ? "dataset.sequence_length" : "dataset.seq_length",
        Value::integer(R.SeqLen), "seq_len");
  }

  void precision() {
    bool Fp4Deviates = R.Fp4ParamGather != presetFp4ParamGather(R.Tgt, R.Prec);
    if (Fp4Deviates && coreMinor() < 20) {
      // 0.3.1's MixedPrecisionConfig has no fp4_param_gather: set the
      // Megatron-Core field (transformer_config.py:520) on the model.
      set("model.fp4_param", Value::boolean(R.Fp4ParamGather), "fp4_param_gather");
      Fp4Deviates = false;
    }
    bool Deviates =
        R.Fp8ParamGather != presetFp8ParamGather(R.Tgt, R.Prec) || Fp4Deviates || R.Bf16FirstLayers || R.Bf16LastLayers;
    if (Deviates && !recipeHasMixedPrecisionConfig()) {
      set("mixed_precision", Value::string(mixedPrecisionPreset(R.Prec)), "precision");
      auto Why = [](llvm::StringRef Fields) {
        return fmt::format("the model's Bridge recipe names a mixed-precision preset, which overrides cannot edit "
                           "field by field; set {} in the recipe's Python",
                           Fields.str());
      };
      if (R.Fp8ParamGather != presetFp8ParamGather(R.Tgt, R.Prec))
        drop("fp8_param_gather", R.Fp8ParamGather ? "true" : "false", Why("cfg.mixed_precision.fp8_param_gather"));
      if (Fp4Deviates)
        drop("fp4_param_gather", R.Fp4ParamGather ? "true" : "false", Why("cfg.mixed_precision.fp4_param_gather"));
      if (R.Bf16FirstLayers || R.Bf16LastLayers)
        drop("bf16_layers", fmt::format("{{ first = {}; last = {} }}", R.Bf16FirstLayers, R.Bf16LastLayers),
             Why("cfg.mixed_precision.first_last_layers_bf16 and num_layers_at_start/end_in_bf16"));
      return;
    }
    if (!Deviates) {
      set("mixed_precision", Value::string(mixedPrecisionPreset(R.Prec)), "precision");
      return;
    }
    // The preset cannot say it: write the MixedPrecisionConfig field by field.
    set("mixed_precision.bf16", Value::boolean(true), "precision");
    Value Fp8 = Value::null(), Fp8Recipe = Value::null(), Fp4 = Value::null(), Fp4Recipe = Value::null();
    switch (R.Prec) {
    case Precision::BF16:
      break;
    case Precision::FP8Delayed:
      Fp8 = Value::string("hybrid"), Fp8Recipe = Value::string("delayed");
      break;
    case Precision::FP8Tensorwise:
      Fp8 = Value::string("hybrid"), Fp8Recipe = Value::string("tensorwise");
      break;
    case Precision::FP8Blockwise:
      Fp8 = Value::string("hybrid"), Fp8Recipe = Value::string("blockwise");
      break;
    case Precision::MXFP8:
      Fp8 = Value::string("e4m3"), Fp8Recipe = Value::string("mxfp8");
      break;
    case Precision::NVFP4:
      Fp4 = Value::string("e2m1"), Fp4Recipe = Value::string("nvfp4");
      break;
    }
    set("mixed_precision.fp8", Fp8, "precision");
    set("mixed_precision.fp8_recipe", Fp8Recipe, "precision");
    set("mixed_precision.fp4", Fp4, "precision");
    set("mixed_precision.fp4_recipe", Fp4Recipe, "precision");
    set("mixed_precision.fp8_param_gather", Value::boolean(R.Fp8ParamGather), "fp8_param_gather");
    if (coreMinor() >= 20)
      set("mixed_precision.fp4_param_gather", Value::boolean(R.Fp4ParamGather), "fp4_param_gather");
    bool Bf16Layers = R.Bf16FirstLayers || R.Bf16LastLayers;
    set("mixed_precision.first_last_layers_bf16", Value::boolean(Bf16Layers), "bf16_layers");
    if (Bf16Layers) {
      set("mixed_precision.num_layers_at_start_in_bf16", Value::integer(R.Bf16FirstLayers), "bf16_layers.first");
      set("mixed_precision.num_layers_at_end_in_bf16", Value::integer(R.Bf16LastLayers), "bf16_layers.last");
    }
  }

  void moe() {
    const MoERuntimeConfig &M = R.MoE;
    switch (R.Dispatch) {
    case Dispatcher::AllToAll:
      set("model.moe_token_dispatcher_type", Value::string("alltoall"), "dispatcher");
      break;
    case Dispatcher::AllGather:
      set("model.moe_token_dispatcher_type", Value::string("allgather"), "dispatcher");
      break;
    case Dispatcher::DeepEP:
    case Dispatcher::HybridEP:
      // A backend alone is a no-op: it takes effect only with flex (rule 17).
      set("model.moe_token_dispatcher_type", Value::string("flex"), "dispatcher");
      set("model.moe_flex_dispatcher_backend", Value::string(enumName(R.Dispatch)), "dispatcher");
      // Megatron-Core 0.16.1 keeps one SM budget per backend
      // (transformer_config.py:722,725); later releases read these two as
      // deprecated spellings of moe_flex_dispatcher_num_sms.
      if (M.DispatcherSms)
        set(R.Dispatch == Dispatcher::DeepEP ? "model.moe_deepep_num_sms" : "model.moe_hybridep_num_sms",
            Value::integer(*M.DispatcherSms), "moe.dispatcher_sms");
      break;
    }
    set("model.moe_shared_expert_overlap", Value::boolean(M.SharedExpertOverlap), "moe.shared_expert_overlap");
    set("model.moe_grouped_gemm", Value::boolean(M.GroupedGemm), "moe.grouped_gemm");
    if (M.ForceBalance) // Megatron's default is false: only a benchmark sets it
      set("model.moe_router_force_load_balancing", Value::boolean(true), "moe.force_balance");
    // MCore's moe_router_dtype is fp32, fp64 or None (the model's dtype).
    set("model.moe_router_dtype",
        M.RouterPrecision == RouterDtype::BF16
            ? Value::null()
            : Value::string(M.RouterPrecision == RouterDtype::FP64 ? "fp64" : "fp32"),
        "moe.router_dtype");
    if (M.CapacityFactor) {
      set("model.moe_expert_capacity_factor", Value::real(*M.CapacityFactor), "moe.capacity_factor");
      set("model.moe_pad_expert_input_to_capacity", Value::boolean(M.PadToCapacity), "moe.pad_to_capacity");
    }
    set(commOverlapKey("overlap_moe_expert_parallel_comm"), Value::boolean(M.OverlapEpComm), "moe.overlap_ep_comm");
    set(commOverlapKey("delay_wgrad_compute"), Value::boolean(M.DelayWgrad), "moe.delay_wgrad");
  }

  void recompute() {
    const RecomputeConfig &C = R.Recompute;
    switch (C.Kind) {
    case RecomputeKind::None:
      set("model.recompute_granularity", Value::null(), "recompute");
      // A Bridge recipe's full-recompute settings would otherwise remain.
      set("model.recompute_method", Value::null(), "recompute");
      set("model.recompute_num_layers", Value::null(), "recompute");
      return;
    case RecomputeKind::Full:
      set("model.recompute_granularity", Value::string("full"), "recompute");
      set("model.recompute_method", Value::string(C.Method == RecomputeMethod::Block ? "block" : "uniform"),
          "recompute");
      // moec's `full` recomputes every layer: uniform chunks of one layer.
      set("model.recompute_num_layers", Value::integer(C.Layers ? *C.Layers : 1), "recompute");
      return;
    case RecomputeKind::Selective: {
      set("model.recompute_granularity", Value::string("selective"), "recompute");
      set("model.recompute_method", Value::null(), "recompute");
      set("model.recompute_num_layers", Value::null(), "recompute");
      std::vector<std::string> Names;
      for (RecomputeModule M : C.Modules)
        Names.push_back(recomputeModuleName(M).str());
      set("model.recompute_modules", Value::strings(Names), "recompute");
      return;
    }
    }
  }

  void cudaGraphs() {
    if (R.CudaGraph.empty()) {
      set("model.cuda_graph_impl", Value::string("none"), "cuda_graph");
      return;
    }
    bool Full = llvm::is_contained(R.CudaGraph, GraphScope::FullIteration);
    std::vector<std::string> Names;
    for (GraphScope S : R.CudaGraph)
      Names.push_back(graphScopeName(S).str());
    if (coreMinor() < 20) {
      // Megatron-Core 0.16: full_iteration is a scope of the local
      // implementation, and the key is cuda_graph_scope.
      set("model.cuda_graph_impl", Value::string(enumName(Full ? GraphImpl::Local : R.CudaGraphImpl)),
          Full ? "cuda_graph" : "cuda_graph_impl");
      set("model.cuda_graph_scope", Value::strings(Full ? std::vector<std::string>{"full_iteration"} : Names),
          "cuda_graph");
    } else if (Full) {
      set("model.cuda_graph_impl", Value::string("full_iteration"), "cuda_graph");
      // full_iteration requires an empty module list (rule 33).
      set("model.cuda_graph_modules", Value::list({}), "cuda_graph");
    } else {
      set("model.cuda_graph_impl", Value::string(enumName(R.CudaGraphImpl)), "cuda_graph_impl");
      set("model.cuda_graph_modules", Value::strings(Names), "cuda_graph");
    }
    // Every graph needs TE's RNG tracker (rule 35).
    set("model.use_te_rng_tracker", Value::boolean(true), "implied by cuda_graph");
    set("rng.te_rng_tracker", Value::boolean(true), "implied by cuda_graph");
    if (Full) {
      // A full-iteration graph cannot hold the NaN checks (rule 35).
      set("rerun_state_machine.check_for_nan_in_loss", Value::boolean(false), "implied by cuda_graph = full_iteration");
      set("ddp.check_for_nan_in_grad", Value::boolean(false), "implied by cuda_graph = full_iteration");
    }
  }

  void offload() {
    bool Optim = R.OffloadOptimizer > 0;
    set("optimizer.optimizer_cpu_offload", Value::boolean(Optim), "offload.optimizer");
    if (Optim) {
      set("optimizer.optimizer_offload_fraction", Value::real(R.OffloadOptimizer), "offload.optimizer");
      // OptimizerConfig.overlap_cpu_optimizer_d2h_h2d (megatron-core 0.16.1 and main).
      set("optimizer.overlap_cpu_optimizer_d2h_h2d", Value::boolean(R.OverlapOffloadCopies), "offload.overlap_copies");
    }
    set("model.cpu_offloading", Value::boolean(R.OffloadActivations), "offload.activations");
    if (R.OffloadActivations && R.OffloadActivationLayers)
      set("model.cpu_offloading_num_layers", Value::integer(*R.OffloadActivationLayers), "offload.activation_layers");
    bool FineGrained = !R.OffloadModules.empty();
    set("model.fine_grained_activation_offloading", Value::boolean(FineGrained), "offload.activations");
    if (FineGrained) {
      std::vector<std::string> Names;
      for (OffloadModule M : R.OffloadModules)
        Names.push_back(enumName(M).str());
      set("model.offload_modules", Value::strings(Names), "offload.activations");
      // Bridge (training/config.py _validate_fine_grained_activation_offloading)
      // and Megatron-LM (arguments.py) refuse to start without it on TE >= 2.10.
      env("NVTE_CPU_OFFLOAD_V1", "1",
          "fine-grained activation offload on Transformer Engine 2.10 or later: without it TE offloads weights too");
    }
  }

  void optimizer() {
    const OptimizerConfig &O = R.Optimizer;
    // Muon's distributed optimizer is the layer-wise one, which Bridge builds
    // from the name dist_muon (0.3.1 training/optim.py:76, main :109); its
    // parameters stay out of Megatron's distributed optimizer, which
    // megatron-core 0.16 refuses with Muon (optimizer/muon.py:192).
    bool LayerWiseMuon = O.Kind == OptimizerKind::Muon && O.Distributed;
    set("optimizer.optimizer", Value::string(LayerWiseMuon ? "dist_muon" : enumName(O.Kind).str()), "optimizer.type");
    // Both switches: Bridge turns both on when either is on
    // (training/config.py:1878-1900, _validate_and_sync_distributed_optimizer_settings),
    // so `false` must be said to both, and Megatron-Core's OptimizerConfig
    // checks its own before that sync runs (optimizer_config.py:379, the
    // precision-aware optimizer needs it).
    bool MegatronDistributed = O.Distributed && !LayerWiseMuon;
    set("ddp.use_distributed_optimizer", Value::boolean(MegatronDistributed), "optimizer.distributed");
    set("optimizer.use_distributed_optimizer", Value::boolean(MegatronDistributed), "optimizer.distributed");
    set("optimizer.use_precision_aware_optimizer", Value::boolean(O.PrecisionAware), "optimizer.precision_aware");
    // The moment and master dtypes the memory model prices (bf16 moments
    // under the precision-aware optimizer, fp32 otherwise). Megatron-Core
    // refuses non-fp32 dtypes without the precision-aware optimizer
    // (optimizer_config.py), and Bridge's DeepSeek-V3 recipe sets bf16 ones;
    // Bridge's override mechanism turns the names back into torch dtypes.
    const char *Moments = O.PrecisionAware ? "bfloat16" : "float32";
    set("optimizer.main_params_dtype", Value::string("float32"), "optimizer.precision_aware");
    set("optimizer.exp_avg_dtype", Value::string(Moments), "optimizer.precision_aware");
    set("optimizer.exp_avg_sq_dtype", Value::string(Moments), "optimizer.precision_aware");
    if (!O.PrecisionAware)
      set("optimizer.main_grads_dtype", Value::string("float32"), "optimizer.precision_aware");
    // The learning-rate schedule only as far as the recipe sets it: the
    // Bridge recipe's own schedule stays otherwise (moec's defaults are
    // moerun's, not a training run's).
    const LrScheduleConfig &S = O.Schedule;
    auto Written = [&](llvm::StringRef Field) { return R.Origins.count(Field) && !R.origin(Field).IsDefault; };
    if (S.Lr)
      set("optimizer.lr", Value::real(*S.Lr), "optimizer.lr");
    if (Written("optimizer.min_lr"))
      set("optimizer.min_lr", Value::real(S.MinLr), "optimizer.min_lr");
    if (Written("optimizer.warmup_steps")) {
      // One way of giving the warm-up (config.py SchedulerConfig refuses a
      // fraction beside a count).
      set("scheduler.lr_warmup_iters", Value::integer(S.WarmupSteps), "optimizer.warmup_steps");
      set("scheduler.lr_warmup_fraction", Value::null(), "optimizer.warmup_steps");
    }
    if (Written("optimizer.decay"))
      set("scheduler.lr_decay_style", Value::string(enumName(S.Decay)), "optimizer.decay");
    if (S.DecaySteps)
      set("scheduler.lr_decay_iters", Value::integer(*S.DecaySteps), "optimizer.decay_steps");
    const AdamWConfig &A = O.AdamW;
    for (auto [Field, Key, V] : {std::tuple{"optimizer.weight_decay", "optimizer.weight_decay", A.WeightDecay},
                                 {"optimizer.adam_beta1", "optimizer.adam_beta1", A.Beta1},
                                 {"optimizer.adam_beta2", "optimizer.adam_beta2", A.Beta2},
                                 {"optimizer.adam_eps", "optimizer.adam_eps", A.Eps},
                                 {"optimizer.clip_grad", "optimizer.clip_grad", A.ClipGrad}})
      if (Written(Field))
        set(Key, Value::real(V), Field);
    set("ddp.overlap_grad_reduce", Value::boolean(O.OverlapGradReduce), "optimizer.overlap_grad_reduce");
    set("ddp.overlap_param_gather", Value::boolean(O.OverlapParamGather), "optimizer.overlap_param_gather");
  }

  void model() {
    if (!R.Model.isVLM())
      return;
    set("model.freeze_language_model", Value::boolean(R.LanguageFrozen), "language.frozen");
    set("model.freeze_vision_model", Value::boolean(R.VisionFrozen), "vision.frozen");
    set("model.freeze_vision_projection", Value::boolean(R.VisionFrozen), "vision.frozen");
    if (R.ImagesPerSample != 1 || R.ImageSize != 448)
      drop("data.images_per_sample, data.image_size", fmt::format("{}, {}", R.ImagesPerSample, R.ImageSize),
           "images per sample and their size come from the Bridge dataset and its image processor");
  }

  void data() {
    // Written only where the recipe sets them, so a Bridge recipe keeps its
    // own split and evaluation otherwise.
    if (!R.DataSplit.empty()) {
      std::vector<std::string> Weights;
      for (int64_t W : R.DataSplit)
        Weights.push_back(std::to_string(W));
      set("dataset.split", Value::string(llvm::join(Weights, ",")), "data.split");
    }
    if (R.EvalInterval) {
      set("train.eval_interval", Value::integer(*R.EvalInterval), "data.eval_interval");
      set("train.eval_iters", Value::integer(R.EvalIters), "data.eval_iters");
    }
    if (R.Data == DataSourceKind::Real)
      drop("data.source", fmt::format("real(\"{}\")", R.DataPath),
           "the data path goes into the Bridge recipe's dataset config, whose form depends on its dataset class; "
           "set it there");
    if (R.VariableLength)
      drop("data.variable_length", "true",
           "variable-length (packed) batches are a property of the Bridge dataset (packed sequences); set it there");
  }

  void environment() {
    if (R.Gpu.Arch == GpuArch::Cpu)
      return;
    const ParallelConfig &P = R.Parallel;
    if ((P.TP > 1 || P.CP > 1) && R.Gpu.SM < 100 && !P.FSDP && !R.MoE.OverlapEpComm)
      env("CUDA_DEVICE_MAX_CONNECTIONS", "1",
          "TP or CP > 1 before Blackwell without FSDP or EP overlap: Megatron requires one hardware queue so that "
          "communication kernels are issued before the GEMMs they overlap");
    else
      env("CUDA_DEVICE_MAX_CONNECTIONS", "32",
          P.FSDP ? "FSDP must not run with 1 (Megatron rejects it); Megatron-Bridge's perf recipes use 32"
                 : "no TP/CP ordering constraint applies; Megatron-Bridge's perf recipes use 32");
    if (R.Dispatch == Dispatcher::HybridEP) {
      bool NVL72 = R.Gpu.NVLinkDomain > R.Gpu.GpusPerNode;
      std::string Ranks = std::to_string(NVL72 ? P.EP : R.Gpu.NVLinkDomain);
      std::string Why = NVL72 ? "HybridEP on a multi-node NVLink domain: ranks per domain = EP, MNNVL on; a "
                                "mismatch hurts speed and sometimes correctness"
                              : "HybridEP on an NVLink domain of one node; a mismatch hurts speed and sometimes "
                                "correctness";
      env("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN", Ranks, Why);
      env("NVLINK_DOMAIN_SIZE", std::to_string(R.Gpu.NVLinkDomain), Why);
      env("USE_MNNVL", NVL72 ? "1" : "0", Why);
    }
  }
};

/// Nested YAML sections from dotted keys, in first-seen order.
struct Section {
  std::string Name;
  const Value *Leaf = nullptr;
  std::vector<Section> Children;
  Section &child(llvm::StringRef N) {
    for (Section &S : Children)
      if (S.Name == N)
        return S;
    Children.push_back({N.str(), nullptr, {}});
    return Children.back();
  }
};

void emitValue(YAML::Emitter &Out, const Value &V) {
  switch (V.K) {
  case Value::Kind::Null:
    Out << YAML::Null;
    break;
  case Value::Kind::Bool:
    Out << YAML::TrueFalseBool << V.B;
    break;
  case Value::Kind::Int:
    Out << static_cast<long long>(V.I);
    break;
  case Value::Kind::Float:
    Out << V.F;
    break;
  case Value::Kind::String:
    // Quoted when YAML would read it otherwise: a layout starting with `(`
    // or `*`, or a name such as `null`.
    if (renderHydra(V).front() == '"' || V.S.front() == '*' || V.S.front() == '(')
      Out << YAML::DoubleQuoted << V.S;
    else
      Out << V.S;
    break;
  case Value::Kind::List:
    Out << YAML::Flow << YAML::BeginSeq;
    for (const Value &I : V.Items)
      emitValue(Out, I);
    Out << YAML::EndSeq;
    break;
  }
}

void emitSection(YAML::Emitter &Out, const Section &S) {
  Out << YAML::BeginMap;
  for (const Section &C : S.Children) {
    Out << YAML::Key << C.Name << YAML::Value;
    if (C.Leaf)
      emitValue(Out, *C.Leaf);
    else
      emitSection(Out, C);
  }
  Out << YAML::EndMap;
}
} // namespace

BridgeExport bridge::exportOverrides(const Recipe &R, const ExportOptions &Opts) { return Exporter(R, Opts).run(); }

std::string bridge::renderOverrideLine(const BridgeExport &E) {
  std::vector<std::string> Words;
  for (const Override &O : E.Overrides)
    Words.push_back(shellQuote(O.Key + "=" + renderHydra(O.V)));
  return llvm::join(Words, " ");
}

std::string bridge::headerLine(const BridgeExport &E) {
  // The point name may hold spaces ("r[micro=2, tp=4]"): keep it last.
  return fmt::format("# moec: model={} gpu={} gpus={} recipe={}", E.ModelName, E.GpuName, E.Gpus, E.RecipeName);
}

std::string bridge::renderYAML(const BridgeExport &E) {
  Section Root;
  for (const Override &O : E.Overrides) {
    llvm::SmallVector<llvm::StringRef, 4> Parts;
    llvm::StringRef(O.Key).split(Parts, '.');
    Section *S = &Root;
    for (llvm::StringRef P : Parts)
      S = &S->child(P);
    S->Leaf = &O.V;
  }
  std::string Out = "# Megatron-Bridge ConfigContainer overrides written by moec export.\n";
  Out += headerLine(E) + "\n";
  for (const EnvVar &V : E.Env)
    Out += fmt::format("# env: {}={}  ({})\n", V.Name, V.Value, V.Reason);
  for (const NotExported &D : E.Dropped)
    Out += fmt::format("# not exported: {} = {}  ({})\n", D.Field, D.Value, D.Reason);
  YAML::Emitter Y;
  Y.SetIndent(2);
  emitSection(Y, Root);
  Out += Y.c_str();
  Out += "\n";
  return Out;
}
