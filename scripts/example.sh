#!/usr/bin/env bash
# Sets up, builds, and runs moec on the bundled examples: checks the seed
# recipes, writes a launch plan, and trains a small plan on the CPU runtime.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh"
moec="${MOEC_BUILD_DIR:-$root/build}/tools/moec/moec"
status=0
for f in "$root"/examples/long-context/*.moe "$root"/examples/vlm/*.moe; do
  echo "== moec check ${f#$root/}"
  "$moec" check "$f" || status=$?
done
echo "== moec plan examples/long-context/dsv3_256k_h100.moe -o build/dsv3_256k_h100.plan.toml"
"$moec" plan "$root/examples/long-context/dsv3_256k_h100.moe" -o "${MOEC_BUILD_DIR:-$root/build}/dsv3_256k_h100.plan.toml"
# The runtime's CPU backend: compile a small MoE recipe and train it for 30 steps
# on 4 MPI ranks (pipeline 2 x expert parallel 2); the loss falls step by step.
echo "== moec run examples/runtime/tiny_moe_cpu.moe --np 4 --steps 30"
"$moec" run "$root/examples/runtime/tiny_moe_cpu.moe" --np 4 --steps 30 || status=$?
exit $status
