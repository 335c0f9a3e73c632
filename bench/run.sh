#!/usr/bin/env bash
# Builds a Release moec into build/ (scripts/build.sh) and runs the `moec check`
# speed benchmark, which rewrites its section of docs/benchmarks.md.
# Extra arguments go to check_speed.py (e.g. --runs 50, --no-write, --strict).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/../scripts/build.sh"
exec python3 "$here/check_speed.py" --moec "$here/../build/tools/moec/moec" "$@"
