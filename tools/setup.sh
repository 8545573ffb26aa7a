#!/usr/bin/env bash
# Installs what wmap needs on Debian 12 (only what is missing). Run as root or with sudo.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libboost-filesystem-dev libyaml-cpp-dev libre2-dev libspdlog-dev libfmt-dev
  libsimdjson-dev libcli11-dev libxxhash-dev clang-format nlohmann-json3-dev libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy clang libclang-rt-14-dev util-linux pybind11-dev python3-pybind11 python3-torch
  libopenmpi-dev openmpi-bin
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "wmap setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
