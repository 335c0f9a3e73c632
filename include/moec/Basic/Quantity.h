//===- Quantity.h - Numbers with units ---------------------------*- C++ -*-===//
//
// A Quantity is a number with a physical dimension. Dimensions are exponent
// vectors over bytes, seconds and floating-point operations, so derived units
// (bandwidth = bytes/s, compute rate = flop/s, bytes / bandwidth = seconds)
// fall out of ordinary arithmetic and `seq_len = 80GB` is a type error.
//
// Integers stay exact: arithmetic on two integers reports overflow and inexact
// division instead of silently rounding, since a layout size that does not
// divide is a bug in a recipe, not something to round away.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_BASIC_QUANTITY_H
#define MOEC_BASIC_QUANTITY_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/Optional.h"
#include "llvm/ADT/StringRef.h"
#include <cstdint>
#include <string>

namespace moec {

struct Dimension {
  int8_t bytes = 0;
  int8_t seconds = 0;
  int8_t flops = 0;

  static Dimension none() { return {}; }
  static Dimension byteCount() { return {1, 0, 0}; }
  static Dimension bandwidth() { return {1, -1, 0}; }
  static Dimension flopRate() { return {0, -1, 1}; }
  static Dimension time() { return {0, 1, 0}; }

  bool isNone() const { return bytes == 0 && seconds == 0 && flops == 0; }
  bool operator==(const Dimension &O) const { return bytes == O.bytes && seconds == O.seconds && flops == O.flops; }
  bool operator!=(const Dimension &O) const { return !(*this == O); }
  Dimension operator*(const Dimension &O) const {
    return {int8_t(bytes + O.bytes), int8_t(seconds + O.seconds), int8_t(flops + O.flops)};
  }
  Dimension operator/(const Dimension &O) const {
    return {int8_t(bytes - O.bytes), int8_t(seconds - O.seconds), int8_t(flops - O.flops)};
  }
  /// A name a user recognizes: "count", "bytes", "bandwidth", "compute rate".
  std::string describe() const;
};

/// Why an arithmetic operation on quantities failed; the caller turns this
/// into a located diagnostic.
enum class QuantityError {
  None,
  Overflow,
  InexactDivision,
  DivisionByZero,
  DimensionMismatch,
  NotAnInteger,
};

class Quantity {
public:
  Quantity() = default;
  static Quantity integer(int64_t V, Dimension D = {}) { return Quantity(true, V, double(V), D); }
  static Quantity real(double V, Dimension D = {}) { return Quantity(false, 0, V, D); }

  bool isInteger() const { return IsInt; }
  int64_t getInteger() const { return Int; }
  double getReal() const { return IsInt ? double(Int) : Real; }
  Dimension getDimension() const { return Dim; }

  /// Formats with the largest unit that keeps the value readable: 131072 ->
  /// "128K", 80e9 bytes -> "80GB", 3.35e12 B/s -> "3.35TB/s".
  std::string format() const;

  /// Parses a literal's unit suffix (`K`, `GiB`, `TB/s`, `TFLOPS`, ...) and
  /// applies it to the digits before it. Returns None for an unknown unit.
  static llvm::Optional<Quantity> fromLiteral(llvm::StringRef Digits, llvm::StringRef Unit, QuantityError &Err);
  /// Parses an integer or float literal without a unit (underscores allowed).
  static llvm::Optional<Quantity> fromNumber(llvm::StringRef Digits, QuantityError &Err);
  /// The units the lexer may glue to a number, for "did you mean".
  static llvm::ArrayRef<llvm::StringRef> knownUnits();

  static QuantityError add(const Quantity &A, const Quantity &B, Quantity &Out);
  static QuantityError sub(const Quantity &A, const Quantity &B, Quantity &Out);
  static QuantityError mul(const Quantity &A, const Quantity &B, Quantity &Out);
  static QuantityError div(const Quantity &A, const Quantity &B, Quantity &Out);
  static QuantityError rem(const Quantity &A, const Quantity &B, Quantity &Out);
  static QuantityError negate(const Quantity &A, Quantity &Out);

  bool operator==(const Quantity &O) const {
    return Dim == O.Dim && (IsInt && O.IsInt ? Int == O.Int : getReal() == O.getReal());
  }

private:
  Quantity(bool IsInt, int64_t I, double R, Dimension D) : IsInt(IsInt), Int(I), Real(R), Dim(D) {}
  /// Keeps exactness where a real result is a representable integer.
  static Quantity normalized(double V, Dimension D);

  bool IsInt = true;
  int64_t Int = 0;
  double Real = 0;
  Dimension Dim;
};

} // namespace moec

#endif
