#!/usr/bin/env bash
# Builds moec and the trainer's test driver on the CPU emulation of CUDA
# (moert-train-driver-emu; needs the CUDA toolkit's headers, no GPU) into
# build/ (or $MOEC_BUILD_DIR; scripts/build.sh) and runs the host-device
# traffic benchmark of the CUDA backend (bench/cuda_traffic.py), which rewrites
# its section of docs/benchmarks.md. Extra arguments go to cuda_traffic.py
# (e.g. --no-write).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${MOEC_BUILD_DIR:-$here/../build}"
MOEC_TARGETS="moec moert-train-driver-emu moert-host-staging-bench" "$here/../scripts/build.sh"
exec python3 "$here/cuda_traffic.py" --moec "$build/tools/moec/moec" \
  --driver "$build/test/runtime/cuda/moert-train-driver-emu" \
  --staging-bench "$build/bench/cuda/moert-host-staging-bench" "$@"
