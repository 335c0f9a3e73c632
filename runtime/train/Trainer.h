//===- train/Trainer.h - A launch plan's training steps on this rank
//-------===//
//
// The Trainer joins the runtime's pieces into training steps for one rank of
// a launch plan (moec plan, read back by moec::readPlan):
//  * groups: the plan's process groups (tp, cp, tp-cp, ep, dp-cp, edp, pp),
//    each wrapped in a TimedCommunicator so that a step's communication time
//    is measured;
//  * model: a StageModel per pipeline chunk this pp rank holds (the plan's
//    pipeline.stages), configured from the plan's model, with
//    CeScale = 1 / (global_batch * seq_len) and AuxScale = 1 / (global_batch
//    / micro_batch), so that gradients summed over micro batches and ranks are
//    those of the global-batch mean loss, as on one rank;
//  * data: step s (0-based) trains on global samples [s*GBS, (s+1)*GBS) of the
//    TokenSource; with M = GBS/MBS micro batches per step, DP rank d takes
//    micro batches d*(M/dp) .. (d+1)*(M/dp)-1, and micro batch g holds samples
//    s*GBS + g*MBS .. + MBS-1. The same micro batches exist in every layout,
//    so the per-micro-batch auxiliary loss is the same too. Each sequence is
//    cut to this CP rank's positions (localPositions, parallel/cp); labels are
//    the next tokens;
//  * schedule: the plan's ops for this pp rank through the PipelineExecutor
//    (which hands tensors over locally when pp = 1);
//  * update: AdamW (parallel/dp), which sums the gradients over dp-cp, tp and
//    edp by parameter kind first; replicated or distributed (ZeRO-1) as the
//    plan's config.optimizer.distributed says when OptimizerFromPlan is set, with
//    the plan's weight decay, betas, eps and gradient clipping.
// The host backend computes in fp32 whatever the plan's precision says; the
// CUDA backend (TrainerOptions::Compute) in bf16 with fp32 accumulation.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_TRAIN_TRAINER_H
#define MOERT_TRAIN_TRAINER_H

#include "checkpoint/CheckpointDir.h"
#include "comm/Communicator.h"
#include "data/TokenSource.h"
#include "model/Model.h"
#include "moec/PlanFormat/PlanReader.h"
#include "parallel/dp/AdamW.h"
#include "train/LrSchedule.h"
#include "train/TimedCommunicator.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moert {

/// The plan's model as the runtime builds it; std::runtime_error naming what
/// the runtime does not implement (MTP layers, an unsupported attention).
ModelConfig modelConfigOf(const moec::LaunchPlan &Plan);

/// One communicator per group kind of the plan, split from World. Every rank
/// calls it together (kinds in name order).
std::map<std::string, std::unique_ptr<Communicator>> createPlanGroups(const moec::LaunchPlan &Plan, CommWorld &World);

struct TrainerOptions {
  /// Model initialisation and the mock data source.
  uint64_t Seed = 1234;
  AdamWOptions Optimizer;
  /// Take Optimizer.Distributed from the plan's [config.optimizer]
  /// (moerun); false: keep Optimizer as given (tests that pick the variant).
  bool OptimizerFromPlan = false;
  /// The run's length: where an unset decay_steps ends the decay.
  int64_t TotalSteps = 1;
  /// Data; null: a MockSource (plan data.source = mock) or the plan's indexed
  /// dataset.
  std::shared_ptr<const TokenSource> Data;
  /// What the stages compute on (kernels/Backend.h); null: the host backend.
  /// Not owned.
  ComputeBackend *Compute = nullptr;
  /// A communicator of device buffers over the plan's group of this kind
  /// ("cp", "dp-cp", "tp", "edp"; Group is the trainer's host communicator
  /// over it, whose Communicator::device() it becomes), for what the compute
  /// backend keeps to move between its own arrays (attention's ring, the
  /// routed rows, the gradient sums): NCCL under moerun, the host-staged
  /// communicator where ranks share a GPU. Called once per group of more
  /// than one rank, by every member, in the same order. Unset: the host
  /// moves them.
  std::function<std::unique_ptr<Communicator>(const std::string &Kind, Communicator &Group)> DeviceGroup;
};

/// One finished step, the same on every rank (reduced over the world).
struct TrainStepStats {
  int64_t Step = 0;        ///< 1-based
  double LearningRate = 0; ///< the step's rate (the plan's schedule)
  double Loss = 0;         ///< mean cross entropy over the global batch's tokens
  double AuxLoss = 0;      ///< sum over micro batches and MoE layers of aux loss * AuxScale
  int64_t Tokens = 0;      ///< tokens in the mean
  /// Mean cross entropy of the MTP blocks over their (token, depth) pairs
  /// that have a label (0 without MTP blocks), unscaled.
  double MtpLoss = 0;
  double StepSeconds = 0;     ///< slowest rank, from the step's start to its update
  double TokensPerSecond = 0; ///< whole job: global_batch * seq_len / StepSeconds
  /// Whole job: the tokens with a label (text, not image placeholders) over
  /// StepSeconds.
  double UsefulTokensPerSecond = 0;
  int64_t PeakBytes = 0; ///< largest over the ranks of RankPeakBytes
  /// Largest over the ranks of the compute backend's device memory peak in
  /// the step, and of the bytes it copied between host and device in the
  /// step (both 0 on the host backend).
  int64_t DevicePeakBytes = 0, StagedBytes = 0;
  std::vector<int64_t> RankPeakBytes; ///< per world rank: see localPeakBytes()
  double CommSeconds = 0;             ///< mean over ranks of time inside communicator calls
  /// CommSeconds by the parallel dimension of the group (CommPart).
  std::array<double, NumCommParts> CommPartSeconds{};
  double ComputeSeconds = 0; ///< mean over ranks of step time minus CommSeconds
  double BlasSeconds = 0;    ///< mean over ranks of time inside gemm (part of compute)
  double GradNorm = 0;       ///< global gradient norm before clipping
  /// Mean over ranks of the process CPU time of the step (getrusage: user +
  /// system). On a machine with other load, StepSeconds includes time the
  /// ranks waited for a core; CpuSeconds does not (but it counts MPI's busy
  /// polling while a rank waits for a peer).
  double CpuSeconds = 0;
};

