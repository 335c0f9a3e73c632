//===- SchemaTest.cpp - The field tables are complete and consistent ------===//
#include "moec/Sema/Schema.h"
#include "moec/Basic/Quantity.h"
#include "moec/Sema/Recipe.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include <gtest/gtest.h>
#include <string>

using namespace moec;
using ast::DefKind;
using llvm::StringRef;

namespace {
const DefKind AllKinds[] = {DefKind::Recipe, DefKind::Model, DefKind::Gpu, DefKind::Cluster};

std::string where(const FieldSpec &F) { return (ast::defKindName(F.Owner) + "." + F.Path).str(); }
} // namespace

TEST(Schema, EveryKindHasFields) {
  for (DefKind K : AllKinds)
    EXPECT_FALSE(schemaFor(K).empty()) << ast::defKindName(K).str();
}

TEST(Schema, EveryFieldIsDocumented) {
  for (DefKind K : AllKinds)
    for (const FieldSpec &F : schemaFor(K)) {
      EXPECT_FALSE(StringRef(F.Doc).trim().empty()) << where(F);
      EXPECT_FALSE(F.Path.empty()) << where(F);
      EXPECT_EQ(F.Owner, K) << where(F);
      EXPECT_FALSE(describeType(F).empty()) << where(F);
    }
}

TEST(Schema, PathsAreUniqueAndWellFormed) {
  for (DefKind K : AllKinds) {
    llvm::StringSet<> Seen;
    for (const FieldSpec &F : schemaFor(K)) {
      EXPECT_TRUE(Seen.insert(F.Path).second) << "duplicate " << where(F);
      // Dotted identifiers: no empty component, no stray characters.
      llvm::SmallVector<StringRef, 3> Parts;
      StringRef(F.Path).split(Parts, '.');
      for (StringRef P : Parts) {
        EXPECT_FALSE(P.empty()) << where(F);
        EXPECT_TRUE(!P.empty() && (isalpha(P[0]) || P[0] == '_')) << where(F);
        EXPECT_TRUE(llvm::all_of(P, [](char C) { return isalnum(C) || C == '_'; })) << where(F);
      }
    }
  }
}

TEST(Schema, EnumsAndScopeListsHaveValues) {
  for (DefKind K : AllKinds)
    for (const FieldSpec &F : schemaFor(K)) {
      if (F.Type != FieldType::Enum && F.Type != FieldType::ScopeList)
        continue;
      EXPECT_FALSE(F.EnumValues.empty()) << where(F);
      llvm::StringSet<> Values;
      for (StringRef V : F.EnumValues) {
        EXPECT_FALSE(V.empty()) << where(F);
        EXPECT_TRUE(Values.insert(V).second) << "duplicate value " << V.str() << " in " << where(F);
      }
    }
}

TEST(Schema, DefaultsAndDerivedFieldsSayWhatTheyAre) {
  for (DefKind K : AllKinds)
    for (const FieldSpec &F : schemaFor(K)) {
      if (F.Req != Presence::Default && F.Req != Presence::Derived)
        continue;
      EXPECT_FALSE(F.DefaultText.empty()) << where(F);
      if (F.Req != Presence::Default)
        continue;
      // A default is a valid value of the field's type.
      switch (F.Type) {
      case FieldType::Enum:
        EXPECT_TRUE(llvm::is_contained(F.EnumValues, F.DefaultText)) << where(F);
        break;
      case FieldType::Bool:
        EXPECT_TRUE(F.DefaultText == "true" || F.DefaultText == "false") << where(F);
        break;
      case FieldType::Count:
      case FieldType::Number: {
        QuantityError Err;
        auto Q = Quantity::fromNumber(F.DefaultText, Err);
        ASSERT_TRUE(Q.hasValue()) << where(F);
        EXPECT_GE(Q->getReal(), F.Min) << where(F);
        EXPECT_LE(Q->getReal(), F.Max) << where(F);
        break;
      }
      default:
        break;
      }
    }
}

TEST(Schema, RangesAreOrdered) {
  for (DefKind K : AllKinds)
    for (const FieldSpec &F : schemaFor(K))
      if (F.Type == FieldType::Count || F.Type == FieldType::Number) {
        EXPECT_LE(F.Min, F.Max) << where(F);
      }
}

