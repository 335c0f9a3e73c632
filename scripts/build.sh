#!/usr/bin/env bash
# Configures (once) and builds moec into build/ (or $MOEC_BUILD_DIR): every
# target, or those $MOEC_TARGETS names (the benchmarks build only their tools).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MOEC_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
targets=()
for t in ${MOEC_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" "${targets[@]}" -- -j"$(nproc)" >/dev/null || cmake --build "$build" "${targets[@]}" -- -j1
