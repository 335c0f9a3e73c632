//===- Calibration.cpp ----------------------------------------------------===//
#include "moec/Model/Calibration.h"

const moec::Calibration &moec::Calibration::defaults() {
  static const Calibration C;
  return C;
}
