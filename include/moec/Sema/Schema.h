//===- Schema.h - The fields of recipes, models, GPUs, clusters -*- C++ -*-===//
//
// One declarative table says, for every field of every kind of definition,
// its type, unit, range, default and documentation. Sema checks every value
// against it, and docs/language.md's field tables are printed from it
// (`moec schema --markdown`), so code, checks and docs cannot drift apart.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_SEMA_SCHEMA_H
#define MOEC_SEMA_SCHEMA_H

#include "moec/AST/AST.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace moec {

enum class FieldType {
  Count,  // exact non-negative integer, no unit (`4K` is a count)
  Number, // real number, no unit
  Bool,
  String,
  Bytes,      // a byte quantity: 80GB
  Bandwidth,  // bytes per second: 3.35TB/s
  FlopRate,   // TFLOPS
  Enum,       // one bare name of EnumValues
  ScopeList,  // `none` or a list of names of EnumValues
  FlagOrList, // true, false, or a list of names of EnumValues
  CountList,  // a list of counts: [2, 4]
  ModelRef,   // a model name, or hf("config.json")
  GpuRef,
  ClusterRef,
  Recompute,  // none | full | full(method = uniform|block, layers = N) | selective(MODULE, ...)
  DataSource, // mock | real("path")
  Attention,  // gqa | mla(q_lora_rank = N, ...)
};

enum class Presence {
  Required,          // no default: the definition (or its base) must set it
  RequiredInSection, // required once any field of its section is set
  Optional,          // may stay unset
  Default,           // DefaultText applies when unset
  Derived,           // computed from other fields when unset; checked when set
};

struct FieldSpec {
  ast::DefKind Owner;
  llvm::StringLiteral Path;
  FieldType Type;
  Presence Req;
  llvm::StringLiteral DefaultText; // as written in docs, for Default and Derived
  double Min, Max;                 // inclusive range for numbers
  llvm::ArrayRef<llvm::StringLiteral> EnumValues;
  llvm::StringLiteral Doc;

  llvm::StringRef section() const {
    size_t Dot = Path.rfind('.');
    return Dot == llvm::StringRef::npos ? llvm::StringRef() : Path.take_front(Dot);
  }
};

/// All fields of one kind of definition.
llvm::ArrayRef<FieldSpec> schemaFor(ast::DefKind Kind);
const FieldSpec *lookupField(ast::DefKind Kind, llvm::StringRef Path);
/// True if Path names a section (a prefix of some field path) of Kind.
bool isSection(ast::DefKind Kind, llvm::StringRef Path);
/// "a count", "bytes", "one of bf16, fp8.delayed, ..." for messages.
std::string describeType(const FieldSpec &F);
/// The recompute modules selective(...) accepts, and the seeds' aliases.
llvm::ArrayRef<llvm::StringLiteral> recomputeModules();
/// Markdown tables of every kind's fields, for docs/language.md.
void printSchemaMarkdown(llvm::raw_ostream &OS);

} // namespace moec

#endif
