#!/usr/bin/env bash
# Sets up, builds, and runs the whole test suite (unit, lit) with ctest.
# Extra arguments go to CMake's configure step (used by .ci/run for the
# sanitizer build).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MOEC_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" "$@"
cd "$build"
ctest --output-on-failure -j"$(nproc)"
