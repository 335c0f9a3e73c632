#!/usr/bin/env bash
# CUDA kernel benchmarks: grouped expert GEMM vs one dense cuBLAS GEMM of the
# same size, causal attention forward/backward TFLOP/s, on device 0.
#
#   bench/cuda/run.sh [--quick]
#
# Configures build-cuda/ (or $MOEC_CUDA_BUILD_DIR) with -DMOEC_CUDA=ON, builds
# only the benchmark, runs it, and writes the Markdown table (GPU named) to
# $OUT/cuda-benchmarks.md when $OUT is set, else into the "CUDA kernels"
# section of docs/benchmarks.md (between the cuda-bench markers, which are
# added at the end the first time).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${MOEC_CUDA_BUILD_DIR:-$root/build-cuda}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEC_CUDA=ON >/dev/null
fi
ninja -C "$build" -j"$(nproc)" moert-cuda-bench >/dev/null
table="$(mktemp)"
trap 'rm -f "$table"' EXIT
"$build/bench/cuda/moert-cuda-bench" --out "$table" "$@"
if [ ! -s "$table" ]; then
  echo "no benchmark table (no GPU?)" >&2
  exit 0
fi
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$table" "$OUT/cuda-benchmarks.md"
  echo "wrote $OUT/cuda-benchmarks.md"
  exit 0
fi
"$root/scripts/device-results.py" --bench "$table"
