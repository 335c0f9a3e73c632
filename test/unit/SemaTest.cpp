//===- SemaTest.cpp - extends, provenance, derived values, sweeps, catalog -===//
#include "moec/Sema/Sema.h"
#include "moec/Catalog/Catalog.h"
#include "moec/Diag/DiagnosticEngine.h"
#include "moec/Sema/Schema.h"
#include "moec/Syntax/Parser.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include <gtest/gtest.h>
#include <map>
#include <set>

using namespace moec;
using llvm::StringRef;

namespace {

/// One `moec check` of an in-memory file: parse, analyze, finish.
class Compilation {
public:
  explicit Compilation(StringRef Text, DiagnosticOptions Opts = {}) : Diags(SM, Opts), S(Diags) {
    S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(Text, "test.moe"));
    Recipes = S.analyze();
    Final = Diags.finish();
  }
  Compilation(const Compilation &) = delete;

  const Recipe *recipe(StringRef PointName) const {
    for (const Recipe &R : Recipes)
      if (R.PointName == PointName)
        return &R;
    return nullptr;
  }
  std::vector<std::string> pointNames() const {
    std::vector<std::string> Names;
    for (const Recipe &R : Recipes)
      Names.push_back(R.PointName);
    return Names;
  }
  unsigned count(StringRef Id) const {
    unsigned N = 0;
    for (const Diagnostic &D : Final)
      if (getDiagInfo(D.ID).Id == Id)
        ++N;
    return N;
  }
  const Diagnostic *find(StringRef Id) const {
    for (const Diagnostic &D : Final)
      if (getDiagInfo(D.ID).Id == Id)
        return &D;
    return nullptr;
  }
  /// All diagnostics as "line:col: [id] message", for failure messages.
  std::string summary() const {
    std::string Out;
    for (const Diagnostic &D : Final) {
      Out += D.Range.Start.isValid() ? std::to_string(line(D.Range)) : std::string("?");
      Out += ": [" + getDiagInfo(D.ID).Id.str() + "] " + D.Message + "\n";
    }
    return Out.empty() ? "(no diagnostics)" : Out;
  }
  std::string text(llvm::SMRange R) const {
    if (!R.Start.isValid() || !R.End.isValid())
      return "<invalid>";
    return std::string(R.Start.getPointer(), R.End.getPointer());
  }
  unsigned line(llvm::SMRange R) const { return SM.getLineAndColumn(R.Start).first; }
  bool inBuffer(llvm::SMRange R, StringRef BufferName) const {
    unsigned ID = SM.FindBufferContainingLoc(R.Start);
    return ID && SM.getMemoryBuffer(ID)->getBufferIdentifier() == BufferName;
  }
  /// The source range of the definition called Name in the main file.
  llvm::SMRange definitionRange(StringRef Name) const {
    if (const ast::File *F = S.mainFile())
      for (const ast::Definition &D : F->Definitions)
        if (D.Name == Name)
          return D.Range;
    return {};
  }
  bool within(llvm::SMRange Inner, llvm::SMRange Outer) const {
    return Inner.Start.isValid() && Outer.Start.isValid() && Outer.Start.getPointer() <= Inner.Start.getPointer() &&
           Inner.End.getPointer() <= Outer.End.getPointer();
  }

  llvm::SourceMgr SM;
  DiagnosticEngine Diags;
  Sema S;
  std::vector<Recipe> Recipes;
  std::vector<Diagnostic> Final;
};

std::vector<std::string> chain(const Provenance &P) { return std::vector<std::string>(P.Chain.begin(), P.Chain.end()); }
using Strings = std::vector<std::string>;

// A valid DeepSeek-V3 recipe on 256 H100s: dp = 256 / (2*8*4) = 4, edp = 256 / (1*16*4) = 4.
const char *BaseAndChild = R"moe(recipe base {
  model      = deepseek_v3
  cluster    { gpu = h100_sxm; nodes = 32 }
  seq_len    = 128K
  batch      { micro = 1; global = 256 }
  parallel   { tp = 2; cp = 8; ep = 16; pp = 4 }
  precision  = fp8.blockwise
}

recipe child extends base {
  parallel { cp = 32 }
}
)moe";

} // namespace

//===----------------------------------------------------------------------===//
// extends and provenance
//===----------------------------------------------------------------------===//

TEST(SemaExtends, SectionsMergeFieldByField) {
  Compilation C(BaseAndChild);
  ASSERT_TRUE(C.Final.empty()) << C.summary();
  ASSERT_EQ(C.Recipes.size(), 2u);
  const Recipe *Base = C.recipe("base");
  const Recipe *Child = C.recipe("child");
  ASSERT_TRUE(Base && Child);
  EXPECT_EQ(Child->Base, "base");
  EXPECT_EQ(Base->Base, "");
  // The child changed only cp; tp, ep and pp come from the base.
  EXPECT_EQ(Child->Parallel.CP, 32);
  EXPECT_EQ(Child->Parallel.TP, 2);
  EXPECT_EQ(Child->Parallel.EP, 16);
  EXPECT_EQ(Child->Parallel.PP, 4);
  EXPECT_EQ(Base->Parallel.CP, 8);
  // Everything outside `parallel` is inherited as well.
  EXPECT_EQ(Child->Model.Name, "deepseek_v3");
  EXPECT_EQ(Child->Gpu.Name, "h100_sxm");
  EXPECT_EQ(Child->SeqLen, 131072);
  EXPECT_EQ(Child->GlobalBatch, 256);
  EXPECT_EQ(Child->Prec, Precision::FP8Blockwise);
  // Derived values follow the merged layout.
  EXPECT_EQ(Base->Parallel.DP, 4);
  EXPECT_EQ(Child->Parallel.DP, 1); // 256 / (2*32*4)
  EXPECT_EQ(Child->Parallel.EDP, 4);
}

TEST(SemaExtends, DottedPathInChildMergesToo) {
  Compilation C(std::string(BaseAndChild) + "recipe dotted extends base { parallel.pp = 8; seq_len = 64K }\n");
  ASSERT_TRUE(C.Final.empty()) << C.summary();
  const Recipe *R = C.recipe("dotted");
  ASSERT_TRUE(R);
  EXPECT_EQ(R->Parallel.PP, 8);
  EXPECT_EQ(R->Parallel.TP, 2);
  EXPECT_EQ(R->Parallel.CP, 8);
  EXPECT_EQ(R->SeqLen, 65536);
}

