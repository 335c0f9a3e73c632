//===- PipelineLayout.cpp -------------------------------------------------===//
#include "moec/Layout/PipelineLayout.h"

#include "llvm/ADT/StringExtras.h"
#include <fmt/format.h>

using namespace moec;

int64_t PipelineLayout::decoderLayers() const {
  int64_t N = 0;
  for (const LayoutStage &S : Stages)
    N += S.DecoderLayers;
  return N;
}

int64_t PipelineLayout::mtpLayers() const {
  int64_t N = 0;
  for (const LayoutStage &S : Stages)
    N += S.MtpLayers;
  return N;
}

namespace {
/// Recursive descent over `item*` with `item := (symbol | '(' items ')') ('*' N)?`,
/// expanding into a flat list of symbols.
class LayoutParser {
public:
  LayoutParser(llvm::StringRef Text, size_t MaxItems) : Text(Text), MaxItems(MaxItems) {}

  bool run(std::string &Flat, LayoutError &Err) {
    if (!sequence(Flat, Err, 0))
      return false;
    if (Pos != Text.size())
      return fail(Err, Pos, "unexpected ')' in pipeline layout");
    return true;
  }

private:
  bool fail(LayoutError &Err, size_t At, std::string Message, size_t Length = 1) {
    Err.Offset = std::min(At, Text.size());
    Err.Length = Length;
    Err.Message = std::move(Message);
    return false;
  }

  void skipSpaces() {
    while (Pos < Text.size() && llvm::isSpace(Text[Pos]))
      ++Pos;
  }

  bool repeatCount(int64_t &N, LayoutError &Err) {
    N = 1;
    skipSpaces();
    if (Pos >= Text.size() || Text[Pos] != '*')
      return true;
    size_t Star = Pos++;
    skipSpaces();
    size_t Start = Pos;
    while (Pos < Text.size() && llvm::isDigit(Text[Pos]))
      ++Pos;
    if (Start == Pos)
      return fail(Err, Star, "expected a repeat count after '*'");
    if (Pos - Start > 9 || Text.substr(Start, Pos - Start).getAsInteger(10, N) || N < 1)
      return fail(Err, Start, "repeat count must be between 1 and 999999999", Pos - Start);
    return true;
  }

  bool sequence(std::string &Out, LayoutError &Err, unsigned Depth) {
    if (Depth > 32)
      return fail(Err, Pos, "pipeline layout nests parentheses more than 32 deep");
    while (true) {
      skipSpaces();
      if (Pos >= Text.size() || Text[Pos] == ')')
        return true;
      std::string Item;
      size_t ItemStart = Pos;
      char C = Text[Pos];
      if (C == '(') {
        ++Pos;
        if (!sequence(Item, Err, Depth + 1))
          return false;
        if (Pos >= Text.size())
          return fail(Err, ItemStart, "'(' is not closed in pipeline layout");
        ++Pos; // ')'
      } else if (llvm::StringRef("EtmL|").contains(C)) {
        Item.push_back(C);
        ++Pos;
      } else {
        return fail(Err, Pos, fmt::format("unexpected '{}' in pipeline layout; expected E, t, m, L, |, '(' or ')'", C));
      }
      int64_t N;
      if (!repeatCount(N, Err))
        return false;
      if (Item.size() * uint64_t(N) + Out.size() > MaxItems)
        return fail(Err, ItemStart, fmt::format("pipeline layout expands past {} items", MaxItems));
      for (int64_t I = 0; I < N; ++I)
        Out += Item;
    }
  }

  llvm::StringRef Text;
  size_t MaxItems;
  size_t Pos = 0;
};
} // namespace

bool moec::parsePipelineLayout(llvm::StringRef Text, PipelineLayout &Out, LayoutError &Err, size_t MaxItems) {
  std::string Flat;
  LayoutParser P(Text, MaxItems);
  if (!P.run(Flat, Err))
    return false;
  Out.Stages.assign(1, LayoutStage());
  for (size_t I = 0; I < Flat.size(); ++I) {
    LayoutStage &S = Out.Stages.back();
    switch (Flat[I]) {
    case '|':
      Out.Stages.push_back(LayoutStage());
      Out.Stages.back().Index = I + 1;
      break;
    case 'E':
      S.Embedding = true;
      break;
    case 'L':
      S.Loss = true;
      break;
    case 't':
      ++S.DecoderLayers;
      break;
    case 'm':
      ++S.MtpLayers;
      break;
    }
  }
  return true;
}

std::string moec::balancedPipelineLayout(int64_t DecoderLayers, int64_t MtpLayers, int64_t Stages) {
  if (Stages < 1 || DecoderLayers < 0 || MtpLayers < 0)
    return "";
  int64_t Units = DecoderLayers + MtpLayers + 2; // embedding and loss count as a layer each
  int64_t Base = Units / Stages, Extra = Units % Stages;
  if (Base < 1)
    return "";
  // The first stages take the extra units, but the last stage must hold the
  // MTP layers and the loss.
  std::vector<std::string> Out;
  int64_t Left = DecoderLayers;
  for (int64_t I = 0; I < Stages; ++I) {
    int64_t Capacity = Base + (I < Extra ? 1 : 0);
    std::string S;
    if (I == 0) {
      S += 'E';
      --Capacity;
    }
    int64_t Tail = I == Stages - 1 ? MtpLayers + 1 : 0;
    int64_t Take = I == Stages - 1 ? Left : std::min(Left, std::max<int64_t>(0, Capacity - Tail));
    if (I == Stages - 1 && Take + Tail > Capacity + 1 && Stages > 1)
      return ""; // the tail does not fit: no balanced layout
    S.append(size_t(Take), 't');
    Left -= Take;
    if (I == Stages - 1) {
      S.append(size_t(MtpLayers), 'm');
      S += 'L';
    }
    Out.push_back(S);
  }
  // Compress runs of identical stages (not the last) as (s|)*n.
  std::string Result;
  for (size_t I = 0; I + 1 < Out.size();) {
    size_t J = I;
    while (J + 1 < Out.size() - 1 + 0 && Out[J + 1] == Out[I] && J + 1 < Out.size() - 1)
      ++J;
    size_t Run = J - I + 1;
    if (Run > 1)
      Result += "(" + Out[I] + "|)*" + std::to_string(Run);
    else
      Result += Out[I] + "|";
    I = J + 1;
  }
  Result += Out.back();
  return Result;
}
