//===- Calibration.h - Every constant of the performance model ---*- C++ -*-===//
//
// The memory and step-time models are derived from first principles plus a
// few constants (achievable fractions of peak, communication efficiencies,
// allocator reserve). They live here and nowhere else; GPU figures come from
// the GPU catalog. docs/accuracy.md shows how the constants were chosen.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_MODEL_CALIBRATION_H
#define MOEC_MODEL_CALIBRATION_H

#include <cstdint>

namespace moec {

struct Calibration {
  //===--- Step-time model (lib/Model/Performance.cpp) ------------------===//
  // Sources: A = bench/reference/perf-anchors.md (section numbers),
  // H = hardware.csv. docs/accuracy.md lists each constant with its source;
  // none is fitted to a row of perf_calibration.csv.
  //
  // Fractions of dense peak that large GEMMs reach, by precision family.
  // BF16: cuBLAS/TE dense GEMMs reach ~700 of 989 TFLOP/s on H100. FP8: A 4.5,
  // DeepGEMM dense 1520 of 1979 (0.77) at best, TE's FP8 GEMMs with their
  // scaling lower. FP4: block-scaled NVFP4 GEMMs, lower still.
  double Bf16GemmEfficiency = 0.70;
  double Fp8GemmEfficiency = 0.55;
  double Fp4GemmEfficiency = 0.45;
  // Flash attention (fwd + bwd) in units of the model-FLOPs count (3x fwd,
  // causal half): FA fwd ~0.65 of BF16 peak, bwd (2.5x the fwd matmuls)
  // ~0.5, so 3 / (1/0.65 + 2.5/0.5) = 0.46. Core attention runs in BF16 under
  // every precision recipe. Gated-DeltaNet chunked kernels are priced alike.
  double AttentionEfficiency = 0.46;
  // Softmax exponentials. The figures above are H100 kernels at head dim 128,
  // whose time includes the exponentials on the special function units
  // (MUFU.EX2: 16 per clock per SM on H100 and B200, against 4096 and 8192
  // dense BF16 tensor FLOPs per clock per SM; Blackwell Ultra doubles the
  // MUFU rate). Blackwell doubled the tensor cores but not the SFUs, so the
  // forward becomes exponential-bound there (FlashAttention-4,
  // together.ai/blog/flashattention-4: cuDNN 9.13 ~0.55 of B200's peak in the
  // forward); NVIDIA measures ~35% more attention FPROP on GB300 than GB200
  // (developer.nvidia.com/blog/making-softmax-more-efficient-with-nvidia-
  // blackwell-ultra). A GPU that gives its per-SM rates (tensor_flops_per_clock,
  // exp_per_clock) prices the exponentials at its own rate and the tensor
  // part at what the anchor leaves once its exponentials are taken out.
  int64_t AttentionAnchorHeadDim = 128;
  double AttentionAnchorExpPerTensorFlop = 16.0 / 4096.0;
  // Grouped expert GEMMs relative to a dense GEMM of the same precision:
  // A 4.5, DeepGEMM grouped 1346 vs dense 1520 TFLOP/s (0.89).
  double GroupedGemmEfficiency = 0.89;
  // On Hopper, Transformer Engine runs a grouped expert GEMM as one cuBLAS
  // GEMM per local expert spread over four streams
  // (transformer_engine/pytorch/csrc/extensions/gemm.cpp, "only multi-stream
  // cublas backend"; the CUTLASS grouped kernel is opt-in and BF16-only
  // there, common/gemm/cublaslt_gemm.cu), not as one grouped kernel. That
  // scheme, measured on an H200 (docs/benchmarks.md, "CUDA kernels": per-
  // expert cublasGemmEx over four streams at Qwen3-30B-A3B's EP16 shapes, 8
  // experts of 2048 -> 1536 and 768 -> 2048, BF16), took 1.12-1.38x the time
  // of one dense GEMM of the same size over four runs: 0.80 of it. FP8 adds a
  // quantization per expert (split_quantize), not priced here.
  double HopperGroupedGemmEfficiency = 0.80;
  // Hopper's FP8 tensor cores accumulate with about 14 bits (DeepSeek-V3
  // technical report, 3.3.2), so Transformer Engine asks cuBLASLt for split
  // accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM off: the partial sums are
  // promoted to FP32 on the CUDA cores) in the GEMMs where precision matters:
  // dgrad and wgrad under the delayed and current (tensorwise) recipes
  // (transformer_engine/pytorch/module/base.py _2X_ACC_DGRAD/_2X_ACC_WGRAD;
  // common/recipe/__init__.py Float8CurrentScaling fp8_gemm_dgrad/wgrad),
  // all three under the blockwise recipe (Float8BlockScaling). Blackwell's
  // tensor cores accumulate FP8 in full FP32, and MXFP8/NVFP4 have no such
  // setting. The cost: fast accumulation runs FP8 GEMMs 1.1-1.2x faster on
  // H100 (pytorch/ao issue 2377); DeepGEMM's promotion interleaving alone
  // recovers 10%+ (DeepGEMM README). The midpoint:
  double HopperFp8SplitAccumulationSlowdown = 1.15;
  // Memory-bound kernels (norms, residuals, RoPE, SwiGLU, permutation,
  // quantization casts, cross entropy): achievable fraction of HBM bandwidth.
  double HbmEfficiency = 0.70;
  // Achievable fractions of link bandwidth for collectives. NVLink: A 4.2,
  // ~370 of 450 GB/s busBw per direction on H100 (0.82). Network: A 4.2,
  // one CX-7 NDR gives 48-49 of 50 GB/s.
  double NVLinkEfficiency = 0.82;
  double NetworkEfficiency = 0.96;
  // Token dispatch over NVLink, as a fraction of the per-direction NVLink
  // bandwidth for the bytes that leave the GPU. HybridEP: A 4.1, B200 EP8
  // 536 GB/s algorithm bandwidth x 7/8 remote = 469 of 900; GB200 EP36
  // 479 x 35/36 = 466 of 900 (0.52). DeepEP: A 4.1, B200 302-348 GB/s at 16
  // SMs, 554-646 at 48 (0.34-0.63): 0.5. NCCL all-to-all (alltoall and
  // allgather dispatchers): the NCCL busBw (NVLinkEfficiency) on the wire,
  // but with separate permute/unpermute passes (priced as memory traffic)
  // and a host synchronisation before every dispatch.
  double HybridEpEfficiency = 0.52;
  double DeepEpEfficiency = 0.50;
  // NCCL all-to-all dispatch (alltoall, allgather) over NVLink: the wire
  // runs at NCCL's busBw, but the dispatcher waits on a host
  // synchronisation for the split sizes and moves the tokens in several
  // kernels. Chosen so that switching DeepSeek-V3 on B200 from alltoall to
  // DeepEP gains ~30% end to end (perf_calibration.csv A237, TorchTitan:
  // "+32% from DeepEP alone").
  double AllToAllEfficiency = 0.25;
  // Fraction of DP/EDP gradient communication hidden behind compute when
  // overlap is on (bucketed reduce-scatter / all-gather, A 5; Megatron
  // overlaps all but the last bucket).
  double GradOverlap = 0.80;
  // Fraction of TP collective time hidden under tp_comm_overlap, and of PP
  // sends with interleaving (VPP > 1). (EP overlap follows its schedule,
  // lib/Model/Performance.cpp OverlappedLayer.)
  double CommOverlap = 0.70;
  // SMs the EP kernels occupy while they overlap another micro batch's
  // compute, which runs on the rest. DeepEP and HybridEP: Megatron-Core
  // 0.16.1 defaults moe_deepep_num_sms = 20, moe_hybridep_num_sms = 16
  // (transformer_config.py:722,725) unless the recipe sets moe.dispatcher_sms.
  // NCCL all-to-all (alltoall, allgather): one CTA per channel, NCCL's
  // default of up to 32 point-to-point channels (an assumption: NCCL picks
  // the count at run time). GPUs that do not say: an H100's 132 SMs.
  int64_t DeepEpSms = 20;
  int64_t HybridEpSms = 16;
  int64_t NcclSms = 32;
  int64_t DefaultMultiprocessors = 132;
  // Host (CPU) time to issue one decoder layer's kernels for one micro batch,
  // forward and backward. A layer's forward cannot run ahead of the host
  // across a dropless MoE layer (the dispatcher synchronises on the token
  // counts), so each pass of a layer takes max(GPU time, host time). CUDA
  // graphs remove the host time of what they capture. ~80 launches through
  // Python at ~25 us in the forward, ~150 through autograd at ~7 us in the
  // backward.
  double HostForwardPerLayerSec = 2.0e-3;
  double HostBackwardPerLayerSec = 1.0e-3;
  // CPU-offloaded optimizer (Megatron-Core optimizer/cpu_offloading/
  // hybrid_optimizer.py): the offloaded share keeps fp32 master weights and
  // moments on the host (param_update_in_fp32), steps them with torch's CPU
  // Adam after the GPU part (step() blocks), and copies gradients down and
  // parameters back over the CPU-GPU link, after the host step or, with
  // overlap_cpu_optimizer_d2h_h2d, pipelined with it. Host DRAM is shared by
  // the node's GPUs. Bytes of host traffic per Adam parameter: torch's
  // multi-tensor CPU Adam streams grad, master, m and v several times (m and
  // v updates, the denominator, the update, the fp32 copies in and out:
  // ~14 passes of 4-8 B). Link: fp32 gradient down, fp32 parameter up.
  // Calibrated on one anchor, the cpu-offloading skill card (Qwen3-30B,
  // TP2 PP2 EP4, 2x8 H100: 996 ms, 4189 ms at 100% offload, 3877 ms with the
  // overlap; bridge-facts.md §1), to within 5% of both figures.
  double HostAdamBytesPerParam = 70.0;
  double HostMemoryEfficiency = 0.6;
  double HostLinkBytesPerParam = 8.0;
  double HostLinkEfficiency = 0.6;
  double DefaultHostMemoryBytesPerSec = 600e9; // two-socket DDR5 server
  double DefaultHostLinkBytesPerSec = 64e9;    // PCIe Gen5 x16 per direction
  // Bytes of weight traffic per local parameter and micro batch: the
  // forward and dgrad GEMMs read the BF16 weight (2 + 2 B), the wgrad GEMM
  // accumulates into the fp32 main gradient (Megatron's
  // gradient_accumulation_fusion: read + write 4 + 4 B).
  double WeightBytesPerMicrobatch = 12.0;
  // Bytes of optimizer-step memory traffic per locally owned parameter (read
  // bf16 param, grad, fp32 master, m, v; write them back): ~30 B.
  double OptimizerBytesPerParam = 30.0;