TEST(SemaProvenance, InheritedValuePointsIntoBase) {
  Compilation C(BaseAndChild);
  const Recipe *Child = C.recipe("child");
  ASSERT_TRUE(Child) << C.summary();
  const Provenance &TP = Child->origin("parallel.tp");
  EXPECT_FALSE(TP.IsDefault);
  EXPECT_EQ(chain(TP), (Strings{"base", "child"}));
  EXPECT_EQ(C.text(TP.Range), "2");
  EXPECT_EQ(C.line(TP.Range), 6u);
  EXPECT_TRUE(C.within(TP.Range, C.definitionRange("base")));
  EXPECT_FALSE(C.within(TP.Range, C.definitionRange("child")));

  const Provenance &Model = Child->origin("model");
  EXPECT_EQ(chain(Model), (Strings{"base", "child"}));
  EXPECT_EQ(C.text(Model.Range), "deepseek_v3");
  EXPECT_TRUE(C.within(Model.Range, C.definitionRange("base")));
}

TEST(SemaProvenance, OwnValueHasChainOfOne) {
  Compilation C(BaseAndChild);
  const Recipe *Child = C.recipe("child");
  ASSERT_TRUE(Child) << C.summary();
  const Provenance &CP = Child->origin("parallel.cp");
  EXPECT_FALSE(CP.IsDefault);
  EXPECT_EQ(chain(CP), (Strings{"child"}));
  EXPECT_EQ(C.text(CP.Range), "32");
  EXPECT_EQ(C.line(CP.Range), 11u);
  EXPECT_TRUE(C.within(CP.Range, C.definitionRange("child")));

  // The base's own record of the same field is unaffected by the child.
  const Recipe *Base = C.recipe("base");
  ASSERT_TRUE(Base);
  EXPECT_EQ(chain(Base->origin("parallel.cp")), (Strings{"base"}));
  EXPECT_EQ(C.text(Base->origin("parallel.cp").Range), "8");
}

TEST(SemaProvenance, DefaultsAreMarked) {
  Compilation C(BaseAndChild);
  const Recipe *Child = C.recipe("child");
  ASSERT_TRUE(Child) << C.summary();
  for (StringRef Path : {"parallel.etp", "parallel.vpp", "dispatcher", "recompute", "cuda_graph", "offload.optimizer",
                         "data.source", "parallel.dp", "parallel.edp"}) {
    const Provenance &P = Child->origin(Path);
    EXPECT_TRUE(P.IsDefault) << Path.str();
  }
  for (StringRef Path :
       {"model", "cluster.gpu", "cluster.nodes", "seq_len", "batch.micro", "parallel.tp", "parallel.cp", "precision"})
    EXPECT_FALSE(Child->origin(Path).IsDefault) << Path.str();
  EXPECT_EQ(Child->Parallel.ETP, 1);
  EXPECT_EQ(Child->Dispatch, Dispatcher::AllToAll);
  EXPECT_EQ(Child->Recompute.Kind, RecomputeKind::None);
  EXPECT_TRUE(Child->CudaGraph.empty());
  EXPECT_EQ(Child->OffloadOptimizer, 0.0);
  EXPECT_EQ(Child->Data, DataSourceKind::Mock);
  // parallel.sp is derived from tp > 1.
  EXPECT_TRUE(Child->Parallel.SequenceParallel);
  // Every recipe field has an origin entry.
  for (const FieldSpec &F : schemaFor(ast::DefKind::Recipe))
    EXPECT_TRUE(Child->Origins.count(F.Path)) << F.Path.str();
  // Asking for something that is not a field gives an empty provenance, not a crash.
  EXPECT_TRUE(Child->origin("no.such.field").Chain.empty());
}

TEST(SemaProvenance, ThreeLevelChain) {
  Compilation C(R"moe(recipe a {
  model = qwen3_30b_a3b
  cluster { gpu = h100_sxm; nodes = 4 }
  seq_len = 32K
  batch { micro = 1; global = 64 }
  parallel { tp = 1; cp = 2; ep = 8; pp = 2 }
}
recipe b extends a {
  parallel { pp = 4 }
  dispatcher = deepep
}
recipe c extends b {
  seq_len = 16K
}
)moe");
  ASSERT_TRUE(C.Final.empty()) << C.summary();
  const Recipe *R = C.recipe("c");
  ASSERT_TRUE(R);
  EXPECT_EQ(R->Base, "b");
  EXPECT_EQ(chain(R->origin("parallel.cp")), (Strings{"a", "b", "c"}));
  EXPECT_EQ(C.line(R->origin("parallel.cp").Range), 6u);
  EXPECT_EQ(chain(R->origin("model")), (Strings{"a", "b", "c"}));
  EXPECT_EQ(chain(R->origin("parallel.pp")), (Strings{"b", "c"}));
  EXPECT_EQ(C.line(R->origin("parallel.pp").Range), 9u);
  EXPECT_EQ(chain(R->origin("dispatcher")), (Strings{"b", "c"}));
  EXPECT_EQ(chain(R->origin("seq_len")), (Strings{"c"}));
  EXPECT_EQ(C.text(R->origin("seq_len").Range), "16K");
  EXPECT_EQ(R->SeqLen, 16384);
  EXPECT_EQ(R->Parallel.PP, 4);
  EXPECT_EQ(R->Parallel.CP, 2);
  EXPECT_EQ(R->Dispatch, Dispatcher::DeepEP);
  EXPECT_EQ(R->WorldSize, 32);
  EXPECT_EQ(R->Parallel.DP, 4);  // 32 / (1*2*4)
  EXPECT_EQ(R->Parallel.EDP, 1); // 32 / (1*8*4)
  const Recipe *B = C.recipe("b");
  ASSERT_TRUE(B);
  EXPECT_EQ(chain(B->origin("parallel.cp")), (Strings{"a", "b"}));
  EXPECT_EQ(B->SeqLen, 32768);
}

TEST(SemaExtends, ErrorsInInheritance) {
  {
    Compilation C(R"moe(recipe a extends b { seq_len = 1 }
recipe b extends a { seq_len = 2 }
)moe");
    EXPECT_GE(C.count("extends-cycle"), 1u) << C.summary();
    EXPECT_TRUE(C.Recipes.empty());
  }
  {
    Compilation C("recipe a extends a { seq_len = 1 }\n");
    EXPECT_GE(C.count("extends-cycle") + C.count("unknown-name"), 1u) << C.summary();
  }
  {
    Compilation C("recipe a extends nothing_like_this { seq_len = 1 }\n");
    EXPECT_EQ(C.count("unknown-name"), 1u) << C.summary();
  }
  {
    Compilation C("recipe a extends h100_sxm { seq_len = 1 }\n");
    EXPECT_EQ(C.count("extends-kind-mismatch"), 1u) << C.summary();
  }
}

//===----------------------------------------------------------------------===//
// Derived values: world size, dp, edp
//===----------------------------------------------------------------------===//

namespace {
std::string recipeWith(StringRef Model, StringRef Cluster, StringRef Parallel, StringRef Extra = "") {
  return ("recipe r {\n  model = " + Model + "\n  " + Cluster +
          "\n  seq_len = 4K\n  batch { micro = 1; global = 1024 }\n  parallel { " + Parallel + " }\n" + Extra + "}\n")
      .str();
}
} // namespace