TEST(Schema, LookupField) {
  for (DefKind K : AllKinds)
    for (const FieldSpec &F : schemaFor(K)) {
      EXPECT_EQ(lookupField(K, F.Path), &F) << where(F);
      EXPECT_FALSE(isSection(K, F.Path) && F.Type != FieldType::ClusterRef) << where(F);
    }
  const FieldSpec *CP = lookupField(DefKind::Recipe, "parallel.cp");
  ASSERT_TRUE(CP);
  EXPECT_EQ(CP->Type, FieldType::Count);
  EXPECT_EQ(CP->Req, Presence::Default);
  EXPECT_EQ(CP->DefaultText, "1");
  EXPECT_EQ(CP->section(), "parallel");
  EXPECT_EQ(lookupField(DefKind::Recipe, "seq_len")->section(), "");
  // Not fields: sections, prefixes, unknown names, another kind's fields, case slips.
  EXPECT_EQ(lookupField(DefKind::Recipe, "parallel"), nullptr);
  EXPECT_EQ(lookupField(DefKind::Recipe, "parallel.c"), nullptr);
  EXPECT_EQ(lookupField(DefKind::Recipe, "parallel.cp.x"), nullptr);
  EXPECT_EQ(lookupField(DefKind::Recipe, "layers"), nullptr);
  EXPECT_EQ(lookupField(DefKind::Recipe, "Seq_len"), nullptr);
  EXPECT_EQ(lookupField(DefKind::Recipe, ""), nullptr);
  EXPECT_NE(lookupField(DefKind::Model, "layers"), nullptr);
  EXPECT_NE(lookupField(DefKind::Gpu, "memory"), nullptr);
  EXPECT_EQ(lookupField(DefKind::Gpu, "memory")->Type, FieldType::Bytes);
  EXPECT_EQ(lookupField(DefKind::Gpu, "hbm")->Type, FieldType::Bandwidth);
  EXPECT_EQ(lookupField(DefKind::Gpu, "bf16")->Type, FieldType::FlopRate);
  EXPECT_NE(lookupField(DefKind::Cluster, "gpu"), nullptr);
}

TEST(Schema, IsSection) {
  for (StringRef S : {"parallel", "batch", "cluster", "offload", "data", "vision"})
    EXPECT_TRUE(isSection(DefKind::Recipe, S)) << S.str();
  for (StringRef S : {"moe", "vision", "linear_attention"})
    EXPECT_TRUE(isSection(DefKind::Model, S)) << S.str();
  // Fields, prefixes that stop inside a name, unknown names and the empty path are not sections.
  for (StringRef S : {"seq_len", "parallel.cp", "par", "paralle", "parallel.", "layers", "", "cluster.gpu"})
    EXPECT_FALSE(isSection(DefKind::Recipe, S)) << S.str();
  EXPECT_FALSE(isSection(DefKind::Model, "layers"));
  EXPECT_FALSE(isSection(DefKind::Model, "parallel"));
  EXPECT_FALSE(isSection(DefKind::Gpu, "memory"));
  // Every dotted field's section is a section.
  for (DefKind K : AllKinds)
    for (const FieldSpec &F : schemaFor(K))
      if (!F.section().empty()) {
        EXPECT_TRUE(isSection(K, F.section())) << where(F);
      }
}

TEST(Schema, ContractRecipeFieldsExist) {
  // docs: bench/reference/design/language.md, "Recipe fields (v0)".
  for (StringRef P : {"model",           "cluster.gpu",
                      "cluster.nodes",   "cluster.gpus",
                      "seq_len",         "batch.micro",
                      "batch.global",    "parallel.tp",
                      "parallel.cp",     "parallel.ep",
                      "parallel.etp",    "parallel.pp",
                      "parallel.vpp",    "parallel.dp",
                      "parallel.edp",    "parallel.sp",
                      "parallel.fsdp",   "parallel.cp_comm",
                      "parallel.layout", "precision",
                      "dispatcher",      "recompute",
                      "cuda_graph",      "offload.optimizer",
                      "data.source",     "data.variable_length",
                      "vision.frozen"})
    EXPECT_NE(lookupField(DefKind::Recipe, P), nullptr) << P.str();
  for (StringRef P : {"parallel.tp", "parallel.cp", "parallel.ep", "parallel.etp", "parallel.pp", "parallel.vpp"})
    EXPECT_EQ(lookupField(DefKind::Recipe, P)->DefaultText, "1") << P.str();
  EXPECT_EQ(lookupField(DefKind::Recipe, "parallel.dp")->Req, Presence::Derived);
  EXPECT_EQ(lookupField(DefKind::Recipe, "parallel.edp")->Req, Presence::Derived);
  EXPECT_EQ(lookupField(DefKind::Recipe, "model")->Req, Presence::Required);
  EXPECT_EQ(lookupField(DefKind::Recipe, "seq_len")->Req, Presence::Required);
  EXPECT_EQ(lookupField(DefKind::Recipe, "precision")->DefaultText, "bf16");
  EXPECT_EQ(lookupField(DefKind::Recipe, "dispatcher")->DefaultText, "alltoall");
  EXPECT_EQ(lookupField(DefKind::Recipe, "parallel.cp_comm")->DefaultText, "p2p");
  EXPECT_EQ(lookupField(DefKind::Recipe, "recompute")->DefaultText, "none");
  EXPECT_EQ(lookupField(DefKind::Recipe, "cuda_graph")->DefaultText, "none");
  const FieldSpec *Off = lookupField(DefKind::Recipe, "offload.optimizer");
  EXPECT_EQ(Off->Min, 0);
  EXPECT_EQ(Off->Max, 1);
}

