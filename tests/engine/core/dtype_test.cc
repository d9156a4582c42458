#include "engine/core/dtype.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace ampd::engine {

using core::IsLowPrecision;
using core::ParseDType;
using core::PromoteTypes;

namespace {

constexpr DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};

TEST(DTypeTest, Names) {
  EXPECT_EQ(DTypeName(DType::kF32), "f32");
  EXPECT_EQ(DTypeName(DType::kF16), "f16");
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeName(DType::kF64), "f64");
}

TEST(DTypeTest, ParseShortAndLongNames) {
  EXPECT_EQ(*ParseDType("f32"), DType::kF32);
  EXPECT_EQ(*ParseDType("float32"), DType::kF32);
  EXPECT_EQ(*ParseDType("f16"), DType::kF16);
  EXPECT_EQ(*ParseDType("float16"), DType::kF16);
  EXPECT_EQ(*ParseDType("bf16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("f64"), DType::kF64);
  EXPECT_EQ(*ParseDType("float64"), DType::kF64);
}

TEST(DTypeTest, NameRoundTrips) {
  for (DType dtype : kAll) EXPECT_EQ(*ParseDType(DTypeName(dtype)), dtype);
}

TEST(DTypeTest, ParseRejectsUnknownNamingValueAndChoices) {
  // Near misses a user might type: case, torch's "half", surrounding spaces, empty.
  for (const char* bad : {"F32", "half", "fp16", " f32", "", "bfloat"}) {
    const absl::StatusOr<DType> parsed = ParseDType(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(parsed.status().message());
    EXPECT_NE(message.find(std::string("\"") + bad + "\""), std::string::npos) << message;
    for (const char* name :
         {"f32", "f16", "bf16", "f64", "float32", "float16", "bfloat16", "float64"}) {
      EXPECT_NE(message.find(name), std::string::npos) << message;
    }
  }
}

TEST(DTypeTest, Sizes) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
}

TEST(DTypeTest, LowPrecision) {
  EXPECT_FALSE(IsLowPrecision(DType::kF32));
  EXPECT_TRUE(IsLowPrecision(DType::kF16));
  EXPECT_TRUE(IsLowPrecision(DType::kBF16));
  EXPECT_FALSE(IsLowPrecision(DType::kF64));
}

TEST(DTypeTest, PromoteTable) {
  EXPECT_EQ(PromoteTypes(DType::kF16, DType::kF16), DType::kF16);
  EXPECT_EQ(PromoteTypes(DType::kBF16, DType::kBF16), DType::kBF16);
  EXPECT_EQ(PromoteTypes(DType::kF32, DType::kF32), DType::kF32);
  EXPECT_EQ(PromoteTypes(DType::kF64, DType::kF64), DType::kF64);
  // Neither 16-bit format contains the other.
  EXPECT_EQ(PromoteTypes(DType::kF16, DType::kBF16), DType::kF32);
  EXPECT_EQ(PromoteTypes(DType::kF16, DType::kF32), DType::kF32);
  EXPECT_EQ(PromoteTypes(DType::kBF16, DType::kF32), DType::kF32);
  EXPECT_EQ(PromoteTypes(DType::kF16, DType::kF64), DType::kF64);
  EXPECT_EQ(PromoteTypes(DType::kBF16, DType::kF64), DType::kF64);
  EXPECT_EQ(PromoteTypes(DType::kF32, DType::kF64), DType::kF64);
}

TEST(DTypeTest, PromoteIsSymmetricAndNeverNarrows) {
  for (DType a : kAll) {
    for (DType b : kAll) {
      const DType p = PromoteTypes(a, b);
      EXPECT_EQ(p, PromoteTypes(b, a));
      EXPECT_GE(DTypeSize(p), DTypeSize(a));
      EXPECT_GE(DTypeSize(p), DTypeSize(b));
    }
  }
}

}  // namespace
}  // namespace ampd::engine
