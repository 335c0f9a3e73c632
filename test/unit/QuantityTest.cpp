#include "moec/Basic/Quantity.h"
#include <gtest/gtest.h>

using namespace moec;

static Quantity lit(const char *Digits, const char *Unit) {
  QuantityError Err;
  auto Q = Quantity::fromLiteral(Digits, Unit, Err);
  EXPECT_TRUE(Q.hasValue()) << Digits << Unit;
  return Q ? *Q : Quantity();
}

TEST(Quantity, CountMultipliersArePowersOfTwo) {
  EXPECT_EQ(lit("4", "K").getInteger(), 4096);
  EXPECT_EQ(lit("128", "K").getInteger(), 131072);
  EXPECT_EQ(lit("1", "M").getInteger(), 1 << 20);
  EXPECT_TRUE(lit("1", "G").getDimension().isNone());
}

TEST(Quantity, ByteUnitsAreSIAndIEC) {
  EXPECT_EQ(lit("80", "GB").getInteger(), 80'000'000'000);
  EXPECT_EQ(lit("1", "GiB").getInteger(), int64_t(1) << 30);
  EXPECT_EQ(lit("1", "GB").getDimension(), Dimension::byteCount());
}

TEST(Quantity, FractionalLiteralsStayExactWhenIntegral) {
  Quantity Q = lit("3.35", "TB/s");
  EXPECT_EQ(Q.getDimension(), Dimension::bandwidth());
  EXPECT_DOUBLE_EQ(Q.getReal(), 3.35e12);
  EXPECT_TRUE(lit("1.5", "K").isInteger());
  EXPECT_EQ(lit("1.5", "K").getInteger(), 1536);
}

TEST(Quantity, UnknownUnitIsRejected) {
  QuantityError Err;
  EXPECT_FALSE(Quantity::fromLiteral("4", "Kb", Err).hasValue());
  EXPECT_FALSE(Quantity::fromLiteral("4", "gb", Err).hasValue());
}

TEST(Quantity, IntegerLiteralOverflow) {
  QuantityError Err;
  EXPECT_TRUE(Quantity::fromNumber("9223372036854775807", Err).hasValue());
  EXPECT_FALSE(Quantity::fromNumber("9223372036854775808", Err).hasValue());
  EXPECT_EQ(Err, QuantityError::Overflow);
  EXPECT_FALSE(Quantity::fromLiteral("9007199254740992", "K", Err).hasValue());
  EXPECT_EQ(Err, QuantityError::Overflow);
  EXPECT_EQ(Quantity::fromNumber("1_024", Err)->getInteger(), 1024);
}

TEST(Quantity, ArithmeticChecksDimensions) {
  Quantity Out;
  EXPECT_EQ(Quantity::add(lit("1", "GB"), Quantity::integer(1), Out), QuantityError::DimensionMismatch);
  EXPECT_EQ(Quantity::mul(Quantity::integer(2), lit("1", "GB"), Out), QuantityError::None);
  EXPECT_EQ(Out.getDimension(), Dimension::byteCount());
  // bytes / bandwidth is time
  EXPECT_EQ(Quantity::div(lit("80", "GB"), lit("40", "GB/s"), Out), QuantityError::None);
  EXPECT_EQ(Out.getDimension(), Dimension::time());
  EXPECT_EQ(Out.getInteger(), 2);
  // bytes / bytes is a count
  EXPECT_EQ(Quantity::div(lit("80", "GB"), lit("40", "GB"), Out), QuantityError::None);
  EXPECT_TRUE(Out.getDimension().isNone());
}

TEST(Quantity, IntegerDivisionMustBeExact) {
  Quantity Out;
  EXPECT_EQ(Quantity::div(Quantity::integer(7), Quantity::integer(2), Out), QuantityError::InexactDivision);
  EXPECT_EQ(Quantity::div(Quantity::integer(8), Quantity::integer(2), Out), QuantityError::None);
  EXPECT_EQ(Out.getInteger(), 4);
  EXPECT_EQ(Quantity::div(Quantity::integer(8), Quantity::integer(0), Out), QuantityError::DivisionByZero);
  EXPECT_EQ(Quantity::div(Quantity::real(7.0 / 3), Quantity::integer(2), Out), QuantityError::None);
}

TEST(Quantity, ArithmeticOverflow) {
  Quantity Out;
  Quantity Max = Quantity::integer(INT64_MAX);
  EXPECT_EQ(Quantity::add(Max, Quantity::integer(1), Out), QuantityError::Overflow);
  EXPECT_EQ(Quantity::mul(Max, Quantity::integer(2), Out), QuantityError::Overflow);
  EXPECT_EQ(Quantity::negate(Quantity::integer(INT64_MIN), Out), QuantityError::Overflow);
  EXPECT_EQ(Quantity::div(Quantity::integer(INT64_MIN), Quantity::integer(-1), Out), QuantityError::Overflow);
  EXPECT_EQ(Quantity::sub(Quantity::integer(INT64_MIN), Quantity::integer(1), Out), QuantityError::Overflow);
}

TEST(Quantity, RemainderNeedsIntegers) {
  Quantity Out;
  EXPECT_EQ(Quantity::rem(Quantity::integer(7), Quantity::integer(4), Out), QuantityError::None);
  EXPECT_EQ(Out.getInteger(), 3);
  EXPECT_EQ(Quantity::rem(Quantity::real(7.5), Quantity::integer(4), Out), QuantityError::NotAnInteger);
}

TEST(Quantity, FormatPicksReadableUnits) {
  EXPECT_EQ(Quantity::integer(131072).format(), "128K");
  EXPECT_EQ(Quantity::integer(1000).format(), "1000");
  EXPECT_EQ(lit("80", "GB").format(), "80GB");
  EXPECT_EQ(lit("3.35", "TB/s").format(), "3.35TB/s");
  EXPECT_EQ(lit("989", "TFLOPS").format(), "989TFLOPS");
}
