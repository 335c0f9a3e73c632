//===- Quantity.cpp - Numbers with units ----------------------------------===//
#include "moec/Basic/Quantity.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include <cmath>
#include <fmt/format.h>

using namespace moec;

namespace {
struct UnitSpec {
  llvm::StringLiteral Name;
  double Scale;
  Dimension Dim;
};

constexpr double KiB = 1024.0, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;

// Count multipliers are powers of two (ML usage: 4K tokens = 4096); byte
// units follow SI and IEC.
const UnitSpec Units[] = {
    {"K", 1024.0, Dimension::none()},
    {"M", 1024.0 * 1024, Dimension::none()},
    {"G", 1024.0 * 1024 * 1024, Dimension::none()},
    {"B", 1, Dimension::byteCount()},
    {"KB", 1e3, Dimension::byteCount()},
    {"MB", 1e6, Dimension::byteCount()},
    {"GB", 1e9, Dimension::byteCount()},
    {"TB", 1e12, Dimension::byteCount()},
    {"KiB", KiB, Dimension::byteCount()},
    {"MiB", MiB, Dimension::byteCount()},
    {"GiB", GiB, Dimension::byteCount()},
    {"TiB", TiB, Dimension::byteCount()},
    {"B/s", 1, Dimension::bandwidth()},
    {"KB/s", 1e3, Dimension::bandwidth()},
    {"MB/s", 1e6, Dimension::bandwidth()},
    {"GB/s", 1e9, Dimension::bandwidth()},
    {"TB/s", 1e12, Dimension::bandwidth()},
    {"KiB/s", KiB, Dimension::bandwidth()},
    {"MiB/s", MiB, Dimension::bandwidth()},
    {"GiB/s", GiB, Dimension::bandwidth()},
    {"TiB/s", TiB, Dimension::bandwidth()},
    {"GFLOPS", 1e9, Dimension::flopRate()},
    {"TFLOPS", 1e12, Dimension::flopRate()},
    {"PFLOPS", 1e15, Dimension::flopRate()},
};

std::string stripUnderscores(llvm::StringRef S) {
  std::string Out;
  Out.reserve(S.size());
  for (char C : S)
    if (C != '_')
      Out.push_back(C);
  return Out;
}

// 2^63 as a double; every double strictly below it converts to int64_t.
constexpr double TwoTo63 = 9223372036854775808.0;
} // namespace

std::string Dimension::describe() const {
  if (isNone())
    return "count";
  if (*this == byteCount())
    return "bytes";
  if (*this == bandwidth())
    return "bandwidth";
  if (*this == flopRate())
    return "compute rate";
  if (*this == time())
    return "time";
  std::string S;
  auto Add = [&](const char *Name, int E) {
    if (!E)
      return;
    if (!S.empty())
      S += "*";
    S += Name;
    if (E != 1)
      S += fmt::format("^{}", E);
  };
  Add("bytes", bytes);
  Add("s", seconds);
  Add("flop", flops);
  return S;
}

llvm::ArrayRef<llvm::StringRef> Quantity::knownUnits() {
  static const std::vector<llvm::StringRef> Names = [] {
    std::vector<llvm::StringRef> V;
    for (const UnitSpec &U : Units)
      V.push_back(U.Name);
    return V;
  }();
  return Names;
}

Quantity Quantity::normalized(double V, Dimension D) {
  if (std::isfinite(V) && V == std::trunc(V) && std::fabs(V) < TwoTo63)
    return integer(int64_t(V), D);
  return real(V, D);
}

llvm::Optional<Quantity> Quantity::fromNumber(llvm::StringRef Digits, QuantityError &Err) {
  Err = QuantityError::None;
  std::string Clean = stripUnderscores(Digits);
  bool IsReal = llvm::StringRef(Clean).find_first_of(".eE") != llvm::StringRef::npos;
  if (!IsReal) {
    uint64_t V = 0;
    for (char C : Clean) {
      if (__builtin_mul_overflow(V, 10u, &V) || __builtin_add_overflow(V, uint64_t(C - '0'), &V) ||
          V > uint64_t(INT64_MAX)) {
        Err = QuantityError::Overflow;
        return llvm::None;
      }
    }
    return integer(int64_t(V));
  }
  double V = std::strtod(Clean.c_str(), nullptr);
  if (!std::isfinite(V)) {
    Err = QuantityError::Overflow;
    return llvm::None;
  }
  return real(V);
}

llvm::Optional<Quantity> Quantity::fromLiteral(llvm::StringRef Digits, llvm::StringRef Unit, QuantityError &Err) {
  const UnitSpec *Spec = llvm::find_if(Units, [&](const UnitSpec &U) { return U.Name == Unit; });
  if (Spec == std::end(Units))
    return llvm::None;
  llvm::Optional<Quantity> Number = fromNumber(Digits, Err);
  if (!Number)
    return llvm::None;
  if (Number->isInteger() && Spec->Scale == std::trunc(Spec->Scale) && Spec->Scale < TwoTo63) {
    int64_t Result;
    if (__builtin_mul_overflow(Number->getInteger(), int64_t(Spec->Scale), &Result)) {
      Err = QuantityError::Overflow;
      return llvm::None;
    }
    return integer(Result, Spec->Dim);
  }
  double V = Number->getReal() * Spec->Scale;
  if (!std::isfinite(V)) {
    Err = QuantityError::Overflow;
    return llvm::None;
  }
  return normalized(V, Spec->Dim);
}

