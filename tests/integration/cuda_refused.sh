#!/usr/bin/env bash
# An experiment that asks for the cuda backend on a machine without a GPU gets one clear
# error, file:line:column, exit 2, and nothing is written (issue 17). The GPU is hidden
# with CUDA_VISIBLE_DEVICES="", so this runs on a GPU machine too. Skipped (77) where the
# cuda plugin is not built (no CUDA toolkit, or a sanitizer build).
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
plugins=$(dirname "$BIVOUAC")/plugins
if [ ! -f "$plugins/compute_cuda.so" ]; then
    echo "SKIP: $plugins/compute_cuda.so is not built (no CUDA toolkit, or a sanitizer build)"
    exit 77
fi
# shellcheck source=check_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.bash"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-cuda-refused.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/exp.yaml" <<'YAML'
model: {plugin: gcn}
compute: {plugin: cuda}
dataset: {synthetic: communities, nodes: 200, features: 16, classes: 3}
train: {epochs: 2}
YAML
rc=0
CUDA_VISIBLE_DEVICES="" "$BIVOUAC" run "$tmp/exp.yaml" --out "$tmp/run" >"$tmp/out" 2>"$tmp/err" ||
    rc=$?
check "run exits 2" "$rc" 2
check "one error, at the plugin's name" \
    "$(grep -c 'error:' "$tmp/err")" 1
check "the error names the file, the position and the reason" \
    "$(grep -o "^$tmp/exp.yaml:2:19: error: compute plugin 'cuda' cannot run here: no GPU" \
        "$tmp/err")" "$tmp/exp.yaml:2:19: error: compute plugin 'cuda' cannot run here: no GPU"
check "nothing written" "$(ls "$tmp/run" 2>/dev/null | wc -l)" 0
check "bivouac plugins says so too" \
    "$(CUDA_VISIBLE_DEVICES="" "$BIVOUAC" plugins | grep -A2 '^compute cuda' | tail -1 | cut -c1-29)" \
    "    cannot run here: no GPU ("
finish