  //===--- Memory model (lib/Model/Memory.cpp) ---------------------------===//
  // Sources: S1 = bench/reference/megatron-memory.md part A (Megatron
  // theoretical_memory_usage.py and its listed gaps); S2 = bridge-facts.md;
  // S3 = perf-anchors.md; S4 = DeepEP / Hybrid-EP buffer allocation code
  // (deep_ep Config::get_nvl_buffer_size_hint, hybrid_ep
  // HybridEpBuffer::allocate_buffer); S5 = published_configs.csv (runs that
  // ran, hence fit: the upper bound every constant here was checked against).
  //
  // Allocator fragmentation and temporaries, as a fraction of the memory
  // that is allocated and freed every step (activations, dispatcher and
  // graph pools; S1: Megatron multiplies activations by 1.05). Weights,
  // gradient buffers and optimizer state are allocated once, contiguously
  // (Megatron's param/grad buffers), and do not fragment; Bridge perf runs
  // also set expandable_segments. Plus a fixed per-GPU reserve for the CUDA
  // context, NCCL communicator buffers and cuBLAS/TE workspaces.
  double FragmentationFraction = 0.05;
  double FixedReserveBytes = 3.0e9;
  // TE per-module CUDA graphs (attn, mlp, moe, moe_router, ...) share one
  // private pool (Megatron-Core cuda_graphs.py TECudaGraphHelper, TE
  // graph.py make_graphed_callables): it holds the captured modules' saved
  // tensors (counted as activations) and the graphs' static outputs (priced
  // from the shapes), and its free blocks serve no eager allocation: this
  // fraction of the captured bytes in flight is lost to that fragmentation.
  // Chosen so that bridge-facts.md rule 39 holds: "a few GB" for TE scopes
  // at PP = 1 and "over 10 GB with PP > 1" (test/unit/MemoryTest.cpp,
  // MemoryKnobs.GraphPoolAnchors).
  double CudaGraphPoolFragmentation = 0.25;
  // The moe_router graph returns fp32 probabilities and a bool routing map
  // per token and expert.
  double RouterGraphOutputBytesPerExpert = 5.0;
  // Full-iteration graphs: S2 rule 39 puts them at 1.5-2x the TE-scope
  // cost. TE scopes (attn + moe_router) hold about a third of an MoE layer's
  // activations, so 1.5 x 0.5 x 1/3 = 0.25 of the in-flight activations and
  // dispatcher buffers. Checked against S5: DeepSeek-V3 MXFP8 on GB300
  // (PP2 VPP8, no recompute) and Qwen3-30B MXFP8 on B300 (MBS 8) fit.
  double CudaGraphFullIterationFraction = 0.25;

