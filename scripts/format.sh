#!/usr/bin/env bash
# Formats every C++ and CUDA source of the tree with the repository's
# .clang-format; the style.clang-format test fails until this has run.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format)}
find include lib tools runtime test bench \( -name Inputs -o -name corpus -o -name Output \) -prune -o \
  \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -type f -print0 | xargs -0 "$CLANG_FORMAT" -i