TEST(Schema, EnumValuesMatchTheIR) {
  // The schema's names and the IR's name tables agree, so lowering cannot
  // silently fall back to a default for a value the schema accepted.
  const FieldSpec *Prec = lookupField(DefKind::Recipe, "precision");
  for (unsigned I = 0; I <= unsigned(Precision::NVFP4); ++I)
    EXPECT_TRUE(llvm::is_contained(Prec->EnumValues, precisionName(Precision(I)))) << I;
  EXPECT_EQ(Prec->EnumValues.size(), unsigned(Precision::NVFP4) + 1);
  const FieldSpec *Disp = lookupField(DefKind::Recipe, "dispatcher");
  for (unsigned I = 0; I <= unsigned(Dispatcher::HybridEP); ++I)
    EXPECT_TRUE(llvm::is_contained(Disp->EnumValues, dispatcherName(Dispatcher(I)))) << I;
  const FieldSpec *Graph = lookupField(DefKind::Recipe, "cuda_graph");
  for (unsigned I = 0; I <= unsigned(GraphScope::FullIteration); ++I)
    EXPECT_TRUE(llvm::is_contained(Graph->EnumValues, graphScopeName(GraphScope(I)))) << I;
  auto Modules = recomputeModules();
  for (unsigned I = 0; I <= unsigned(RecomputeModule::GdnNormOut); ++I)
    EXPECT_TRUE(llvm::is_contained(Modules, recomputeModuleName(RecomputeModule(I)))) << I;
  // The seeds' shorthand is accepted (and flagged by a rule).
  EXPECT_TRUE(llvm::is_contained(Modules, StringRef("up_proj")));
  EXPECT_TRUE(llvm::is_contained(Modules, StringRef("norm")));
}

TEST(Schema, MarkdownListsEveryField) {
  std::string Text;
  llvm::raw_string_ostream OS(Text);
  printSchemaMarkdown(OS);
  OS.flush();
  for (DefKind K : AllKinds) {
    EXPECT_NE(Text.find("### " + ast::defKindName(K).str() + " fields"), std::string::npos);
    for (const FieldSpec &F : schemaFor(K))
      EXPECT_NE(Text.find("| `" + F.Path.str() + "` |"), std::string::npos) << where(F);
  }
}

// RecipeEnums.def is the one table: every spelling parses back to its
// enumerator, and the schema accepts exactly those spellings.
template <typename E> static void expectRoundTrip(llvm::StringRef Field) {
  llvm::ArrayRef<llvm::StringLiteral> Names = enumNames<E>();
  ASSERT_FALSE(Names.empty());
  for (unsigned I = 0; I < Names.size(); ++I) {
    EXPECT_EQ(enumName(E(I)), Names[I]);
    ASSERT_TRUE(parseEnum<E>(Names[I]).hasValue()) << Names[I].str();
    EXPECT_EQ(unsigned(*parseEnum<E>(Names[I])), I);
  }
  EXPECT_FALSE(parseEnum<E>("no-such-value").hasValue());
  if (Field.empty())
    return;
  const FieldSpec *F = lookupField(DefKind::Recipe, Field);
  if (!F)
    F = lookupField(DefKind::Model, Field);
  if (!F)
    F = lookupField(DefKind::Gpu, Field);
  ASSERT_NE(F, nullptr) << Field.str();
  ASSERT_EQ(F->EnumValues.size(), Names.size()) << Field.str();
  for (unsigned I = 0; I < Names.size(); ++I)
    EXPECT_EQ(F->EnumValues[I], Names[I]) << Field.str();
}

TEST(RecipeEnums, OneTableForIRParseAndSchema) {
  expectRoundTrip<Precision>("precision");
  expectRoundTrip<Dispatcher>("dispatcher");
  expectRoundTrip<CpComm>("parallel.cp_comm");
  expectRoundTrip<GpuArch>("arch");
  expectRoundTrip<Router>("moe.router");
  expectRoundTrip<RecomputeMethod>("");
  expectRoundTrip<GraphScope>("cuda_graph");
  expectRoundTrip<RankOrder>("parallel.order");
  expectRoundTrip<FsdpImpl>("parallel.fsdp_impl");
  expectRoundTrip<RouterDtype>("moe.router_dtype");
  expectRoundTrip<OptimizerKind>("optimizer.type");
  expectRoundTrip<GraphImpl>("cuda_graph_impl");
  // selective(...) takes every module and the seeds' two aliases.
  llvm::ArrayRef<llvm::StringLiteral> Modules = recomputeModules();
  for (llvm::StringLiteral M : enumNames<RecomputeModule>())
    EXPECT_TRUE(llvm::is_contained(Modules, M)) << M.str();
  EXPECT_EQ(Modules.size(), enumNames<RecomputeModule>().size() + 2);
}
