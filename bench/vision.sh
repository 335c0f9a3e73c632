#!/usr/bin/env bash
# Builds a Release moec, moerun and moerun-mkdata into build/ (or
# $MOEC_BUILD_DIR; scripts/build.sh) and runs the vision-language benchmark of
# the CPU runtime (bench/vision_speed.py: decoded against mock images), which
# rewrites its section of docs/benchmarks.md. Extra arguments go to
# vision_speed.py (e.g. --steps 4, --no-write).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${MOEC_BUILD_DIR:-$here/../build}"
MOEC_TARGETS="moec moerun moerun-mkdata" "$here/../scripts/build.sh"
exec python3 "$here/vision_speed.py" --moec "$build/tools/moec/moec" --moerun "$build/tools/moerun/moerun" \
  --mkdata "$build/tools/moerun-mkdata/moerun-mkdata" "$@"
