//===- RouteTool.cpp - The runtime's router on logits from stdin ----------===//
//
// For the differential test against Megatron-Core's
// topk_routing_with_score_function (test/megatron/router.py): reads
//
//   experts top_k sigmoid pre_softmax groups group_top_k tokens
//   <tokens lines of experts logits>
//
// and prints, per token, its top_k expert ids then their routing weights, as
// moert::Router routes them. Bad input: a message on stderr and exit 1.
//
//===----------------------------------------------------------------------===//
#include "model/Router.h"

#include <cstdio>
#include <iostream>

int main() {
  moert::ModelConfig C;
  int Sigmoid = 0, PreSoftmax = 0;
  int64_t Tokens = 0;
  if (!(std::cin >> C.Experts >> C.TopK >> Sigmoid >> PreSoftmax >> C.RouterGroups >> C.RouterGroupTopK >> Tokens) ||
      C.Experts < 1 || C.TopK < 1 || C.TopK > C.Experts || C.RouterGroups < 1 || C.RouterGroupTopK < 1 ||
      C.Experts % C.RouterGroups != 0 || C.RouterGroupTopK > C.RouterGroups || Tokens < 0) {
    std::cerr << "moert-route: expected 'experts top_k sigmoid pre_softmax groups group_top_k tokens' with "
                 "top_k <= experts, groups dividing experts and group_top_k <= groups\n";
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
  std::vector<int32_t> TopIdx;
  std::vector<float> TopW;
  moert::Router(C).route(Rows.data(), Tokens, TopIdx, TopW);
  for (int64_t T = 0; T < Tokens; ++T) {
    for (int64_t J = 0; J < C.TopK; ++J)
      std::printf("%d ", TopIdx[size_t(T * C.TopK + J)]);
    for (int64_t J = 0; J < C.TopK; ++J)
      std::printf("%.9g%c", double(TopW[size_t(T * C.TopK + J)]), J + 1 == C.TopK ? '\n' : ' ');
  }
  return 0;
}
