//===- VisionTool.cpp - The runtime's vision tower on stdin's weights -----===//
//
// For the differential test against transformers' Qwen3VLMoeVisionModel
// (test/megatron/vision.py): reads
//
//   depth hidden heads ffn out_hidden patch temporal_patch in_channels merge
//   position_grid deepstack_count deepstack_layer... images (frames rows cols)...
//   every parameter of moert::VisionTower in parameters() order, in its
//   layout ([in, out] for the linears)
//   patches [patches, patch_dim], d_tokens, then each deepstack feature's gradient
//
// and prints, one per line: the merged tokens, each deepstack feature, the
// patches' gradient, and every parameter's gradient in the same order.
// Bad input: a message on stderr and exit 1.
//
//===----------------------------------------------------------------------===//
#include "model/VisionTower.h"

#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <vector>

using namespace moert;

namespace {

bool read(Tensor &T, const char *What) {
  for (int64_t I = 0; I < T.numel(); ++I)
    if (!(std::cin >> T[I])) {
      std::cerr << "moert-vision: expected " << T.numel() << " values of " << What << ", read " << I << "\n";
      return false;
    }
  return true;
}

void print(const Tensor &T) {
  for (int64_t I = 0; I < T.numel(); ++I)
    std::printf(I ? " %.9g" : "%.9g", double(T[I]));
  std::printf("\n");
}

} // namespace

int main() {
  VisionConfig C;
  int64_t Deepstack = 0, Images = 0;
  if (!(std::cin >> C.Depth >> C.Hidden >> C.Heads >> C.FfnHidden >> C.OutHidden >> C.PatchSize >> C.TemporalPatch >>
        C.InChannels >> C.MergeSize >> C.PositionGrid >> Deepstack) ||
      Deepstack < 0) {
    std::cerr << "moert-vision: expected 'depth hidden heads ffn out_hidden patch temporal_patch in_channels merge "
                 "position_grid deepstack_count'\n";
    return 1;
  }
  C.DeepstackLayers.resize(size_t(Deepstack));
  for (int64_t &L : C.DeepstackLayers)
    if (!(std::cin >> L)) {
      std::cerr << "moert-vision: expected the deepstack layers\n";
      return 1;
    }
  std::vector<ImageGrid> Grids;
  if (!(std::cin >> Images) || Images < 1) {
    std::cerr << "moert-vision: expected the number of images\n";
    return 1;
  }
  int64_t Patches = 0;
  for (int64_t I = 0; I < Images; ++I) {
    ImageGrid G;
    if (!(std::cin >> G.Frames >> G.Rows >> G.Cols)) {
      std::cerr << "moert-vision: expected 'frames rows cols' per image\n";
      return 1;
    }
    Grids.push_back(G);
    Patches += G.patches();
  }
  try {
    VisionTower Tower(C, 0);
    for (Parameter *P : Tower.parameters())
      if (!read(P->Value, P->Name.c_str()))
        return 1;
    const int64_t Tokens = Patches / C.mergeUnit();
    Tensor X({Patches, C.patchDim()}), DTokens({Tokens, C.OutHidden});
    if (!read(X, "patches") || !read(DTokens, "d_tokens"))
      return 1;
    std::vector<Tensor> DDeep(size_t(Deepstack), Tensor({Tokens, C.OutHidden}));
    for (Tensor &D : DDeep)
      if (!read(D, "a deepstack gradient"))
        return 1;
    VisionSaved S;
    VisionOutput Out = Tower.forward(X, Grids, S);
    print(Out.Tokens);
    for (const Tensor &F : Out.Deepstack)
      print(F);
    print(Tower.backward(S, DTokens, DDeep));
    for (Parameter *P : Tower.parameters())
      print(P->Grad);
  } catch (const std::exception &E) {
    std::cerr << "moert-vision: " << E.what() << "\n";
    return 1;
  }
  return 0;
}