TEST(SemaDerived, NodesTimesGpusPerNode) {
  struct Case {
    const char *Cluster, *Parallel;
    int64_t World, Nodes, DP, EDP;
  } Cases[] = {
      {"cluster { gpu = h100_sxm; nodes = 32 }", "tp = 1; cp = 32; ep = 32; pp = 8", 256, 32, 1, 1},
      {"cluster { gpu = h100_sxm; nodes = 64 }", "tp = 1; cp = 64; ep = 32; pp = 8", 512, 64, 1, 2},
      {"cluster { gpu = h200_sxm; nodes = 16 }", "tp = 2; cp = 4; ep = 8; etp = 1; pp = 4", 128, 16, 4, 4},
      {"cluster { gpu = gb200_nvl72; nodes = 32 }", "tp = 4; cp = 2; ep = 64; pp = 2", 128, 32, 8, 1},
      {"cluster { gpu = b200; nodes = 1 }", "", 8, 1, 8, 8},
      {"cluster { gpu = b200; nodes = 8 }", "tp = 2; ep = 8; etp = 2; pp = 2", 64, 8, 16, 2},
  };
  for (const Case &K : Cases) {
    Compilation C(recipeWith("qwen3_30b_a3b", K.Cluster, K.Parallel));
    SCOPED_TRACE(std::string(K.Cluster) + " / " + K.Parallel);
    ASSERT_TRUE(C.Final.empty()) << C.summary();
    const Recipe *R = C.recipe("r");
    ASSERT_TRUE(R);
    EXPECT_EQ(R->WorldSize, K.World);
    EXPECT_EQ(R->Nodes, K.Nodes);
    EXPECT_EQ(R->Parallel.DP, K.DP);
    EXPECT_EQ(R->Parallel.EDP, K.EDP);
  }
}

TEST(SemaDerived, GpusStatedDirectly) {
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = gb200_nvl72; gpus = 72 }", "tp = 2; cp = 4; ep = 8"));
    ASSERT_TRUE(C.Final.empty()) << C.summary();
    const Recipe *R = C.recipe("r");
    ASSERT_TRUE(R);
    EXPECT_EQ(R->WorldSize, 72);
    EXPECT_EQ(R->Nodes, 18); // 4-GPU trays
    EXPECT_EQ(R->Parallel.DP, 9);
    EXPECT_EQ(R->Parallel.EDP, 9);
    EXPECT_FALSE(R->origin("cluster.gpus").IsDefault);
  }
  {
    // nodes and gpus both stated and consistent.
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 2; gpus = 16 }", "ep = 16"));
    ASSERT_TRUE(C.Final.empty()) << C.summary();
    const Recipe *R = C.recipe("r");
    ASSERT_TRUE(R);
    EXPECT_EQ(R->WorldSize, 16);
    EXPECT_EQ(R->Nodes, 2);
    EXPECT_EQ(R->Parallel.EDP, 1);
  }
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 2; gpus = 24 }", ""));
    EXPECT_EQ(C.count("cluster-size-conflict"), 1u) << C.summary();
  }
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; gpus = 12 }", ""));
    EXPECT_EQ(C.count("partial-node"), 1u) << C.summary();
  }
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm }", ""));
    EXPECT_EQ(C.count("cluster-size-missing"), 1u) << C.summary();
    EXPECT_TRUE(C.Recipes.empty());
  }
}

TEST(SemaDerived, NamedCluster) {
  Compilation C(R"moe(cluster eos { gpu = h100_sxm; nodes = 576 }
cluster rack { gpu = gb200_nvl72; gpus = 72 }

recipe on_eos {
  model = deepseek_v3
  cluster = eos
  seq_len = 4K
  batch { micro = 1; global = 4608 }
  parallel { tp = 1; cp = 1; ep = 32; pp = 16 }
}
recipe on_rack {
  model = qwen3_30b_a3b
  cluster = rack
  seq_len = 4K
  batch { micro = 1; global = 72 }
  parallel { ep = 8; pp = 1; tp = 1 }
}
)moe");
  ASSERT_TRUE(C.Final.empty()) << C.summary();
  const Recipe *Eos = C.recipe("on_eos");
  ASSERT_TRUE(Eos);
  EXPECT_EQ(Eos->Gpu.Name, "h100_sxm");
  EXPECT_EQ(Eos->WorldSize, 4608);
  EXPECT_EQ(Eos->Nodes, 576);
  EXPECT_EQ(Eos->Parallel.DP, 288); // 4608 / 16
  EXPECT_EQ(Eos->Parallel.EDP, 9);  // 4608 / (32 * 16)
  const Recipe *Rack = C.recipe("on_rack");
  ASSERT_TRUE(Rack);
  EXPECT_EQ(Rack->Gpu.Name, "gb200_nvl72");
  EXPECT_EQ(Rack->WorldSize, 72);
  EXPECT_EQ(Rack->Parallel.DP, 72);
  EXPECT_EQ(Rack->Parallel.EDP, 9);
}

TEST(SemaDerived, StatedValuesAreChecked) {
  {
    // dp = 256 / (1*32*8) = 1 and edp = 256 / (1*32*8) = 1: stated correctly, no diagnostic.
    Compilation C(recipeWith("deepseek_v3", "cluster { gpu = h100_sxm; nodes = 32 }",
                             "tp = 1; cp = 32; ep = 32; pp = 8; dp = 1; edp = 1"));
    EXPECT_TRUE(C.Final.empty()) << C.summary();
    ASSERT_EQ(C.Recipes.size(), 1u);
    EXPECT_FALSE(C.Recipes[0].origin("parallel.edp").IsDefault);
  }
  {
    // The contract's dsv3_256k_h100: 64 nodes, cp 64, edp stated 2 = 512 / (1*32*8).
    Compilation C(recipeWith("deepseek_v3", "cluster { gpu = h100_sxm; nodes = 64 }",
                             "tp = 1; cp = 64; ep = 32; pp = 8; edp = 2"));
    EXPECT_TRUE(C.Final.empty()) << C.summary();
  }
  {
    Compilation C(recipeWith("deepseek_v3", "cluster { gpu = h100_sxm; nodes = 32 }",
                             "tp = 1; cp = 32; ep = 32; pp = 8; edp = 2"));
    ASSERT_EQ(C.count("stated-value-mismatch"), 1u) << C.summary();
    const Diagnostic *D = C.find("stated-value-mismatch");
    EXPECT_EQ(D->Sev, Severity::Error);
    EXPECT_EQ(C.text(D->Range), "2");
    EXPECT_NE(D->Message.find("edp = 2"), std::string::npos) << D->Message;
    EXPECT_NE(D->Message.find("edp = 1"), std::string::npos) << D->Message;
    EXPECT_EQ(D->Recipe, "r");
    // A shape error does not hide the rules: the recipe still lowers.
    EXPECT_EQ(C.Recipes.size(), 1u);
  }
  {
    Compilation C(recipeWith("deepseek_v3", "cluster { gpu = h100_sxm; nodes = 32 }",
                             "tp = 1; cp = 32; ep = 32; pp = 8; dp = 4"));
    EXPECT_EQ(C.count("stated-value-mismatch"), 1u) << C.summary();
  }
  {
    // 256 GPUs do not divide into tp*cp*pp = 3*1*1.
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 32 }", "tp = 3"));
    EXPECT_EQ(C.count("world-size"), 1u) << C.summary();
    ASSERT_EQ(C.Recipes.size(), 1u);
    EXPECT_EQ(C.Recipes[0].Parallel.DP, 0); // unknown, and the rules know it
  }
}

