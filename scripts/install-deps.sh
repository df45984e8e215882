#!/usr/bin/env bash
# Installs bivouac's build and test dependencies from Debian packages (apt-get only).
# Safe to run more than once; skips apt when everything is already present.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libffi-dev libzmq3-dev libopenblas-dev libyaml-dev liblua5.4-dev
  libcmocka-dev libmetis-dev libcairo2-dev libfontconfig-dev fonts-dejavu-core
  libcurl4-openssl-dev etcd-server
  libprotobuf-c-dev protobuf-c-compiler
)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
