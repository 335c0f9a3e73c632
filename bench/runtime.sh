#!/usr/bin/env bash
# Builds a Release moec and moerun into build/ (or $MOEC_BUILD_DIR;
# scripts/build.sh) and runs the CPU runtime's speed benchmark
# (bench/runtime_speed.py), which rewrites its section of docs/benchmarks.md.
# Extra arguments go to runtime_speed.py (e.g. --steps 4, --no-write,
# --no-perf, --strict).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${MOEC_BUILD_DIR:-$here/../build}"
MOEC_TARGETS="moec moerun" "$here/../scripts/build.sh"
exec python3 "$here/runtime_speed.py" --moec "$build/tools/moec/moec" \
  --moerun "$build/tools/moerun/moerun" "$@"
