#!/usr/bin/env bash
# Sets up, builds, and runs the whole test suite (unit, lit, the Megatron differential suite)
# with ctest.
# Extra arguments go to CMake's configure step (used by .ci/run for the
# sanitizer build).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${MOEC_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" "$@"
# The Megatron differential suite's venv (torch, Megatron-Core and Megatron-Bridge from PyPI),
# made once and cached before the tests start: on a fresh machine its install takes minutes, more
# than the first test to ask for it may wait.
"$root/scripts/megatron-venv.sh" >/dev/null
cd "$build"
ctest --output-on-failure -j"$(nproc)"
