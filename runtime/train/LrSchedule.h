//===- train/LrSchedule.h - Megatron's learning-rate schedule ----*- C++ -*-===//
//
// The learning rate of each step as Megatron-Core's OptimizerParamScheduler
// computes it (megatron/core/optimizer_param_scheduler.py get_lr, 0.16.1):
// linear warm-up from 0 over WarmupSteps, then constant, linear or cosine
// decay to MinLr at DecaySteps, MinLr after. Megatron advances the scheduler
// after each optimizer step, so step K (1-based) runs at get_lr(K - 1).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_TRAIN_LRSCHEDULE_H
#define MOERT_TRAIN_LRSCHEDULE_H

#include <cstdint>
#include <string>

namespace moert {

struct LrSchedule {
  enum class Decay { Constant, Linear, Cosine };
  double Lr = 1e-3, MinLr = 0;
  int64_t WarmupSteps = 0, DecaySteps = 0; // DecaySteps > WarmupSteps unless constant
  Decay Style = Decay::Constant;

  /// The rate after Done optimizer steps (Megatron's num_steps).
  double after(int64_t Done) const;
  /// The rate of step K, 1-based.
  double ofStep(int64_t K) const { return after(K - 1); }
  /// "constant", "linear" or "cosine"; false for anything else.
  static bool parseDecay(const std::string &Name, Decay &Out);
};

} // namespace moert

#endif