static std::string trimmedNumber(double V) {
  std::string S = fmt::format("{:.3f}", V);
  while (!S.empty() && S.back() == '0')
    S.pop_back();
  if (!S.empty() && S.back() == '.')
    S.pop_back();
  return S;
}

std::string Quantity::format() const {
  double V = getReal();
  auto Scaled = [&](llvm::ArrayRef<std::pair<double, const char *>> Steps, const char *Base) {
    for (auto &[Scale, Name] : Steps)
      if (std::fabs(V) >= Scale)
        return trimmedNumber(V / Scale) + Name;
    return trimmedNumber(V) + Base;
  };
  if (Dim.isNone()) {
    // Counts keep their exact digits unless a binary multiplier divides them.
    if (IsInt && Int != 0) {
      for (auto [Shift, Name] : {std::pair<int, const char *>{30, "G"}, {20, "M"}, {10, "K"}})
        if (Int % (int64_t(1) << Shift) == 0)
          return fmt::format("{}{}", Int >> Shift, Name);
      return fmt::format("{}", Int);
    }
    return IsInt ? fmt::format("{}", Int) : trimmedNumber(V);
  }
  if (Dim == Dimension::byteCount())
    return Scaled({{1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "KB"}}, "B");
  if (Dim == Dimension::bandwidth())
    return Scaled({{1e12, "TB/s"}, {1e9, "GB/s"}, {1e6, "MB/s"}, {1e3, "KB/s"}}, "B/s");
  if (Dim == Dimension::flopRate())
    return Scaled({{1e15, "PFLOPS"}, {1e12, "TFLOPS"}, {1e9, "GFLOPS"}}, " flop/s");
  if (Dim == Dimension::time())
    return trimmedNumber(V) + "s";
  return trimmedNumber(V) + " " + Dim.describe();
}

QuantityError Quantity::add(const Quantity &A, const Quantity &B, Quantity &Out) {
  if (A.Dim != B.Dim)
    return QuantityError::DimensionMismatch;
  if (A.IsInt && B.IsInt) {
    int64_t R;
    if (__builtin_add_overflow(A.Int, B.Int, &R))
      return QuantityError::Overflow;
    Out = integer(R, A.Dim);
    return QuantityError::None;
  }
  double R = A.getReal() + B.getReal();
  if (!std::isfinite(R))
    return QuantityError::Overflow;
  Out = real(R, A.Dim);
  return QuantityError::None;
}

QuantityError Quantity::negate(const Quantity &A, Quantity &Out) {
  if (A.IsInt) {
    if (A.Int == INT64_MIN)
      return QuantityError::Overflow;
    Out = integer(-A.Int, A.Dim);
  } else {
    Out = real(-A.Real, A.Dim);
  }
  return QuantityError::None;
}

QuantityError Quantity::sub(const Quantity &A, const Quantity &B, Quantity &Out) {
  Quantity NegB;
  if (QuantityError E = negate(B, NegB); E != QuantityError::None)
    return E;
  return add(A, NegB, Out);
}

QuantityError Quantity::mul(const Quantity &A, const Quantity &B, Quantity &Out) {
  Dimension D = A.Dim * B.Dim;
  if (A.IsInt && B.IsInt) {
    int64_t R;
    if (__builtin_mul_overflow(A.Int, B.Int, &R))
      return QuantityError::Overflow;
    Out = integer(R, D);
    return QuantityError::None;
  }
  double R = A.getReal() * B.getReal();
  if (!std::isfinite(R))
    return QuantityError::Overflow;
  Out = real(R, D);
  return QuantityError::None;
}

QuantityError Quantity::div(const Quantity &A, const Quantity &B, Quantity &Out) {
  if (B.getReal() == 0)
    return QuantityError::DivisionByZero;
  Dimension D = A.Dim / B.Dim;
  if (A.IsInt && B.IsInt) {
    if (A.Int == INT64_MIN && B.Int == -1)
      return QuantityError::Overflow;
    if (A.Int % B.Int != 0)
      return QuantityError::InexactDivision;
    Out = integer(A.Int / B.Int, D);
    return QuantityError::None;
  }
  double R = A.getReal() / B.getReal();
  if (!std::isfinite(R))
    return QuantityError::Overflow;
  Out = real(R, D);
  return QuantityError::None;
}

QuantityError Quantity::rem(const Quantity &A, const Quantity &B, Quantity &Out) {
  if (!A.IsInt || !B.IsInt)
    return QuantityError::NotAnInteger;
  if (A.Dim != B.Dim)
    return QuantityError::DimensionMismatch;
  if (B.Int == 0)
    return QuantityError::DivisionByZero;
  if (A.Int == INT64_MIN && B.Int == -1) {
    Out = integer(0, A.Dim);
    return QuantityError::None;
  }
  Out = integer(A.Int % B.Int, A.Dim);
  return QuantityError::None;
}