//===----------------------------------------------------------------------===//
// Field references and cycles
//===----------------------------------------------------------------------===//

TEST(SemaReferences, FieldsModelAndClusterAttributes) {
  Compilation C(R"moe(recipe r {
  model = qwen3_30b_a3b
  cluster { gpu = h100_sxm; nodes = 32 }
  seq_len = 128K
  batch { micro = 1; global = cluster.gpu.memory / 1GB }
  parallel { cp = seq_len / 4K; pp = model.layers / 12; ep = cluster.gpus / 32 }
}
)moe");
  ASSERT_TRUE(C.Final.empty()) << C.summary();
  const Recipe *R = C.recipe("r");
  ASSERT_TRUE(R);
  EXPECT_EQ(R->Parallel.CP, 32); // 131072 / 4096
  EXPECT_EQ(R->Parallel.PP, 4);  // 48 / 12
  EXPECT_EQ(R->Parallel.EP, 8);  // 256 / 32
  EXPECT_EQ(R->GlobalBatch, 80); // 80GB / 1GB
  EXPECT_EQ(R->Parallel.DP, 2);  // 256 / (1*32*4)
  EXPECT_EQ(C.text(R->origin("parallel.cp").Range), "seq_len / 4K");
}

TEST(SemaReferences, ReferencesThroughExtendsSeeTheChildsValues) {
  // The base computes cp from seq_len; the child changes only seq_len.
  Compilation C(R"moe(recipe base {
  model = deepseek_v3
  cluster { gpu = h100_sxm; nodes = 64 }
  seq_len = 128K
  batch { micro = 1; global = 256 }
  parallel { cp = seq_len / 4K; ep = 32; pp = 8 }
}
recipe longer extends base { seq_len = 256K }
)moe");
  ASSERT_TRUE(C.Final.empty()) << C.summary();
  ASSERT_TRUE(C.recipe("base") && C.recipe("longer"));
  EXPECT_EQ(C.recipe("base")->Parallel.CP, 32);
  EXPECT_EQ(C.recipe("longer")->Parallel.CP, 64);
}

TEST(SemaReferences, CyclesAreReported) {
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 1 }", "cp = ep; ep = cp"));
    EXPECT_GE(C.count("field-cycle"), 1u) << C.summary();
    EXPECT_TRUE(C.Recipes.empty());
  }
  {
    Compilation C(R"moe(recipe r {
  model = qwen3_30b_a3b
  cluster { gpu = h100_sxm; nodes = 1 }
  seq_len = batch.global * 2
  batch { micro = 1; global = seq_len / 2 }
}
)moe");
    EXPECT_GE(C.count("field-cycle"), 1u) << C.summary();
    const Diagnostic *D = C.find("field-cycle");
    ASSERT_TRUE(D);
    EXPECT_NE(D->Message.find("->"), std::string::npos) << D->Message;
  }
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 1 }", "tp = tp"));
    EXPECT_GE(C.count("field-cycle"), 1u) << C.summary();
  }
}

TEST(SemaReferences, CycleThroughADerivedValue) {
  // cp -> dp -> (tp x cp x pp) -> cp: a cycle, not an unset field.
  Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 4 }", "cp = dp"));
  EXPECT_TRUE(C.Recipes.empty());
  EXPECT_GE(C.count("field-cycle"), 1u) << C.summary();
  EXPECT_EQ(C.count("unset-field"), 0u) << C.summary();
}

TEST(SemaReferences, QualifiedReferenceInsideTheClusterSection) {
  // Inside `cluster { }`, `cluster.nodes` names the sibling field; the
  // top-level `cluster` (a named-cluster reference) is unset here.
  Compilation C(R"moe(recipe r {
  model = qwen3_30b_a3b
  cluster { gpu = h100_sxm; nodes = 4; gpus = cluster.nodes * 8 }
  seq_len = 4K
  batch { micro = 1; global = 32 }
}
)moe");
  EXPECT_TRUE(C.Final.empty()) << C.summary();
  ASSERT_TRUE(C.recipe("r"));
  EXPECT_EQ(C.recipe("r")->WorldSize, 32);
}

TEST(SemaReferences, FailedGpusDoesNotCascade) {
  // gpus fails to evaluate (unknown unit); no cluster-size-conflict with a made-up 0 should follow.
  Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 4; gpus = 32Q }", ""));
  EXPECT_EQ(C.count("unknown-unit"), 1u) << C.summary();
  EXPECT_EQ(C.Final.size(), 1u) << C.summary();
}

TEST(SemaReferences, UnknownAndUnsetReferences) {
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 1 }", "cp = seq_lne / 4K"));
    ASSERT_EQ(C.count("unknown-name"), 1u) << C.summary();
    EXPECT_NE(C.find("unknown-name")->Message.find("did you mean 'seq_len'"), std::string::npos)
        << C.find("unknown-name")->Message;
  }
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 1 }", "cp = model.layerz"));
    EXPECT_EQ(C.count("unknown-field"), 1u) << C.summary();
  }
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 1 }", "cp = parallel.layout"));
    EXPECT_GE(C.count("unset-field") + C.count("type-mismatch") + C.count("not-a-number"), 1u) << C.summary();
  }
}

//===----------------------------------------------------------------------===//
// Sweeps
//===----------------------------------------------------------------------===//

TEST(SemaSweep, CartesianProductInSourceOrder) {
  Compilation C(R"moe(recipe r {
  model = deepseek_v3
  cluster { gpu = h100_sxm; nodes = 32 }
  seq_len = 128K
  batch { micro = sweep [1, 2]; global = 256 }
  parallel { tp = 1; cp = sweep [2, 4, 8]; ep = 32; pp = 8 }
}
)moe");
  ASSERT_TRUE(C.Final.empty()) << C.summary();
  EXPECT_EQ(C.pointNames(), (Strings{"r[micro=1, cp=2]", "r[micro=1, cp=4]", "r[micro=1, cp=8]", "r[micro=2, cp=2]",
                                     "r[micro=2, cp=4]", "r[micro=2, cp=8]"}));
  for (const Recipe &R : C.Recipes) {
    EXPECT_EQ(R.Name, "r");
    EXPECT_EQ(std::vector<std::string>(R.SweptFields.begin(), R.SweptFields.end()),
              (Strings{"batch.micro", "parallel.cp"}));
    std::string Expected = "r[micro=" + std::to_string(R.MicroBatch) + ", cp=" + std::to_string(R.Parallel.CP) + "]";
    EXPECT_EQ(R.PointName, Expected);
    EXPECT_EQ(R.Parallel.DP, 256 / (R.Parallel.CP * 8));
    // The provenance of a swept field is the chosen element.
    EXPECT_EQ(C.text(R.origin("parallel.cp").Range), std::to_string(R.Parallel.CP));
  }
}

