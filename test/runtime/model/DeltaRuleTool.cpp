//===- DeltaRuleTool.cpp - The runtime's gated delta rule on stdin's heads ===//
//
// For the differential test against Megatron-Core's
// torch_chunk_gated_delta_rule (test/megatron/gdn.py): reads
//
//   tokens heads dk dv
//   q [tokens x heads x dk], k [same], v [tokens x heads x dv],
//   g [tokens x heads], beta [tokens x heads], do [tokens x heads x dv]
//
// (whitespace-separated, token-major) and prints six lines: o, then the
// gradients of q, k, v, g and beta for the output gradient do, as
// moert::gatedDeltaRuleForward / Backward compute them head by head in place.
// Bad input: a message on stderr and exit 1.
//
//===----------------------------------------------------------------------===//
#include "model/GatedDeltaRule.h"

#include <cstdio>
#include <iostream>
#include <vector>

int main() {
  int64_t Tokens = 0, Heads = 0, Dk = 0, Dv = 0;
  if (!(std::cin >> Tokens >> Heads >> Dk >> Dv) || Tokens < 1 || Heads < 1 || Dk < 1 || Dv < 1) {
    std::cerr << "moert-delta-rule: expected 'tokens heads dk dv', each at least 1\n";
    return 1;
  }
  auto read = [&](int64_t N, const char *What, std::vector<float> &Out) {
    Out.resize(size_t(N));
    for (int64_t I = 0; I < N; ++I)
      if (!(std::cin >> Out[size_t(I)])) {
        std::cerr << "moert-delta-rule: expected " << N << " values of " << What << ", read " << I << "\n";
        return false;
      }
    return true;
  };
  std::vector<float> Q, K, V, G, Beta, DO;
  if (!read(Tokens * Heads * Dk, "q", Q) || !read(Tokens * Heads * Dk, "k", K) || !read(Tokens * Heads * Dv, "v", V) ||
      !read(Tokens * Heads, "g", G) || !read(Tokens * Heads, "beta", Beta) || !read(Tokens * Heads * Dv, "do", DO))
    return 1;
  std::vector<float> O(V.size()), DQ(Q.size()), DK(K.size()), DV(V.size()), DG(G.size()), DB(Beta.size());
  moert::DeltaRuleHead H;
  H.Tokens = Tokens;
  H.Dk = Dk;
  H.Dv = Dv;
  H.QkStride = Heads * Dk;
  H.VStride = Heads * Dv;
  H.GStride = Heads;
  for (int64_t Hd = 0; Hd < Heads; ++Hd) {
    const int64_t Qk = Hd * Dk, Vo = Hd * Dv;
    moert::gatedDeltaRuleForward(H, Q.data() + Qk, K.data() + Qk, V.data() + Vo, G.data() + Hd, Beta.data() + Hd,
                                 O.data() + Vo);
    moert::gatedDeltaRuleBackward(H, Q.data() + Qk, K.data() + Qk, V.data() + Vo, G.data() + Hd, Beta.data() + Hd,
                                  DO.data() + Vo, DQ.data() + Qk, DK.data() + Qk, DV.data() + Vo, DG.data() + Hd,
                                  DB.data() + Hd);
  }
  for (const std::vector<float> *Out : {&O, &DQ, &DK, &DV, &DG, &DB}) {
    for (float X : *Out)
      std::printf("%.9g ", X);
    std::printf("\n");
  }
  return 0;
}
