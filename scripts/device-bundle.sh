#!/usr/bin/env bash
# Prepares, on the build machine, what scripts/device-check.sh runs on a GPU
# machine that cannot build the project (no LLVM, ANTLR, fmt, GoogleTest,
# OpenMPI or OpenBLAS there, and no network to install them):
#
#   scripts/device-bundle.sh [BUILD_DIR]      # default: build/
#
# builds the GPU test programs and the kernel benchmark in BUILD_DIR
# (configured with MOEC_CUDA=ON), then writes device-bundle/bundle.tar.xz
# (git-ignored), which holds:
#   bin/       the programs;
#   lib/       the shared libraries they need that are not the C/C++ runtime
#              or CUDA's (OpenBLAS, OpenMPI, libevent, hwloc, gfortran);
#   usr/       OpenMPI's and PMIx's installed trees (mpiexec, orted, their
#              plugins), relocated there through OPAL_PREFIX;
#   step_h200.toml  the plan of bench/cuda/step_h200.moe, whose training
#              step moerun measures against the plan;
#   tests.tsv  the GPU tests as ctest lists them (label "gpu"): name, time
#              limit, environment, mpiexec's options, program and arguments;
#   env.sh     the environment that makes the tree usable where it lands.
# The device machine takes CUDA's own libraries (cuBLAS, NCCL, cuDNN) from its
# CUDA installation. The file is about 12 MB; copy device-bundle/ into the
# GPU machine's checkout and run scripts/device-check.sh there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
bundle="$root/device-bundle"

if ! grep -q '^MOEC_CUDA:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "device-bundle: $build is not configured with -DMOEC_CUDA=ON" >&2
  exit 1
fi

# The GPU tests, from ctest itself, so the list and the ranks are the ones
# test/runtime/cuda/CMakeLists.txt declares.
tests_json="$(cd "$build" && ctest -N -L gpu --show-only=json-v1)"
paths="$(python3 -c '
import json, sys
tests = json.loads(sys.argv[1])["tests"]
print(" ".join(sorted({a for t in tests for a in t["command"] if a.startswith(sys.argv[2])})))' \
  "$tests_json" "$build")"
cmake --build "$build" --target $(for p in $paths; do basename "$p"; done) moert-cuda-bench \
  moert-host-staging-bench moerun moec -- -j"$(nproc)"

rm -rf "$bundle.tmp"
mkdir -p "$bundle.tmp/bin" "$bundle.tmp/lib"
# shellcheck disable=SC2086 # a list of paths without spaces (the build tree's)
cp $paths "$bundle.tmp/bin/"
cp "$build/bench/cuda/moert-cuda-bench" "$build/bench/cuda/moert-host-staging-bench" "$build/tools/moerun/moerun" \
  "$bundle.tmp/bin/"
# moerun's plans, made here (moec does not travel).
"$build/tools/moec/moec" plan --quiet "$root/bench/cuda/step_h200.moe" -o "$bundle.tmp/step_h200.toml" 2>/dev/null
"$build/tools/moec/moec" plan --quiet "$root/examples/runtime/tiny_moe_cpu.moe" -o "$bundle.tmp/tiny_moe.toml" \
  2>/dev/null

python3 - "$tests_json" "$build" "$bundle.tmp/tests.tsv" <<'PY'
import json, os, sys
tests, build, out = json.loads(sys.argv[1])["tests"], sys.argv[2], sys.argv[3]
with open(out, "w") as f:
    for t in tests:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        cmd = t["command"]
        program = next(i for i, a in enumerate(cmd) if a.startswith(build))
        launcher = cmd[1:program]  # mpiexec's options, "-np N" included
        args = [os.path.basename(cmd[program])] + cmd[program + 1:]
        env = " ".join(props.get("ENVIRONMENT", []))
        f.write("\t".join([t["name"], str(int(props.get("TIMEOUT", 90))), env,
                           " ".join(launcher), " ".join(args)]) + "\n")
PY

# OpenMPI and PMIx as Debian installs them, every file of their packages.
for pkg in openmpi-bin libopenmpi3 openmpi-common libpmix2; do
  dpkg -L "$pkg" | while read -r f; do
    if [ -f "$f" ] || [ -L "$f" ]; then
      cp -a --parents "$f" "$bundle.tmp/" 2>/dev/null || true
    fi
  done
done
rm -rf "$bundle.tmp/usr/share/doc" "$bundle.tmp/usr/share/man" \
  "$bundle.tmp/usr/lib/x86_64-linux-gnu/openmpi/include" "$bundle.tmp/usr/lib/x86_64-linux-gnu/"*java*

# Shared libraries of the programs and of OpenMPI's tools, except the C
# library (the device's own is newer) and CUDA's (the device's matches its
# driver); the C++ runtime the programs were built with travels with them.
system='^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn[a-z_]*|libnvrtc|libnvJitLink)\.so'
# OpenMPI's plugins for networks a single machine lacks (UCX, libfabric,
# verbs, PSM) fail to load there and are skipped, so their libraries stay out.
for f in "$bundle.tmp"/bin/* /usr/bin/orterun /usr/bin/orted; do
  ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! [[ "$name" =~ $system ]] && [ ! -e "$bundle.tmp/usr/lib/x86_64-linux-gnu/$name" ]; then
    cp -L "$path" "$bundle.tmp/lib/$name"
  fi
done

cat >"$bundle.tmp/env.sh" <<'SH'
# Sourced by scripts/device-check.sh: OpenMPI relocated into this folder, the
# bundled libraries first, then CUDA's libraries wherever the machine has them.
bundle="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
multiarch="$bundle/usr/lib/x86_64-linux-gnu"
cuda_libs=""
for lib in libcublas.so.13 libnccl.so.2 libcudnn.so.9 libnvrtc.so.13; do
  found="$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name "$lib" 2>/dev/null | head -1)"
  [ -n "$found" ] && cuda_libs="$cuda_libs:$(dirname "$found")"
done
export PATH="$bundle/bin:$bundle/usr/bin:$PATH"
export LD_LIBRARY_PATH="$bundle/lib:$multiarch:$multiarch/openmpi/lib:$multiarch/pmix2/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$bundle/usr"
export PMIX_INSTALL_PREFIX="$multiarch/pmix2"
export PMIX_MCA_mca_base_component_path="$multiarch/pmix2/lib/pmix"
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MOEC_DEVICE_MPIEXEC="$bundle/usr/bin/orterun"
SH

# One compressed file travels (OpenBLAS alone is 36 MB unpacked); the device
# script unpacks it.
rm -rf "$bundle"
mkdir -p "$bundle"
tar -C "$bundle.tmp" -cf - . | xz -T0 -6 >"$bundle/bundle.tar.xz"
rm -rf "$bundle.tmp"
echo "device-bundle: $(du -h "$bundle/bundle.tar.xz" | cut -f1) in $bundle/bundle.tar.xz" \
  "($(tar -xJOf "$bundle/bundle.tar.xz" ./tests.tsv | wc -l) GPU tests)"