/// One evaluation, the same on every rank.
struct EvalStats {
  double Loss = 0;    ///< mean cross entropy over the validation tokens
  int64_t Tokens = 0; ///< tokens in the mean: eval_iters x global batch x seq_len
};

class Trainer {
public:
  /// Groups: from createPlanGroups (or moerun's own, same kinds). Throws
  /// std::runtime_error when the plan asks for what this runtime cannot run.
  Trainer(const moec::LaunchPlan &Plan, CommWorld &World, std::map<std::string, std::unique_ptr<Communicator>> &Groups,
          const TrainerOptions &Options);
  ~Trainer();
  Trainer(const Trainer &) = delete;
  Trainer &operator=(const Trainer &) = delete;

  /// Checks this rank's share (by world rank) of the plan's dataset's token
  /// ids against the vocabulary, so that the job reads every id once, not
  /// once per rank; "" when they are in range, when the dtype cannot hold
  /// an id outside, or with mock or caller-given data. Not collective: the
  /// caller agrees on the result before the first step(), which reads
  /// nothing unchecked.
  std::string checkDataShare() const;

  /// Runs one step on every rank together. OnOp: a heartbeat after each
  /// pipeline op.
  TrainStepStats step(const std::function<void()> &OnOp = nullptr);

  /// Collective: the loss on the plan's held-out samples (data.eval_iters
  /// global batches of the validation part; mock data: samples training
  /// never reaches), forwards only; parameters, optimizer state and the data
  /// position are untouched. The same samples every time, so that
  /// evaluations compare. Needs a validation part (refused at construction
  /// when data.eval_interval is set without one).
  EvalStats evaluate(const std::function<void()> &OnOp = nullptr);
  /// data.eval_interval of the plan; 0: no evaluation.
  int64_t evalInterval() const;

  /// Every parameter this rank holds, all chunks, with its values and
  /// gradient on the host until the next step (which may keep them on the
  /// compute backend again).
  std::vector<Parameter *> parameters();
  /// This rank's peak bytes in the last step: the sum over its chunks of
  /// peak saved activations, plus parameters, gradients and optimizer moments
  /// (all fp32).
  int64_t localPeakBytes() const;

  /// Collective over the world: writes the full tensors (tp shards gathered
  /// by Parameter::Split) that this rank owns to Path, gradients (Grads) or
  /// values. Owner of a tensor: the expert's edp rank 0; any other
  /// parameter's tp rank 0 that is also dp-cp rank 0. Format: see
  /// writeTensorFile. Gradients are those summed by the last step's
  /// optimizer (replicated optimizer only).
  void dumpTensors(const std::string &Path, bool Grads);

  /// Collective over the world: saves the training state after the steps
  /// done so far as a checkpoint under Dir (checkpoint/CheckpointDir.h):
  /// every parameter, Adam's moments and t, the step, the data position, the
  /// seed and the plan's layout, each tensor whole (tp shards and ZeRO
  /// shards gathered), written by its owner (as dumpTensors). Keeps the
  /// newest Keep checkpoints (0: all). AfterWrite: a test hook run on every
  /// rank once its tensor file is written, before the commit. Returns the
  /// same on every rank; Error is set on the ranks that know what failed.
  bool save(const std::string &Dir, int Keep, std::string &Path, std::string &Error,
            const std::function<void()> &AfterWrite = nullptr);
  /// Collective: loads the checkpoint at Path (its manifest M) into this
  /// plan's layout, whatever layout saved it; the next step() is M.Step + 1
  /// and trains on the samples after M.ConsumedSamples. Refused, naming the
  /// first tensor that differs, when the checkpoint is of another model.
  bool load(const std::string &Path, const CheckpointManifest &M, std::string &Error);

  /// Collective over the world: sets every parameter from a Hugging Face
  /// checkpoint (Dir/model.safetensors, F32, Qwen3-MoE / Qwen2-MoE / Mixtral
  /// names: model.layers.L.self_attn.q_proj.weight, ...mlp.experts.E.gate_proj
  /// .weight, ...), transposed to the runtime's [in, out] and sliced to this
  /// rank's shards. False with Error naming the first tensor that is missing
  /// or of another shape.
  bool initFromHuggingFace(const std::string &Dir, std::string &Error);
  /// Steps done (those of a loaded checkpoint included).
  int64_t stepsDone() const;
  /// What the optimizer applies (the learning rate: the last step's).
  const AdamWOptions &optimizerOptions() const;

  /// Things said once at start (what precision the CPU computes in,
  /// recompute modules that were ignored).
  const std::vector<std::string> &notes() const { return Notes; }

private:
  struct Impl;
  std::vector<std::string> Notes; ///< before P: Impl's constructor fills it
  std::unique_ptr<Impl> P;
};

/// A tensor file: "MOEDUMP1\n", then per tensor: uint32 name length, the
/// name, uint32 rank, int64 dims, float32 data (little endian, host order).
/// Returns false when the file cannot be written.
struct NamedTensor {
  std::string Name;
  const Tensor *Value;
};
bool writeTensorFile(const std::string &Path, const std::vector<NamedTensor> &Tensors);

} // namespace moert

#endif
