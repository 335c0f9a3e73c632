#!/usr/bin/env bash
# THE script a session with a GPU runs on the device machine (one H200 here),
# from the repository root, within about 10 minutes:
#
#   scripts/device-check.sh            # results under $OUT (or ./device-out)
#
# The device machine has CUDA but not the project's other build dependencies
# (LLVM, ANTLR, fmt, GoogleTest, OpenMPI, OpenBLAS) and no network, so the
# programs are built beforehand on the build machine and travel as one file:
#
#   scripts/device-bundle.sh   # build machine: writes device-bundle/bundle.tar.xz
#   scripts/device-check.sh    # GPU machine, in a checkout that has device-bundle/
#
# Without a bundle (a machine that has everything) it configures build-gpu/
# with -DMOEC_CUDA=ON (sm_90; set CMAKE_CUDA_ARCHITECTURES for other GPUs) and
# makes the bundle there first. Then:
# 1. records the GPU and toolchain (nvidia-smi, nvcc);
# 2. runs every GPU test (ctest label "gpu", listed in the bundle's tests.tsv)
#    under the bundled mpiexec: kernels and the compute backend against the
#    CPU backend, the caching allocator, NCCL with one rank, ring attention
#    over 1/2/4 ranks sharing the GPU through host staging, CUDA-graph replay;
# 3. runs the kernel benchmarks into $OUT/cuda-benchmarks.md;
# 4. trains the bundled example (examples/runtime/tiny_moe_cpu.moe, 4 ranks)
#    with moerun for 20 steps on the CUDA backend, then on the host backend;
# 5. trains bench/cuda/step_h200.moe's plan (a real-sized layer stack on one
#    GPU) with moerun on the CUDA backend for 3 steps, its step log in
#    $OUT/step-h200.jsonl beside the plan's predictions;
# 6. runs the kernel test again under compute-sanitizer (memcheck, then
#    racecheck) where the machine has it.
# A failed step does not stop the later ones, so one run brings back
# everything it could do; the exit status is that of the first failed step.
# $OUT gets summary.txt, device-report.md (each step's tests passed, failed
# or skipped), cuda-benchmarks.md, step-h200.jsonl and logs.tar.gz; on the build
# machine, scripts/device-results.py $OUT puts their tables into docs/benchmarks.md.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/device-out}"
mkdir -p "$out"
cd "$root"
export OUT="$out"
status=0
summary="$out/summary.txt"
: >"$summary"

# Step logs go to logs/ and travel back as one logs.tar.gz at the end (the
# device tool returns at most 8 files).
logs="$out/logs"
mkdir -p "$logs"
report="$out/device-report.md"
printf '| step | result | s |\n| --- | --- | ---: |\n' >"$report"

step() { # step NAME TIMEOUT_S COMMAND...
  local name="$1" limit="$2"
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s" | tee -a "$summary"
  # GoogleTest's own count where the step ran tests, else the exit status.
  local result
  result="$(sed 's/\x1b\[[0-9;]*m//g' "$logs/$name.log" |
    grep -E '^\[  PASSED  \] [0-9]+ tests?|^\[  FAILED  \] [0-9]+ tests?|^\[  SKIPPED \] [0-9]+ tests?' |
    sed -E 's/^\[ *([A-Z]+) *\] ([0-9]+) tests?.*/\2 \1/' | tr 'A-Z\n' 'a-z,' | sed 's/,$//; s/,/, /g')"
  [ -z "$result" ] && result="exit $rc"
  [ $rc -ne 0 ] && result="$result (exit $rc)"
  echo "| $name | $result | $((SECONDS - start)) |" >>"$report"
  if [ $rc -ne 0 ] && [ $status -eq 0 ]; then status=$rc; fi
  return $rc
}

step env 60 bash -c 'nvidia-smi; nvcc --version; nproc; free -g; cat /etc/os-release'

if [ ! -f device-bundle/bundle.tar.xz ]; then
  build="${MOEC_GPU_BUILD_DIR:-$root/build-gpu}"
  step configure 120 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMOEC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}"
  step bundle 300 "$root/scripts/device-bundle.sh" "$build"
fi
unpacked="${TMPDIR:-/tmp}/moec-device-bundle"
rm -rf "$unpacked" && mkdir -p "$unpacked"
step unpack 60 tar -C "$unpacked" -xJf device-bundle/bundle.tar.xz
# shellcheck source=/dev/null
source "$unpacked/env.sh"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$logs/env.log"

# One step per GPU test, as ctest would run it.
# (The list comes in on fd 3: mpiexec forwards stdin to rank 0.)
while IFS=$'\t' read -r -u 3 name limit env launcher program; do
  # shellcheck disable=SC2086 # env, launcher and program are word lists
  # On a GPU each test takes seconds: a hang must not eat the lease.
  [ "$limit" -gt 60 ] && limit=60
  step "${name#runtime.}" "$limit" env $env "$MOEC_DEVICE_MPIEXEC" $launcher $program
done 3<"$unpacked/tests.tsv"

step bench 120 moert-cuda-bench --out "$out/cuda-benchmarks.md"
# Moving activations to the device and back: rounded there (what the CUDA
# backend does) against rounded on the host.
step host-staging 60 bash -c 'moert-host-staging-bench | tee "$OUT/host-staging.txt"'

# moerun trains the bundled example (pp 2 x ep 2, 4 ranks on the one GPU) on
# the CUDA backend, then on the host backend: the step lines of both are in
# logs/moerun-*.log.
for backend in cuda cpu; do
  step "moerun-$backend" 120 "$MOEC_DEVICE_MPIEXEC" --oversubscribe --mca btl self,vader -np 4 \
    moerun "$unpacked/tiny_moe.toml" --backend "$backend" --steps 20
done

# A real-sized step: about 1.8e9 parameters initialised on the host (about 85
# s), then steps whose first warms the caching allocator.
step moerun-step-h200 240 "$MOEC_DEVICE_MPIEXEC" -np 1 moerun "$unpacked/step_h200.toml" --backend cuda \
  --steps 3 --log "$out/step-h200.jsonl"

if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    step "sanitizer-$tool" 90 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      "$MOEC_DEVICE_MPIEXEC" --oversubscribe --mca btl self,vader -np 1 \
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$unpacked/bin/moert-cuda-kernel-test" \
      --gtest_filter=-*Cudnn* # our kernels, not cuDNN's
  done
fi
tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
echo "results in $out; first failing status: $status" | tee -a "$summary"
exit $status
