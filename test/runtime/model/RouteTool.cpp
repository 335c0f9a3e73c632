//===- RouteTool.cpp - The runtime's router on logits from stdin ----------===//
//
// For the differential test against Megatron-Core's
// topk_routing_with_score_function and get_updated_expert_bias
// (test/megatron/router.py): reads
//
//   experts top_k sigmoid pre_softmax groups group_top_k tokens rounds rate
//   <tokens lines of experts logits>
//   <with rounds > 0: one line of experts initial biases>
//
// and prints, per token, its top_k expert ids then their routing weights, as
// moert::Router routes them. With rounds > 0 it does so rounds times, each
// round routing with the expert bias, then updating it from the round's
// routed tokens at rate (the step's update) and printing "bias" and the
// updated biases. Bad input: a message on stderr and exit 1.
//
//===----------------------------------------------------------------------===//
#include "model/Router.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

int main() {
  moert::ModelConfig C;
  int Sigmoid = 0, PreSoftmax = 0;
  int64_t Tokens = 0, Rounds = 0;
  double Rate = 0;
  if (!(std::cin >> C.Experts >> C.TopK >> Sigmoid >> PreSoftmax >> C.RouterGroups >> C.RouterGroupTopK >> Tokens >>
        Rounds >> Rate >> C.TopKScaling) ||
      Rounds < 0 || !(C.TopKScaling > 0) || C.Experts < 1 || C.TopK < 1 || C.TopK > C.Experts || C.RouterGroups < 1 ||
      C.RouterGroupTopK < 1 || C.Experts % C.RouterGroups != 0 || C.RouterGroupTopK > C.RouterGroups || Tokens < 0) {
    std::cerr << "moert-route: expected 'experts top_k sigmoid pre_softmax groups group_top_k tokens rounds rate "
                 "scaling' with top_k <= experts, groups dividing experts, group_top_k <= groups and scaling > 0\n";
    return 1;
  }
  C.SigmoidRouter = Sigmoid != 0;
  C.PreSoftmax = PreSoftmax != 0;
  std::vector<float> Rows(size_t(Tokens * C.Experts));
  for (size_t I = 0; I < Rows.size(); ++I)
    if (!(std::cin >> Rows[I])) {
      std::cerr << "moert-route: expected " << Rows.size() << " logits, read " << I << "\n";
      return 1;
    }
  std::vector<float> Bias(size_t(Rounds > 0 ? C.Experts : 0));
  for (size_t I = 0; I < Bias.size(); ++I)
    if (!(std::cin >> Bias[I])) {
      std::cerr << "moert-route: expected " << Bias.size() << " initial biases, read " << I << "\n";
      return 1;
    }
  moert::Router R(C);
  for (int64_t Round = 0; Round < std::max<int64_t>(Rounds, 1); ++Round) {
    std::vector<float> Scores = Rows;
    std::vector<int32_t> TopIdx;
    std::vector<float> TopW;
    R.route(Scores.data(), Tokens, TopIdx, TopW, Rounds > 0 ? Bias.data() : nullptr);
    for (int64_t T = 0; T < Tokens; ++T) {
      for (int64_t J = 0; J < C.TopK; ++J)
        std::printf("%d ", TopIdx[size_t(T * C.TopK + J)]);
      for (int64_t J = 0; J < C.TopK; ++J)
        std::printf("%.9g%c", double(TopW[size_t(T * C.TopK + J)]), J + 1 == C.TopK ? '\n' : ' ');
    }
    if (Rounds == 0)
      break;
    std::vector<float> Counts(size_t(C.Experts), 0.0f);
    for (int32_t E : TopIdx)
      Counts[size_t(E)] += 1.0f;
    moert::Router::updateBias(Bias.data(), Counts.data(), C.Experts, Rate);
    std::printf("bias");
    for (float B : Bias)
      std::printf(" %.9g", double(B));
    std::printf("\n");
  }
  return 0;
}
