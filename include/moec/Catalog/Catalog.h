//===- Catalog.h - The built-in models and GPU systems ----------*- C++ -*-===//
#ifndef MOEC_CATALOG_CATALOG_H
#define MOEC_CATALOG_CATALOG_H

#include "llvm/ADT/ArrayRef.h"

namespace moec {

struct CatalogFile {
  const char *Name; // "<builtin>/models.moe"
  const char *Text;
};

/// The .moe sources of lib/Catalog, embedded at build time.
llvm::ArrayRef<CatalogFile> builtinCatalogFiles();

} // namespace moec

#endif
