#!/usr/bin/env bash
# Fresh machine to a trained model: installs the dependencies, builds bivouac (Release)
# into build/ and trains GCN on the built-in synthetic graph (configs/quickstart.yaml).
#   scripts/quickstart.sh                 # one run, output in runs/quickstart-<time>/
#   scripts/quickstart.sh --repeat 3      # extra arguments go to `bivouac run`
# BIVOUAC_JOBS sets the build's parallelism (default: every core).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
jobs="${BIVOUAC_JOBS:-$(nproc)}"

echo "== installing dependencies (scripts/install-deps.sh)"
scripts/install-deps.sh

echo "== building bivouac (Release, without the tests) into build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBIVOUAC_TESTS=OFF -DBIVOUAC_SANITIZE=OFF
cmake --build build -j "$jobs"

echo "== build/bivouac run configs/quickstart.yaml $*"
build/bivouac run configs/quickstart.yaml "$@"
