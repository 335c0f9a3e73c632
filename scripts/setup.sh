#!/usr/bin/env bash
# Installs the Debian packages moec needs to build and test, when missing.
# Silent and fast when everything is present; safe to run repeatedly.
set -euo pipefail

packages=(
  cmake ninja-build g++ python3 python3-venv
  antlr4 libantlr4-runtime-dev default-jre-headless
  llvm-14-dev llvm-14-tools
  libfmt-dev libtomlplusplus-dev libyaml-cpp-dev
  googletest libgtest-dev
  libopenmpi-dev openmpi-bin libopenblas-dev
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
