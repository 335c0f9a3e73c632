//===- GraphPolicyTest.cpp - Which CUDA-graph scopes are refused ----------===//
//
// The capture policy needs no GPU: it runs in every build with MOEC_CUDA.
//
//===----------------------------------------------------------------------===//
#include "kernels/cuda/CudaGraph.h"

#include <gtest/gtest.h>

using namespace moert::cuda;

namespace {

TEST(CudaGraphPolicy, ScopeNamesRoundTrip) {
  for (const char *N : {"attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration"}) {
    auto S = parseGraphScope(N);
    ASSERT_TRUE(S.has_value()) << N;
    EXPECT_STREQ(graphScopeName(*S), N);
  }
  EXPECT_FALSE(parseGraphScope("attention").has_value());
}

TEST(CudaGraphPolicy, StaticScopesAreCapturable) {
  GraphConditions C; // MoE model, EP 1, dynamic expert counts
  EXPECT_EQ(whyNotCapturable(GraphScope::Attn, C), "");
  EXPECT_EQ(whyNotCapturable(GraphScope::MoeRouter, C), "");
  EXPECT_EQ(whyNotCapturable(GraphScope::MoePreprocess, C), "");
  C.EpSize = 8;
  EXPECT_EQ(whyNotCapturable(GraphScope::Attn, C), "");
  EXPECT_EQ(whyNotCapturable(GraphScope::MoeRouter, C), "");
}

TEST(CudaGraphPolicy, DynamicExpertCountsAreRefusedWithTheReason) {
  GraphConditions C;
  C.EpSize = 4;
  std::string Why = whyNotCapturable(GraphScope::MoePreprocess, C);
  EXPECT_NE(Why.find("'moe_preprocess' with EP 4"), std::string::npos) << Why;
  EXPECT_NE(Why.find("static expert capacity"), std::string::npos) << Why;
  Why = whyNotCapturable(GraphScope::FullIteration, C);
  EXPECT_NE(Why.find("'full_iteration'"), std::string::npos) << Why;
  EXPECT_NE(Why.find("vary every step"), std::string::npos) << Why;
  EXPECT_NE(whyNotCapturable(GraphScope::Moe, C), "");
  try {
    ScopeGraph G(GraphScope::FullIteration, C);
    FAIL() << "full_iteration with dynamic expert counts was accepted";
  } catch (const GraphRefused &E) {
    EXPECT_NE(std::string(E.what()).find("full_iteration"), std::string::npos);
  }
  // A static capacity fixes the shapes; a dense model has no expert counts.
  C.StaticCapacity = 512;
  EXPECT_EQ(whyNotCapturable(GraphScope::MoePreprocess, C), "");
  EXPECT_EQ(whyNotCapturable(GraphScope::FullIteration, C), "");
  GraphConditions Dense;
  Dense.MoeModel = false;
  Dense.EpSize = 4;
  EXPECT_EQ(whyNotCapturable(GraphScope::FullIteration, Dense), "");
}

TEST(CudaGraphPolicy, VariableLengthAndMambaAreRefused) {
  GraphConditions C;
  C.VariableLength = true;
  std::string Why = whyNotCapturable(GraphScope::Attn, C);
  EXPECT_NE(Why.find("variable-length"), std::string::npos) << Why;
  EXPECT_NE(whyNotCapturable(GraphScope::Mamba, GraphConditions{}), "");
}

} // namespace
