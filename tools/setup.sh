#!/usr/bin/env bash
# Installs what wmap needs on Debian 12 (only what is missing). Run as root or with sudo.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libboost-filesystem-dev libyaml-cpp-dev libre2-dev libspdlog-dev libfmt-dev
  libsimdjson-dev libcli11-dev libxxhash-dev clang-format nlohmann-json3-dev libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy clang libclang-rt-14-dev util-linux pybind11-dev python3-pybind11 python3-torch
  libopenmpi-dev openmpi-bin
  libcurl4-openssl-dev curl
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The remote-source tests' servers (tests/remote/README.md). Checked by command, not package: a
# NodeSource nodejs bundles npm (and conflicts with Debian's), another nginx flavour serves as well.
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "wmap setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  # RUNLEVEL=1: nginx's postinst does not start a system nginx on :80 (the tests start their own).
  $SUDO env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq "${missing[@]}"
fi
# s3rver, pinned by tests/servers/package-lock.json.
servers="$(cd "$(dirname "$0")/.." && pwd)/tests/servers"
if [ ! -d "$servers/node_modules/s3rver" ]; then
  echo "wmap setup: npm ci in tests/servers"
  npm ci --prefix "$servers" --no-audit --no-fund --prefer-offline --loglevel=error >/dev/null
fi
