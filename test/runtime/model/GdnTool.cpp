//===- GdnTool.cpp - The runtime's Gated DeltaNet on stdin's weights -------===//
//
// For the differential test against Hugging Face's Qwen3NextGatedDeltaNet
// (test/megatron/gdn.py): reads
//
//   sequences seq_len hidden key_heads value_heads head_dim eps
//   the weights in the runtime's layouts ([in, out]), in GdnWeights order:
//   q k v z b a conv_q conv_k conv_v dt_bias a_log norm out
//   x [sequences * seq_len, hidden], dy [same]
//
// and prints, one per line, the block's output, the gradient of x, and the
// gradients of the weights in the same order, as moert::GatedDeltaNetBlock
// computes them on one rank. Bad input: a message on stderr and exit 1.
//
//===----------------------------------------------------------------------===//
#include "model/GatedDeltaNet.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <vector>

using namespace moert;

int main() {
  int64_t Sequences = 0, SeqLen = 0;
  ModelConfig C;
  ModelConfig::LinearAttention L;
  if (!(std::cin >> Sequences >> SeqLen >> C.Hidden >> L.KeyHeads >> L.ValueHeads >> L.HeadDim >> C.RmsNormEps) ||
      Sequences < 1 || SeqLen < 1 || C.Hidden < 1 || L.KeyHeads < 1 || L.ValueHeads < 1 || L.HeadDim < 1 ||
      L.ValueHeads % L.KeyHeads) {
    std::cerr << "moert-gdn: expected 'sequences seq_len hidden key_heads value_heads head_dim eps' (positive, "
                 "value heads a multiple of key heads)\n";
    return 1;
  }
  L.Interval = 2;
  C.Linear = L;
  const int64_t H = C.Hidden, Kc = L.KeyHeads * L.HeadDim, Vc = L.ValueHeads * L.HeadDim, Hv = L.ValueHeads,
                W = L.ConvKernel, N = Sequences * SeqLen;
  const std::vector<std::vector<int64_t>> Shapes = {{H, Kc}, {H, Kc}, {H, Vc}, {H, Vc}, {H, Hv},     {H, Hv}, {Kc, W},
                                                    {Kc, W}, {Vc, W}, {Hv, 1}, {Hv, 1}, {L.HeadDim}, {Vc, H}};
  std::vector<std::unique_ptr<Parameter>> Params;
  auto read = [&](Tensor &T, const char *What) {
    for (int64_t I = 0; I < T.numel(); ++I)
      if (!(std::cin >> T[I])) {
        std::cerr << "moert-gdn: expected " << T.numel() << " values of " << What << ", read " << I << "\n";
        return false;
      }
    return true;
  };
  for (const std::vector<int64_t> &S : Shapes) {
    auto P = std::make_unique<Parameter>();
    P->Value = Tensor(S);
    P->Grad = Tensor(S);
    if (!read(P->Value, "a weight"))
      return 1;
    Params.push_back(std::move(P));
  }
  Tensor X({N, H}), DY({N, H});
  if (!read(X, "x") || !read(DY, "dy"))
    return 1;
  GdnWeights Wt;
  Parameter **Slots[] = {&Wt.Q,     &Wt.K,     &Wt.V,      &Wt.Z,    &Wt.B,    &Wt.A,  &Wt.ConvQ,
                         &Wt.ConvK, &Wt.ConvV, &Wt.DtBias, &Wt.ALog, &Wt.Norm, &Wt.Out};
  for (size_t I = 0; I < Params.size(); ++I)
    *Slots[I] = Params[I].get();
  std::unique_ptr<Communicator> Tp = createSelfCommunicator("tp");
  GatedDeltaNetBlock Block(C, *Tp);
  GdnSaved S;
  Tensor Y, DX;
  Block.forward(Wt, X, Sequences, S, Y);
  Block.backward(Wt, X, Sequences, S, DY, DX);
  auto print = [](const Tensor &T) {
    for (int64_t I = 0; I < T.numel(); ++I)
      std::printf("%.9g ", T[I]);
    std::printf("\n");
  };
  print(Y);
  print(DX);
  for (const auto &P : Params)
    print(P->Grad);
  return 0;
}
