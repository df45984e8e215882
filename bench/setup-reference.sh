#!/usr/bin/env bash
# Creates bench/.venv with the reference implementations' dependencies: PyTorch (CPU
# build when its index is reachable, else the default PyPI wheel) and PyTorch Geometric.
# This is the only place the project uses PyPI; the build and the tests never need it.
#   bench/setup-reference.sh            # create or update bench/.venv
#   BENCH_PYTHON=/usr/bin/python3 bench/setup-reference.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
py="${BENCH_PYTHON:-python3}"

if ! command -v "$py" >/dev/null 2>&1; then
  echo "setup-reference: $py not found; install the Debian package python3" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv"; then
    echo "setup-reference: '$py -m venv' failed; install the Debian package python3-venv" >&2
    rm -rf "$venv"
    exit 1
  fi
fi

pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
# The CPU-only wheel is ~200 MB against ~3 GB for the default (CUDA) one; use its index
# when it answers. Either wheel runs the CPU kernels the benchmark measures.
cpu_index="https://download.pytorch.org/whl/cpu"
if "$venv/bin/python" - "$cpu_index" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=10)
PY
then
  echo "setup-reference: installing torch (CPU wheel)"
  "${pip[@]}" --index-url "$cpu_index" torch
else
  echo "setup-reference: CPU wheel index unreachable; installing torch from PyPI (large)"
  "${pip[@]}" torch
fi
# PyG is pure Python from 2.3 on; its optional C++ extensions (torch_scatter,
# torch_sparse) are not installed: the reference uses torch's own sparse and scatter ops.
"${pip[@]}" numpy pyyaml torch_geometric
"$venv/bin/python" -c 'import torch, torch_geometric; print("setup-reference: torch", torch.__version__, "torch_geometric", torch_geometric.__version__)'
