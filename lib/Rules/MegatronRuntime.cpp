//===- MegatronRuntime.cpp - Megatron-Core start-up rules ---------------===//
#include "moec/Rules/RuleEngine.h"

using namespace moec;

namespace moec::rules {} // namespace moec::rules
