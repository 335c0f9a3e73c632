#!/usr/bin/env bash
# THE script a session with a GPU runs on the device machine (one H200 here),
# from the repository root, within about 10 minutes:
#
#   scripts/device-check.sh            # results under $OUT (or ./device-out)
#
# 1. records the GPU and toolchain (nvidia-smi, nvcc, cmake, mpirun);
# 2. configures build-gpu/ with -DMOEC_CUDA=ON (sm_90; set
#    CMAKE_CUDA_ARCHITECTURES for other GPUs) and builds ONLY the GPU test
#    programs and the benchmark, with every core;
# 3. runs `ctest -L gpu` (kernels vs the CPU backend, the one-GPU training
#    step vs the CPU model and its loss falling, NCCL with one rank,
#    ring attention over 1/2/4 ranks sharing the GPU through host staging,
#    CUDA-graph replay);
# 4. runs the kernel benchmarks (bench/cuda) into $OUT/cuda-benchmarks.md.
# Every step logs to $OUT and a failed step does not stop the later ones, so
# one run brings back everything it could do; the exit status is that of the
# first failed step. $OUT/summary.txt lists the steps and their results.
# Step limits add up to about 11 minutes in the worst case; a normal run
# (build about 3 minutes on 16 cores) takes about 6. Needs what the CPU build
# needs (LLVM 14, ANTLR, fmt, GoogleTest, OpenMPI, OpenBLAS; scripts/setup.sh)
# plus CUDA 13 with NCCL.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/device-out}"
build="${MOEC_GPU_BUILD_DIR:-$root/build-gpu}"
arch="${CMAKE_CUDA_ARCHITECTURES:-90}"
mkdir -p "$out"
cd "$root"
export OUT="$out" MOEC_CUDA_BUILD_DIR="$build"
status=0
summary="$out/summary.txt"
: >"$summary"

step() { # step NAME TIMEOUT_S COMMAND...
  local name="$1" limit="$2"
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s" | tee -a "$summary"
  if [ $rc -ne 0 ] && [ $status -eq 0 ]; then status=$rc; fi
  return $rc
}

step env 60 bash -c 'nvidia-smi; nvcc --version; cmake --version; mpirun --version; nproc; free -g'
step configure 120 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMOEC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch"
targets="moert-cuda-kernel-test moert-cuda-model-test moert-cuda-nccl-test moert-cuda-ring-test moert-cuda-graph-test moert-cuda-graph-policy-test moert-cuda-bench"
step build 240 ninja -C "$build" -j"$(nproc)" $targets
step ctest-gpu 200 ctest --test-dir "$build" -L gpu --output-on-failure
step graph-policy 30 ctest --test-dir "$build" -R moert-cuda-graph-policy --output-on-failure
step bench 120 "$root/bench/cuda/run.sh"
cp "$build/Testing/Temporary/LastTest.log" "$out/ctest-LastTest.log" 2>/dev/null
echo "results in $out; first failing status: $status" | tee -a "$summary"
exit $status
