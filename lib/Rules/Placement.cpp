//===- Placement.cpp - Where the process groups land ------------------------===//
//
// With Megatron-Core's rank order the TP group is the TP consecutive ranks
// and the expert group the ETP x EP consecutive ranks of the expert grid
// (lib/Layout/ProcessGrid.h); consecutive ranks share a node and then an
// NVLink domain.
//
//===----------------------------------------------------------------------===//
#include "moec/Rules/RuleEngine.h"
#include "llvm/ADT/StringExtras.h"
#include <fmt/format.h>

using namespace moec;

namespace moec::rules {

void check_tp_outside_nvlink(RuleContext &C) {
  const Recipe &R = C.R;
  int64_t Domain = R.Gpu.NVLinkDomain, TP = R.Parallel.TP;
  if (TP <= 1 || Domain <= 0 || (TP <= Domain && Domain % TP == 0))
    return;
  auto B = C.report(diag::tp_outside_nvlink, "parallel.tp", TP, Domain, R.Gpu.Name);
  // The largest TP inside the domain that the attention heads still divide.
  for (int64_t T = std::min(TP, Domain); T > 1; --T) {
    Recipe V = R;
    V.Parallel.TP = T;
    if (Domain % T == 0 && C.variantAcceptable(V)) {
      C.fixit(B, "parallel.tp", std::to_string(T));
      return;
    }
  }
}

void check_ep_outside_nvlink(RuleContext &C) {
  const Recipe &R = C.R;
  int64_t Span = R.Parallel.EP * R.Parallel.ETP, Domain = R.Gpu.NVLinkDomain;
  if (!C.isMoE() || Span <= 1 || Domain <= 0 || Span <= Domain)
    return;
  auto B = C.report(diag::ep_outside_nvlink, "parallel.ep", Span, Domain, R.Gpu.Name);
  // The largest EP whose all-to-all stays in the domain and still divides the experts.
  for (int64_t E = Domain / std::max<int64_t>(R.Parallel.ETP, 1); E > 1; --E) {
    Recipe V = R;
    V.Parallel.EP = E;
    if (C.variantAcceptable(V)) {
      C.fixit(B, "parallel.ep", std::to_string(E));
      return;
    }
  }
}

void check_cp_ring_across_domains(RuleContext &C) {
  const Recipe &R = C.R;
  const ParallelConfig &P = R.Parallel;
  int64_t Domain = R.Gpu.NVLinkDomain, TP = std::max<int64_t>(P.TP, 1), CP = P.CP;
  if (P.CpCommKind != CpComm::P2P || CP <= 1 || Domain <= 0 || TP * CP <= Domain)
    return;
  // The largest inner (all-to-all) size that stays in the domain, divides CP
  // and the query and key/value heads of a TP rank (cp-a2a-heads), and still
  // leaves a ring across domains.
  int64_t HeadsPerRank = R.Model.Heads / TP;
  int64_t KvHeadsPerRank = std::max<int64_t>(R.Model.KvHeads / TP, 1);
  for (int64_t Inner = std::min(CP / 2, Domain / TP); Inner > 1; --Inner) {
    if (CP % Inner != 0 || HeadsPerRank % Inner != 0 || KvHeadsPerRank % Inner != 0)
      continue;
    int64_t Domains = (TP * CP + Domain - 1) / Domain;
    C.report(diag::cp_ring_across_domains, "parallel.cp", TP * CP, Domains, CP - 1, Inner, CP / Inner,
             fmt::format("{} ring steps", CP / Inner - 1));
    return;
  }
}

static std::string gigabytes(double Bytes) { return fmt::format("{:.1f} GB", Bytes / 1e9); }

static std::string breakdown(const MemoryBreakdown &B) {
  std::vector<std::string> Parts;
  for (auto &[Name, Bytes] : B.items())
    if (Bytes > 0)
      Parts.push_back(fmt::format("{} {}", Name, gigabytes(Bytes)));
  return llvm::join(Parts, ", ");
}

void check_memory_exceeds_hbm(RuleContext &C) {
  const MemoryEstimate *M = C.memory();
  if (!M || M->fits() || M->PerStage.empty())
    return;
  auto B = C.report(diag::memory_exceeds_hbm, "cluster.gpu", gigabytes(M->PeakBytes), M->PeakStage,
                    gigabytes(M->CapacityBytes), C.R.Gpu.Name);
  B.note(diag::note_memory_breakdown, llvm::SMRange(), breakdown(M->PerStage[M->PeakStage]));
}

void check_memory_headroom(RuleContext &C) {
  const MemoryEstimate *M = C.memory();
  if (!M || !M->fits() || M->PerStage.empty() || M->PeakBytes <= 0.9 * M->CapacityBytes)
    return;
  auto B = C.report(diag::memory_headroom, "cluster.gpu", gigabytes(M->PeakBytes), M->PeakStage,
                    int(100 * M->PeakBytes / M->CapacityBytes), gigabytes(M->CapacityBytes), C.R.Gpu.Name);
  B.note(diag::note_memory_breakdown, llvm::SMRange(), breakdown(M->PerStage[M->PeakStage]));
}

} // namespace moec::rules
