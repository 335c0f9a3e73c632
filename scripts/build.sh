#!/usr/bin/env bash
# Configures (once) and builds moec into build/ (or $MOEC_BUILD_DIR).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MOEC_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
cmake --build "$build" -- -j"$(nproc)" >/dev/null || cmake --build "$build" -- -j1