  // Bytes per parameter (S1 A.3: bf16 params, fp32 main grads, fp32 master
  // params, fp32 Adam m and v).
  double WeightBytes = 2.0;
  // Low-precision recipes keep the bf16 parameters and TE caches one
  // quantized copy of every GEMM weight for the micro batches of a step
  // (1 B FP8 data; NVFP4: 0.5 B data + one FP8 scale per 16 values). With
  // fp8_param_gather the parameter itself is FP8 (Fp8ParamBytes) and no bf16
  // copy is kept.
  double Fp8WeightCopyBytes = 1.0;
  double Fp4WeightCopyBytes = 0.5625;
  double Fp8ParamBytes = 1.0;
  // With fp4_param_gather (NVFP4) the parameter itself is FP4: 0.5 B of data
  // and one FP8 scale per 16 values; no bf16 copy is kept.
  double Fp4ParamBytes = 0.5625;
  // Gradient buffer: bf16. Every Bridge perf recipe in S5 sets
  // ddp.grad_reduce_in_fp32 = False (e.g. set_deepseek_v3_common_configs);
  // Megatron's own default (and the Bridge library recipes) is fp32, 4 B.
  double GradBytes = 2.0;
  double MasterWeightBytes = 4.0; // fp32 master copy in the optimizer
  double AdamMomentBytes = 8.0;   // m and v, fp32
  // Precision-aware optimizer as the Bridge DeepSeek/Qwen recipes configure
  // it: exp_avg and exp_avg_sq in bf16, main params fp32 (S3; S1 A.3 gap 2).
  double PrecisionAwareMomentBytes = 4.0;
  double MomentumBytes = 4.0; // SGD / Muon: one fp32 momentum buffer

