//===- train/LrSchedule.cpp - Megatron's learning-rate schedule -----------===//
#include "train/LrSchedule.h"

#include <cmath>

using namespace moert;

double LrSchedule::after(int64_t Done) const {
  // Warm-up: init_lr (0) + (max_lr - init_lr) * num_steps / lr_warmup_steps.
  if (WarmupSteps > 0 && Done <= WarmupSteps)
    return Lr * double(Done) / double(WarmupSteps);
  if (Style == Decay::Constant)
    return Lr;
  if (Done > DecaySteps)
    return MinLr;
  double Ratio = double(Done - WarmupSteps) / double(DecaySteps - WarmupSteps);
  double Coeff = Style == Decay::Linear ? 1.0 - Ratio : 0.5 * (std::cos(M_PI * Ratio) + 1.0);
  return MinLr + Coeff * (Lr - MinLr);
}

bool LrSchedule::parseDecay(const std::string &Name, Decay &Out) {
  if (Name == "constant")
    Out = Decay::Constant;
  else if (Name == "linear")
    Out = Decay::Linear;
  else if (Name == "cosine")
    Out = Decay::Cosine;
  else
    return false;
  return true;
}
