#!/usr/bin/env bash
# A compute plugin with memory of its own (ABI 1.10 mem_alloc, as the cuda plugin's managed
# memory): the core takes the engines' buffers from it, and every one of them must come back
# through bv_free_aligned. tests/plugins/compute_memcheck.c gives mapped memory that free()
# refuses, with the cpu kernels, and ABI 1.17's zero and copy_rows: GCN and the transformer
# train with it to the same losses as with the cpu plugin, to the bit. GAT takes its path
# for a back end with memory of its own (gat.c, on_device: its attention terms as gemms,
# not host loops), whose sums differ from the host loops' in their rounding: its loss is
# the cpu's within 1e-6, relative. With the plugin's memory full, the data is host memory
# and the graph engine cuts the vertices into intervals again.
# Environment (set by ctest): BIVOUAC, BIVOUAC_BUILD_DIR, BIVOUAC_PLUGIN_PATH.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${BIVOUAC_BUILD_DIR:-$(dirname "$BIVOUAC")}
mc="$build/test-plugins/memcheck"
[ -f "$mc/compute_memcheck.so" ] || { echo "FAIL: no $mc/compute_memcheck.so"; exit 1; }
export BIVOUAC_PLUGIN_PATH="$mc${BIVOUAC_PLUGIN_PATH:+:$BIVOUAC_PLUGIN_PATH}"
# shellcheck source=check_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.bash"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-device-memory.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

for model in gcn gat; do
    cat >"$tmp/$model.yaml" <<YAML
model: {plugin: $model}
dataset: {synthetic: communities, nodes: 600, features: 40, classes: 4, val: 100, test: 200,
          seed: 3}
train: {epochs: 6, seed: 5}
engine: {intervals: 3}
compute: {plugin: cpu, threads: 2}
YAML
done

# loss MODEL CONFIG PLUGIN ARGS...: the run's final train_loss (the whole line: every digit)
loss() {
    local name=$1 config=$2 plugin=$3
    shift 3
    if ! "$BIVOUAC" run "$config" --out "$tmp/$name-$plugin" --quiet \
        -s compute.plugin="$plugin" "$@" >"$tmp/$name-$plugin.out" 2>"$tmp/$name-$plugin.err"
    then
        echo "FAIL: $name with $plugin:" >&2
        cat "$tmp/$name-$plugin.err" >&2
        echo "failed with $plugin" # never equal to the other run's, failed or not
        return
    fi
    field "$tmp/$name-$plugin" train_loss
}

want=$(loss gcn "$tmp/gcn.yaml" cpu)
check "gcn: the same loss with the plugin's memory ($want)" \
    "$(loss gcn "$tmp/gcn.yaml" memcheck)" "$want"
want=$(loss gat "$tmp/gat.yaml" cpu)
got=$(loss gat "$tmp/gat.yaml" memcheck)
check "gat: the loss with the plugin's memory ($got) is the cpu's ($want) within 1e-6" \
    "$(awk -v a="${want#*: }" -v b="${got#*: }" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d;
        print (a == a + 0 && b == b + 0 && d <= 1e-6) ? "yes" : "no" }')" yes
# A back end whose memory is full (BIVOUAC_MEMCHECK_LIMIT_MB, as a GPU's): the data goes
# to host memory, the graph engine cuts the vertices into intervals again (one per 65,536:
# a task's operands are then copied in per call, one interval at a time), and the loss is
# the cpu's, to the bit.
cat >"$tmp/big.yaml" <<YAML
model: {plugin: gcn}
dataset: {synthetic: communities, nodes: 70000, features: 40, classes: 4, val: 100, test: 200,
          seed: 3, feature_storage: dense}
train: {epochs: 2, seed: 5}
compute: {plugin: cpu, threads: 2}
YAML
want=$(loss big "$tmp/big.yaml" cpu)
check "a full back-end memory: the cpu's loss ($want)" \
    "$(BIVOUAC_MEMCHECK_LIMIT_MB=0.5 loss big "$tmp/big.yaml" memcheck)" "$want"
check "... saying so, and cutting the graph into 2 intervals" \
    "$(grep -c -e "the compute back end's memory cannot hold a block of 1.1 MB" \
        -e "graph engine: 2 intervals (the data did not fit" "$tmp/big-memcheck.err")" 2
check "an unbounded one: 1 interval" \
    "$(loss big-free "$tmp/big.yaml" memcheck >/dev/null;
       grep -c "graph engine: 1 interval (the compute back end's memory holds" \
           "$tmp/big-free-memcheck.err")" 1

tf=(-s train.steps=12 -s train.eval_interval=12 -s train.eval_iters=2
    -s train.final_eval_iters=2 -s resilience.0.every=12)
want=$(loss transformer "$BIVOUAC_SOURCE_DIR/configs/transformer-shakespeare.yaml" cpu "${tf[@]}")
check "transformer: the same loss with the plugin's memory ($want)" \
    "$(loss transformer "$BIVOUAC_SOURCE_DIR/configs/transformer-shakespeare.yaml" memcheck \
        "${tf[@]}")" "$want"
finish