  // Activations (S1 A.4 plus the MoE terms it lacks).
  double ActivationBytes = 2.0; // bf16 saved tensors
  // GEMM inputs saved for backward under FP8 / MXFP8 (TE saves the quantized
  // copy; S2: "16 GB from FP8 activations" on DSV3) and under NVFP4.
  double Fp8SavedInputBytes = 1.0;
  double Fp4SavedInputBytes = 0.5625;
  double SoftmaxStatBytes = 4.0; // flash-attention logsumexp, fp32 per head
  // Router tensors kept for backward per token and expert: fp32 logits,
  // scores and masked top-k probabilities.
  double RouterBytesPerExpert = 12.0;
  // Per routed token copy: int32 row-id map and fp32 routing probability.
  double RoutingMetadataBytes = 8.0;
  // Logits per token and vocabulary entry on the loss stage: bf16, with TE's
  // fused cross entropy writing the gradient in place (Bridge perf recipes).
  double LogitsBytes = 2.0;
  // Routed tokens a rank receives over the balanced share: the published
  // runs are force-balanced (S2 rule 24), so 1.
  double RoutedTokenImbalance = 1.0;
  // Backward of a layer frees its saved tensors op by op while allocating
  // the gradients of the op being differentiated: the extra at any time is
  // about the largest module's saved bytes (the MoE or the attention block),
  // half a layer. Counted once per rank, in layers.
  double GradTemporaryLayers = 0.5;
  // Fine-grained activation offload (offload.activations = [modules]): the
  // offloaded inputs of this many layers are on the GPU at a rank's peak:
  // the group Megatron never offloads (its offload margin, the last group
  // of each name: pipeline_parallel/fine_grained_activation_offload.py
  // post_warmup_callback) and the next layer's, reloaded ahead of its
  // backward.
  double OffloadResidentLayers = 2.0;
  // Megatron-FSDP keeps this many layers' parameters unsharded (current and
  // prefetched) and one layer's gradients before the reduce-scatter.
  double FsdpUnshardedLayers = 2.0;
  int64_t VisionTemporalPatch = 2; // Qwen-VL temporal_patch_size
  int64_t GdnConvKernel = 4;       // Gated DeltaNet short-convolution width

  // Dispatchers.
  // alltoall/allgather: permuted tokens before the all-to-all and expert
  // output before the combine live at once (one layer, one micro batch).
  double AllToAllTransientCopies = 2.0;
  // DeepEP normal kernels (S4): num_sms 20 -> 10 channels; NVL receive ring
  // of 288 tokens per channel and peer, RDMA ring of 128 (get_dispatch_config
  // defaults); per-token metadata: 128 top-k indices (8 B), weights (4 B) and
  // scales (4 B).
  double DeepEpChannels = 10;
  double DeepEpNvlPeers = 8;
  double DeepEpNvlRecvTokens = 288;
  double DeepEpRdmaRecvTokens = 128;
  double DeepEpMetaBytesPerToken = 2048;
  // Hybrid-EP (S4) preallocates for the worst case, every token of the EP
  // group routed to one rank: max_tokens_per_rank x group tokens of hidden
  // bf16 plus fp32 probabilities per local expert of the NVLink domain.
  double HybridEpProbBytes = 4.0;

  static const Calibration &defaults();
};

} // namespace moec

#endif
