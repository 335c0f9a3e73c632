#!/usr/bin/env bash
# Builds a Release moec, moerun and moerun-mkdata into build/ (or
# $MOEC_BUILD_DIR) and runs the vision-language benchmark of the CPU runtime
# (bench/vision_speed.py: decoded against mock images), which rewrites its
# section of docs/benchmarks.md. Extra arguments go to vision_speed.py (e.g.
# --steps 4, --no-write).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/.."
build="${MOEC_BUILD_DIR:-$root/build}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --target moec moerun moerun-mkdata -- -j"$(nproc)" >/dev/null
exec python3 "$here/vision_speed.py" --moec "$build/tools/moec/moec" --moerun "$build/tools/moerun/moerun" \
  --mkdata "$build/tools/moerun-mkdata/moerun-mkdata" "$@"