TEST(SemaSweep, NamesFollowSourceOrderNotSchemaOrder) {
  Compilation C(R"moe(recipe r {
  parallel { cp = sweep [2, 4]; ep = 32; pp = 8 }
  recompute = sweep [none, full, selective(moe_act)]
  model = deepseek_v3
  cluster { gpu = h100_sxm; nodes = 32 }
  seq_len = 128K
  batch { micro = 1; global = 256 }
}
)moe");
  ASSERT_TRUE(C.Final.empty()) << C.summary();
  ASSERT_EQ(C.Recipes.size(), 6u);
  EXPECT_EQ(C.Recipes[0].PointName, "r[cp=2, recompute=none]");
  EXPECT_EQ(C.Recipes[1].PointName, "r[cp=2, recompute=full]");
  EXPECT_EQ(C.Recipes[2].PointName, "r[cp=2, recompute=selective(moe_act)]");
  EXPECT_EQ(C.Recipes[5].PointName, "r[cp=4, recompute=selective(moe_act)]");
  EXPECT_EQ(C.Recipes[1].Recompute.Kind, RecomputeKind::Full);
  EXPECT_EQ(C.Recipes[2].Recompute.Kind, RecomputeKind::Selective);
}

TEST(SemaSweep, ErrorInEveryPointIsReportedOnceForTheRecipe) {
  Compilation C(R"moe(recipe r {
  model = deepseek_v3
  cluster { gpu = h100_sxm; nodes = 32 }
  seq_len = 128K
  batch { micro = sweep [1, 2, 4]; global = 256 }
  parallel { cp = 32; ep = 32; pp = 8; edp = 3 }
}
)moe");
  EXPECT_EQ(C.count("stated-value-mismatch"), 1u) << C.summary();
  const Diagnostic *D = C.find("stated-value-mismatch");
  ASSERT_TRUE(D);
  EXPECT_EQ(D->Recipe, "r");
  // A shape error does not hide the rules: every point still lowers.
  EXPECT_FALSE(C.Recipes.empty());
}

TEST(SemaSweep, ErrorInOnePointNamesThePoint) {
  Compilation C(R"moe(recipe r {
  model = deepseek_v3
  cluster { gpu = h100_sxm; nodes = 32 }
  seq_len = 128K
  batch { micro = 1; global = 256 }
  parallel { cp = 32; ep = 32; pp = sweep [8, 3] }
}
)moe");
  ASSERT_EQ(C.count("world-size"), 1u) << C.summary();
  EXPECT_EQ(C.find("world-size")->Recipe, "r[pp=3]");
  // Both points lower: the shape error does not hide the rules of r[pp=3].
  EXPECT_EQ(C.pointNames(), (Strings{"r[pp=8]", "r[pp=3]"}));
}

TEST(SemaSweep, InheritedAndRemovedByChild) {
  Compilation C(R"moe(recipe base {
  model = deepseek_v3
  cluster { gpu = h100_sxm; nodes = 32 }
  seq_len = 128K
  batch { micro = sweep [1, 2]; global = 256 }
  parallel { cp = 32; ep = 32; pp = 8 }
}
recipe keeps extends base { seq_len = 64K; parallel { cp = 16 } }
recipe fixes extends base { batch { micro = 4 } }
recipe adds extends base { parallel { pp = sweep [4, 8] } }
)moe");
  ASSERT_TRUE(C.Final.empty()) << C.summary();
  EXPECT_EQ(C.pointNames(),
            (Strings{"base[micro=1]", "base[micro=2]", "keeps[micro=1]", "keeps[micro=2]", "fixes",
                     "adds[micro=1, pp=4]", "adds[micro=1, pp=8]", "adds[micro=2, pp=4]", "adds[micro=2, pp=8]"}));
  const Recipe *Fixes = C.recipe("fixes");
  ASSERT_TRUE(Fixes);
  EXPECT_TRUE(Fixes->SweptFields.empty());
  EXPECT_EQ(Fixes->MicroBatch, 4);
  EXPECT_EQ(chain(Fixes->origin("batch.micro")), (Strings{"fixes"}));
  const Recipe *Keeps = C.recipe("keeps[micro=2]");
  ASSERT_TRUE(Keeps);
  EXPECT_EQ(Keeps->MicroBatch, 2);
  EXPECT_EQ(Keeps->SeqLen, 65536);
  EXPECT_EQ(chain(Keeps->origin("batch.micro")), (Strings{"base", "keeps"}));
  EXPECT_EQ(C.text(Keeps->origin("batch.micro").Range), "2");
}

TEST(SemaSweep, LimitsAndMisuse) {
  {
    SemaOptions Opts;
    llvm::SourceMgr SM;
    DiagnosticEngine Diags(SM);
    Opts.MaxSweepPoints = 4;
    Sema S(Diags, Opts);
    S.loadBuffer(llvm::MemoryBuffer::getMemBufferCopy(
        recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 1 }", "tp = sweep [1, 2, 4]; pp = sweep [1, 2]"),
        "test.moe"));
    EXPECT_TRUE(S.analyze().empty());
    bool Found = false;
    for (const Diagnostic &D : Diags.finish())
      Found |= D.ID == diag::sweep_too_large;
    EXPECT_TRUE(Found);
  }
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 1 }", "tp = sweep []"));
    EXPECT_EQ(C.count("sweep-empty"), 1u) << C.summary();
  }
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 1 }", "tp = 1 + sweep [1, 2]"));
    EXPECT_EQ(C.count("sweep-misplaced"), 1u) << C.summary();
  }
  {
    Compilation C("model m { layers = sweep [1, 2]; hidden = 64; heads = 4; vocab = 10 }\n");
    EXPECT_EQ(C.count("sweep-misplaced"), 1u) << C.summary();
  }
}

//===----------------------------------------------------------------------===//
// Recompute aliases
//===----------------------------------------------------------------------===//

