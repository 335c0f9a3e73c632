#!/usr/bin/env bash
# Create (once) and cache the Python venv used by the Megatron differential suite
# (test/megatron/). It holds the REAL Megatron-Core 0.16.1 and Megatron-Bridge 0.3.1 from
# PyPI on top of real torch; Bridge is installed with --no-deps so that none of its
# GPU-only dependencies (transformer_engine, mamba_ssm, causal_conv1d, fla,
# nvidia_resiliency_ext, ...) is pulled in: test/megatron/stubs/ stands in for them at
# import time. Only pure-Python dependencies needed to import and run the config and
# validation code are installed, with pinned versions.
#
# Usage: scripts/megatron-venv.sh            -> prints the venv's python on stdout
# Env:   MOEC_MEGATRON_VENV  venv directory (default $XDG_CACHE_HOME/moec/megatron-bridge-0.3.1)
#        MOEC_MEGATRON_WHEELS  optional directory with pre-downloaded wheels (pip --find-links)
#        PYTHON               interpreter to build the venv with (default python3; must be 3.10-3.12)
# The venv is rebuilt only when the pinned package list below changes (stamp file).
set -euo pipefail

VENV="${MOEC_MEGATRON_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/moec/megatron-bridge-0.3.1}"
PY="${PYTHON:-python3}"

# Pinned packages. Changing this list rebuilds the venv.
DEPS=(
  "torch==2.9.1"
  "numpy==2.2.6"
  "packaging==25.0"
  "einops==0.8.1"
  "omegaconf==2.3.0"
  "hydra-core==1.3.2"
  "pyyaml==6.0.2"
  "typing-extensions==4.15.0"
  "tqdm==4.67.1"
  "regex==2024.11.6"
  "six==1.17.0"
  "rich==14.0.0"
  "transformers==4.57.1"
  # the reference of moerun-mkdata --images (test/megatron/image_patches.py): PIL's decoders and
  # bicubic resampling, which transformers' Qwen2VLImageProcessor runs
  "pillow==13.0.0"
  # imported at module level by megatron.bridge (data/datasets/sft.py, data/energon/...)
  "datasets==3.6.0"
  "megatron-energon==6.0.1"
)
NODEPS=(
  "megatron-core==0.16.1"
  "megatron-bridge==0.3.1"
)
STAMP_TEXT="$(printf '%s\n' "python=$("$PY" -c 'import sys;print("%d.%d"%sys.version_info[:2])')" "${DEPS[@]}" -- "${NODEPS[@]}")"
STAMP="$VENV/.moec-stamp"

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]]; then
  echo "$VENV/bin/python"
  exit 0
fi

# Two tests may ask at once (ctest -j): one builds, the other waits and reuses it.
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]]; then
  echo "$VENV/bin/python"
  exit 0
fi

{
  echo "megatron-venv: building $VENV"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
  PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check --no-input)
  if [[ -n "${MOEC_MEGATRON_WHEELS:-}" ]]; then PIP+=(--find-links "$MOEC_MEGATRON_WHEELS"); fi
  "${PIP[@]}" "${DEPS[@]}"
  "${PIP[@]}" --no-deps "${NODEPS[@]}"
  # Sanity: the GPU-only packages must not be present (the stubs replace them).
  "$VENV/bin/python" - <<'PYEOF'
import importlib.util, sys
bad = [m for m in ("transformer_engine", "apex", "mamba_ssm", "causal_conv1d", "fla",
                   "nvidia_resiliency_ext", "grouped_gemm", "deep_ep")
       if importlib.util.find_spec(m) is not None]
if bad:
    sys.exit("megatron-venv: GPU-only packages installed, remove them: %s" % bad)
PYEOF
  printf '%s' "$STAMP_TEXT" > "$STAMP"
  echo "megatron-venv: done"
} >&2

echo "$VENV/bin/python"
