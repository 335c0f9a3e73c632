//===- MropeTool.cpp - The runtime's multimodal RoPE on stdin's sequence --===//
//
// For the differential test against transformers' Qwen3-VL get_rope_index and
// interleaved MRoPE (test/megatron/mrope.py): reads
//
//   head_dim theta section_t section_h section_w merge_size image_token
//   token_count tokens...  image_count (frames rows cols)...  heads
//   x [token_count, heads x head_dim]
//
// and prints, one per line: the time, row and column positions, x rotated
// by them, and that rotated back. Bad input: a message on stderr, exit 1.
//
//===----------------------------------------------------------------------===//
#include "model/ModelOps.h"

#include <cstdio>
#include <iostream>

using namespace moert;

int main() {
  int64_t HeadDim = 0, Merge = 0, Count = 0, Images = 0, Heads = 0;
  double Theta = 0;
  std::array<int64_t, 3> Sections{};
  int32_t ImageToken = 0;
  if (!(std::cin >> HeadDim >> Theta >> Sections[0] >> Sections[1] >> Sections[2] >> Merge >> ImageToken >> Count) ||
      HeadDim < 2 || HeadDim % 2 || Count < 1 || Merge < 1) {
    std::cerr << "moert-mrope: expected 'head_dim theta section_t section_h section_w merge image_token count'\n";
    return 1;
  }
  std::vector<int32_t> Tokens(static_cast<size_t>(Count));
  for (int32_t &T : Tokens)
    if (!(std::cin >> T)) {
      std::cerr << "moert-mrope: expected " << Count << " tokens\n";
      return 1;
    }
  std::vector<std::array<int64_t, 3>> Grids;
  if (!(std::cin >> Images))
    return 1;
  for (int64_t I = 0; I < Images; ++I) {
    std::array<int64_t, 3> G{};
    if (!(std::cin >> G[0] >> G[1] >> G[2]))
      return 1;
    Grids.push_back(G);
  }
  if (!(std::cin >> Heads) || Heads < 1)
    return 1;
  Tensor X({Count, Heads * HeadDim});
  for (int64_t I = 0; I < X.numel(); ++I)
    if (!(std::cin >> X[I])) {
      std::cerr << "moert-mrope: expected " << X.numel() << " values of x\n";
      return 1;
    }
  std::string Error;
  MultimodalPositions P = multimodalPositions(Tokens, ImageToken, Grids, Merge, Error);
  if (!Error.empty()) {
    std::cerr << "moert-mrope: " << Error << "\n";
    return 1;
  }
  for (const auto &Axis : P.Axes) {
    for (size_t I = 0; I < Axis.size(); ++I)
      std::printf(I ? " %lld" : "%lld", (long long)Axis[I]);
    std::printf("\n");
  }
  auto Print = [](const Tensor &T) {
    for (int64_t I = 0; I < T.numel(); ++I)
      std::printf(I ? " %.9g" : "%.9g", double(T[I]));
    std::printf("\n");
  };
  applyMultimodalRope(X, HeadDim, P, Theta, Sections, false);
  Print(X);
  applyMultimodalRope(X, HeadDim, P, Theta, Sections, true);
  Print(X);
  return 0;
}