TEST(SemaRecompute, SeedAliasesMapToMegatronModules) {
  Compilation C(recipeWith("deepseek_v3", "cluster { gpu = h100_sxm; nodes = 32 }", "tp = 1; cp = 32; ep = 32; pp = 8",
                           "  recompute = selective(up_proj, norm, moe, mlp)\n"));
  const Recipe *R = C.recipe("r");
  ASSERT_TRUE(R) << C.summary();
  EXPECT_EQ(C.count("unknown-value"), 0u) << C.summary();
  EXPECT_EQ(R->Recompute.Kind, RecomputeKind::Selective);
  std::vector<RecomputeModule> Modules(R->Recompute.Modules.begin(), R->Recompute.Modules.end());
  EXPECT_EQ(Modules, (std::vector<RecomputeModule>{RecomputeModule::MlaUpProj, RecomputeModule::LayerNorm,
                                                   RecomputeModule::Moe, RecomputeModule::Mlp}));
  ASSERT_EQ(R->Recompute.Aliases.size(), 2u);
  EXPECT_EQ(R->Recompute.Aliases[0].first, "up_proj");
  EXPECT_EQ(C.text(R->Recompute.Aliases[0].second), "up_proj");
  EXPECT_EQ(R->Recompute.Aliases[1].first, "norm");
  EXPECT_EQ(C.text(R->Recompute.Aliases[1].second), "norm");
}

TEST(SemaRecompute, CanonicalNamesHaveNoAliasesAndDuplicatesCollapse) {
  Compilation C(recipeWith("deepseek_v3", "cluster { gpu = h100_sxm; nodes = 32 }", "tp = 1; cp = 32; ep = 32; pp = 8",
                           "  recompute = selective(mla_up_proj, layernorm, up_proj, moe_act)\n"));
  const Recipe *R = C.recipe("r");
  ASSERT_TRUE(R) << C.summary();
  std::vector<RecomputeModule> Modules(R->Recompute.Modules.begin(), R->Recompute.Modules.end());
  EXPECT_EQ(Modules, (std::vector<RecomputeModule>{RecomputeModule::MlaUpProj, RecomputeModule::LayerNorm,
                                                   RecomputeModule::MoeAct}));
  ASSERT_EQ(R->Recompute.Aliases.size(), 1u);
  EXPECT_EQ(R->Recompute.Aliases[0].first, "up_proj");
}

TEST(SemaRecompute, FullWithArgumentsAndUnknownModule) {
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 1 }", "",
                             "  recompute = full(method = block, layers = 4)\n"));
    const Recipe *R = C.recipe("r");
    ASSERT_TRUE(R) << C.summary();
    EXPECT_EQ(R->Recompute.Kind, RecomputeKind::Full);
    EXPECT_EQ(R->Recompute.Method, RecomputeMethod::Block);
    ASSERT_TRUE(R->Recompute.Layers.hasValue());
    EXPECT_EQ(*R->Recompute.Layers, 4);
  }
  {
    Compilation C(recipeWith("qwen3_30b_a3b", "cluster { gpu = h100_sxm; nodes = 1 }", "",
                             "  recompute = selective(moe_actt)\n"));
    ASSERT_EQ(C.count("unknown-value"), 1u) << C.summary();
    const Diagnostic *D = C.find("unknown-value");
    EXPECT_NE(D->Message.find("did you mean 'moe_act'"), std::string::npos) << D->Message;
    ASSERT_EQ(D->FixIts.size(), 1u);
    EXPECT_EQ(D->FixIts[0].Replacement, "moe_act");
    EXPECT_EQ(C.text(D->FixIts[0].Range), "moe_actt");
  }
}

//===----------------------------------------------------------------------===//
// The built-in catalog
//===----------------------------------------------------------------------===//

namespace {
/// The names of the catalog's definitions by kind, read from the embedded sources.
std::map<ast::DefKind, std::vector<std::string>> catalogNames() {
  std::map<ast::DefKind, std::vector<std::string>> Names;
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  for (const CatalogFile &F : builtinCatalogFiles()) {
    unsigned ID = SM.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBuffer(F.Text, F.Name), llvm::SMLoc());
    auto File = parseBuffer(ID, Diags);
    EXPECT_TRUE(File) << F.Name;
    if (File)
      for (const ast::Definition &D : File->Definitions)
        Names[D.Kind].push_back(D.Name);
  }
  EXPECT_TRUE(Diags.finish().empty());
  return Names;
}
} // namespace

TEST(SemaCatalog, ContractEntriesExist) {
  auto Names = catalogNames();
  auto &Models = Names[ast::DefKind::Model];
  auto &Gpus = Names[ast::DefKind::Gpu];
  for (const char *M : {"deepseek_v3", "qwen3_235b_a22b", "qwen3_30b_a3b", "qwen3_next_80b_a3b", "qwen3_vl_235b_a22b",
                        "qwen3_vl_30b_a3b", "mixtral_8x7b"})
    EXPECT_TRUE(llvm::is_contained(Models, M)) << M;
  for (const char *G : {"h100_sxm", "h200_sxm", "b200", "b300", "gb200_nvl72", "gb300_nvl72", "cpu"})
    EXPECT_TRUE(llvm::is_contained(Gpus, G)) << G;
  // One namespace: no name is used twice across the catalog files.
  std::set<std::string> All;
  for (auto &KV : Names)
    for (const std::string &N : KV.second)
      EXPECT_TRUE(All.insert(N).second) << "duplicate catalog name " << N;
}

TEST(SemaCatalog, EveryModelAndGpuLowersCleanly) {
  auto Names = catalogNames();
  std::string Text;
  // A recipe per model on one H100 node, and per GPU system with the tiny model.
  for (const std::string &M : Names[ast::DefKind::Model])
    Text += "recipe with_" + M + " {\n  model = " + M +
            "\n  cluster { gpu = h100_sxm; nodes = 1 }\n  seq_len = 4K\n  batch { micro = 1; global = 64 }\n}\n";
  for (const std::string &G : Names[ast::DefKind::Gpu])
    Text += "recipe on_" + G + " {\n  model = tiny_moe\n  cluster { gpu = " + G +
            "; nodes = 1 }\n  seq_len = 4K\n  batch { micro = 1; global = 64 }\n}\n";
  Compilation C(Text);
  EXPECT_TRUE(C.Final.empty()) << C.summary();
  ASSERT_EQ(C.Recipes.size(), Names[ast::DefKind::Model].size() + Names[ast::DefKind::Gpu].size());
  for (const std::string &M : Names[ast::DefKind::Model]) {
    const Recipe *R = C.recipe("with_" + M);
    ASSERT_TRUE(R) << M;
    EXPECT_EQ(R->Model.Name, M);
    EXPECT_GT(R->Model.Layers, 0) << M;
    EXPECT_GT(R->Model.Hidden, 0) << M;
    EXPECT_GT(R->Model.Heads, 0) << M;
    EXPECT_GT(R->Model.KvHeads, 0) << M;
    EXPECT_GT(R->Model.HeadDim, 0) << M;
    EXPECT_GT(R->Model.Vocab, 0) << M;
    EXPECT_TRUE(R->Model.isMoE()) << M; // every catalog model is a MoE
    if (R->Model.MoE) {
      EXPECT_GE(R->Model.MoE->Experts, R->Model.MoE->TopK) << M;
      EXPECT_GT(R->Model.MoE->FfnHidden, 0) << M;
    }
    EXPECT_EQ(R->Model.isVLM(), StringRef(M).contains("_vl_")) << M;
  }
  for (const std::string &G : Names[ast::DefKind::Gpu]) {
    const Recipe *R = C.recipe("on_" + G);
    ASSERT_TRUE(R) << G;
    EXPECT_EQ(R->Gpu.Name, G);
    EXPECT_GT(R->Gpu.MemoryBytes, 0) << G;
    EXPECT_GT(R->Gpu.Bf16Flops, 0) << G;
    EXPECT_GT(R->Gpu.HbmBytesPerSec, 0) << G;
    EXPECT_GE(R->Gpu.NVLinkDomain, R->Gpu.GpusPerNode) << G;
    EXPECT_EQ(R->WorldSize, R->Gpu.GpusPerNode) << G;
  }
}

