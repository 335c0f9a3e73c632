#!/usr/bin/env bash
# Installs the Debian packages moec needs to build and test, when missing.
# Silent and fast when everything is present; safe to run repeatedly.
set -euo pipefail

packages=(
  cmake ninja-build g++ python3 python3-venv python3-pip   # pip: the cuDNN frontend's headers, below
  antlr4 libantlr4-runtime-dev default-jre-headless
  llvm-14-dev llvm-14-tools
  libfmt-dev libtomlplusplus-dev libyaml-cpp-dev
  googletest libgtest-dev
  libopenmpi-dev openmpi-bin libopenblas-dev
  libpng-dev libjpeg-dev   # moerun-mkdata --images decodes PNG and JPEG files
  clang-14 libclang-rt-14-dev
  clang-format-14   # the house style (.clang-format), checked by the style.clang-format test
  chromium
  procps   # pgrep, for the moec run interruption test
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# cuDNN's C++ frontend (header-only; PyPI's nvidia-cudnn-frontend wheel carries
# the headers), for the CUDA backend's fused attention. Fetched only where the
# CUDA toolkit has cuDNN; without it the CUDA backend builds without cuDNN
# attention (cmake/MoecCuda.cmake says which).
cudnn_frontend_version=1.32.0
cudnn_frontend="${XDG_CACHE_HOME:-$HOME/.cache}/moec/cudnn-frontend-$cudnn_frontend_version"
if command -v nvcc >/dev/null && [ -f "$(dirname "$(command -v nvcc)")/../include/cudnn.h" ] &&
  [ ! -f "$cudnn_frontend/include/cudnn_frontend.h" ]; then
  wheels="$(mktemp -d)"
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" \
    "nvidia-cudnn-frontend==$cudnn_frontend_version" 2>/dev/null; then
    mkdir -p "$cudnn_frontend.tmp"
    python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])' \
      "$(ls "$wheels"/*.whl | head -1)" "$cudnn_frontend.tmp"
    rm -rf "$cudnn_frontend" && mv "$cudnn_frontend.tmp" "$cudnn_frontend"
  else
    echo "setup: could not fetch nvidia-cudnn-frontend $cudnn_frontend_version from PyPI;" \
      "the CUDA backend builds without cuDNN attention" >&2
  fi
  rm -rf "$wheels"
fi
