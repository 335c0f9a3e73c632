#!/usr/bin/env bash
# Sets up, builds, and runs moec on the bundled examples.
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
exit $status