// Sema::lowerCatalog (what `moec import` matches a configuration against)
// lowers each definition as a recipe naming it has it, with no recipe.
TEST(SemaCatalog, LowerCatalogIsWhatRecipesSee) {
  auto Names = catalogNames();
  llvm::SourceMgr SM;
  DiagnosticEngine Diags(SM);
  Sema::LoweredCatalog Catalog = Sema(Diags).lowerCatalog();
  EXPECT_TRUE(Diags.finish().empty());
  ASSERT_EQ(Catalog.Models.size(), Names[ast::DefKind::Model].size());
  ASSERT_EQ(Catalog.Gpus.size(), Names[ast::DefKind::Gpu].size());
  for (const ModelSpec &M : Catalog.Models) {
    Compilation C("recipe r {\n  model = " + M.Name +
                  "\n  cluster { gpu = h100_sxm; nodes = 1 }\n  seq_len = 4K\n  batch { micro = 1; global = 64 }\n}\n");
    const Recipe *R = C.recipe("r");
    ASSERT_TRUE(R) << M.Name << "\n" << C.summary();
    const ModelSpec &Want = R->Model;
    EXPECT_EQ(std::make_tuple(M.Layers, M.Hidden, M.Heads, M.KvHeads, M.HeadDim, M.Vocab, M.MtpLayers, M.QkNorm),
              std::make_tuple(Want.Layers, Want.Hidden, Want.Heads, Want.KvHeads, Want.HeadDim, Want.Vocab,
                              Want.MtpLayers, Want.QkNorm))
        << M.Name;
    EXPECT_EQ(M.FfnHidden, Want.FfnHidden) << M.Name;
    EXPECT_EQ(M.MaxSeqLen, Want.MaxSeqLen) << M.Name;
    EXPECT_EQ(bool(M.MLA), bool(Want.MLA)) << M.Name;
    if (M.MLA && Want.MLA) {
      EXPECT_EQ(std::make_tuple(M.MLA->QLoraRank, M.MLA->KvLoraRank, M.MLA->QkHeadDim, M.MLA->VHeadDim),
                std::make_tuple(Want.MLA->QLoraRank, Want.MLA->KvLoraRank, Want.MLA->QkHeadDim, Want.MLA->VHeadDim))
          << M.Name;
    }
    ASSERT_EQ(bool(M.MoE), bool(Want.MoE)) << M.Name;
    if (M.MoE) {
      EXPECT_EQ(std::make_tuple(M.MoE->Experts, M.MoE->TopK, M.MoE->FfnHidden, M.MoE->SharedExperts, M.MoE->DenseLayers,
                                M.MoE->Groups, M.MoE->GroupTopK),
                std::make_tuple(Want.MoE->Experts, Want.MoE->TopK, Want.MoE->FfnHidden, Want.MoE->SharedExperts,
                                Want.MoE->DenseLayers, Want.MoE->Groups, Want.MoE->GroupTopK))
          << M.Name;
    }
  }
  for (const GpuSpec &G : Catalog.Gpus)
    EXPECT_GT(G.MemoryBytes, 0) << G.Name;
}

namespace {
/// Lowers one recipe using Model (and Gpu) and returns it.
struct Lowered {
  explicit Lowered(StringRef Model, StringRef Gpu = "h100_sxm")
      : C(("recipe r {\n  model = " + Model + "\n  cluster { gpu = " + Gpu +
           "; nodes = 1 }\n  seq_len = 4K\n  batch { micro = 1; global = 64 }\n}\n")
              .str()) {}
  const Recipe *get() const { return C.recipe("r"); }
  Compilation C;
};
} // namespace

// Figures from bench/reference/models.csv.
TEST(SemaCatalog, ModelFiguresMatchReference) {
  {
    Lowered L("deepseek_v3");
    const Recipe *R = L.get();
    ASSERT_TRUE(R) << L.C.summary();
    const ModelSpec &M = R->Model;
    EXPECT_EQ(M.Layers, 61);
    EXPECT_EQ(M.Hidden, 7168);
    EXPECT_EQ(M.FfnHidden.getValueOr(0), 18432);
    EXPECT_EQ(M.Heads, 128);
    EXPECT_EQ(M.Vocab, 129280);
    EXPECT_EQ(M.MtpLayers, 1);
    EXPECT_EQ(M.MaxSeqLen.getValueOr(0), 163840);
    ASSERT_TRUE(M.MoE.hasValue());
    EXPECT_EQ(M.MoE->Experts, 256);
    EXPECT_EQ(M.MoE->TopK, 8);
    EXPECT_EQ(M.MoE->FfnHidden, 2048);
    EXPECT_EQ(M.MoE->SharedExperts, 1);
    EXPECT_EQ(M.MoE->DenseLayers, 3);
    EXPECT_EQ(M.MoE->RouterKind, Router::Sigmoid);
    ASSERT_TRUE(M.MLA.hasValue());
    EXPECT_EQ(M.MLA->QLoraRank, 1536);
    EXPECT_EQ(M.MLA->KvLoraRank, 512);
    EXPECT_EQ(M.MLA->QkHeadDim, 128);
    EXPECT_EQ(M.MLA->QkRopeHeadDim, 64);
    EXPECT_EQ(M.MLA->VHeadDim, 128);
    EXPECT_FALSE(M.isVLM());
  }
  struct Qwen {
    const char *Name;
    int64_t Layers, Hidden, MoeFfn, Experts, TopK, Shared, Heads, KvHeads, HeadDim, Vocab;
  } Qwens[] = {
      {"qwen3_235b_a22b", 94, 4096, 1536, 128, 8, 0, 64, 4, 128, 151936},
      {"qwen3_30b_a3b", 48, 2048, 768, 128, 8, 0, 32, 4, 128, 151936},
      {"qwen3_next_80b_a3b", 48, 2048, 512, 512, 10, 1, 16, 2, 256, 151936},
      {"qwen3_vl_235b_a22b", 94, 4096, 1536, 128, 8, 0, 64, 4, 128, 151936},
      {"qwen3_vl_30b_a3b", 48, 2048, 768, 128, 8, 0, 32, 4, 128, 151936},
  };
  for (const Qwen &Q : Qwens) {
    SCOPED_TRACE(Q.Name);
    Lowered L(Q.Name);
    const Recipe *R = L.get();
    ASSERT_TRUE(R) << L.C.summary();
    const ModelSpec &M = R->Model;
    EXPECT_EQ(M.Layers, Q.Layers);
    EXPECT_EQ(M.Hidden, Q.Hidden);
    EXPECT_EQ(M.Heads, Q.Heads);
    EXPECT_EQ(M.KvHeads, Q.KvHeads);
    EXPECT_EQ(M.HeadDim, Q.HeadDim);
    EXPECT_EQ(M.Vocab, Q.Vocab);
    EXPECT_FALSE(M.MLA.hasValue());
    ASSERT_TRUE(M.MoE.hasValue());
    EXPECT_EQ(M.MoE->Experts, Q.Experts);
    EXPECT_EQ(M.MoE->TopK, Q.TopK);
    EXPECT_EQ(M.MoE->FfnHidden, Q.MoeFfn);
    EXPECT_EQ(M.MoE->SharedExperts, Q.Shared);
    EXPECT_EQ(M.MoE->DenseLayers, 0);
  }
  {
    Lowered L("qwen3_235b_a22b");
    ASSERT_TRUE(L.get());
    EXPECT_EQ(L.get()->Model.MaxSeqLen.getValueOr(0), 40960);
  }
  {
    Lowered L("qwen3_next_80b_a3b");
    const Recipe *R = L.get();
    ASSERT_TRUE(R);
    ASSERT_TRUE(R->Model.LinearAttention.hasValue());
    EXPECT_EQ(R->Model.LinearAttention->Interval, 4); // full_attention_interval 4
    EXPECT_EQ(R->Model.LinearAttention->KeyHeads, 16);
    EXPECT_EQ(R->Model.LinearAttention->ValueHeads, 32);
    EXPECT_EQ(R->Model.LinearAttention->HeadDim, 128);
    EXPECT_EQ(R->Model.MaxSeqLen.getValueOr(0), 262144);
    EXPECT_EQ(R->Model.MtpLayers, 1);
  }
  for (const char *VL : {"qwen3_vl_235b_a22b", "qwen3_vl_30b_a3b"}) {
    Lowered L(VL);
    const Recipe *R = L.get();
    ASSERT_TRUE(R) << VL;
    ASSERT_TRUE(R->Model.Vision.hasValue()) << VL;
    EXPECT_GT(R->Model.Vision->Layers, 0);
    EXPECT_GT(R->Model.Vision->PatchSize, 0);
  }
  {
    // Not in models.csv; from the public Mixtral-8x7B config.json.
    Lowered L("mixtral_8x7b");
    const Recipe *R = L.get();
    ASSERT_TRUE(R);
    EXPECT_EQ(R->Model.Layers, 32);
    EXPECT_EQ(R->Model.Hidden, 4096);
    EXPECT_EQ(R->Model.KvHeads, 8);
    EXPECT_EQ(R->Model.Vocab, 32000);
    ASSERT_TRUE(R->Model.MoE.hasValue());
    EXPECT_EQ(R->Model.MoE->Experts, 8);
    EXPECT_EQ(R->Model.MoE->TopK, 2);
  }
}

// Figures from bench/reference/hardware.csv (dense rates, per GPU, per direction).
TEST(SemaCatalog, GpuFiguresMatchReference) {
  struct Gpu {
    const char *Name;
    GpuArch Arch;
    double MemGB, HbmTBs, Bf16TF, Fp8TF, NVLinkGBs, NetGBs;
    int64_t Domain;
  } Gpus[] = {
      {"h100_sxm", GpuArch::Hopper, 80, 3.35, 989, 1979, 450, 50, 8},
      {"h200_sxm", GpuArch::Hopper, 141, 4.8, 989, 1979, 450, 50, 8},
      {"b200", GpuArch::Blackwell, 180, 8.0, 2250, 4500, 900, 50, 8},
      {"b300", GpuArch::Blackwell, 288, 8.0, 2250, 4500, 900, 100, 8},
      {"gb200_nvl72", GpuArch::Blackwell, 186, 8.0, 2500, 5000, 900, 50, 72},
      {"gb300_nvl72", GpuArch::Blackwell, 288, 8.0, 2500, 5000, 900, 100, 72},
  };
  for (const Gpu &G : Gpus) {
    SCOPED_TRACE(G.Name);
    Lowered L("tiny_moe", G.Name);
    const Recipe *R = L.get();
    ASSERT_TRUE(R) << L.C.summary();
    const GpuSpec &S = R->Gpu;
    EXPECT_EQ(S.Arch, G.Arch);
    EXPECT_DOUBLE_EQ(S.MemoryBytes, G.MemGB * 1e9);
    EXPECT_NEAR(S.HbmBytesPerSec, G.HbmTBs * 1e12, 1e3);
    EXPECT_DOUBLE_EQ(S.Bf16Flops, G.Bf16TF * 1e12);
    ASSERT_TRUE(S.Fp8Flops.hasValue());
    EXPECT_DOUBLE_EQ(*S.Fp8Flops, G.Fp8TF * 1e12);
    EXPECT_DOUBLE_EQ(S.NVLinkBytesPerSec, G.NVLinkGBs * 1e9);
    EXPECT_DOUBLE_EQ(S.NetworkBytesPerSec, G.NetGBs * 1e9);
    EXPECT_EQ(S.NVLinkDomain, G.Domain);
    // Hopper has no FP4; Blackwell does.
    EXPECT_EQ(S.Fp4Flops.hasValue(), G.Arch == GpuArch::Blackwell);
  }
  Lowered H100("tiny_moe", "h100_sxm");
  ASSERT_TRUE(H100.get());
  EXPECT_EQ(H100.get()->Gpu.GpusPerNode, 8);
  EXPECT_EQ(H100.get()->Gpu.SM, 90);
}

TEST(SemaCatalog, UserDefinitionShadowsBuiltinWithWarning) {
  Compilation C(R"moe(model qwen3_30b_a3b extends qwen3_30b_a3b { layers = 24 }
recipe r {
  model = qwen3_30b_a3b
  cluster { gpu = h100_sxm; nodes = 1 }
  seq_len = 4K
  batch { micro = 1; global = 8 }
}
)moe");
  EXPECT_EQ(C.count("shadows-builtin"), 1u) << C.summary();
  const Recipe *R = C.recipe("r");
  ASSERT_TRUE(R) << C.summary();
  EXPECT_EQ(R->Model.Layers, 24);
  EXPECT_EQ(R->Model.Hidden, 2048); // the rest comes from the built-in
}
