#!/usr/bin/env bash
# Sparse features stay sparse (dataset.feature_storage, docs/configuration.md): on a wide
# bag-of-words graph (20,000 vertices x 8,192 words, ~33 per vertex) the run holds them as
# a CSR (result.json: features_sparse 1, features_mb the CSR's bytes) and its peak memory
# stays below one dense copy of them (625 MB); `dense` holds that copy (its peak above it)
# and trains the same weights, bit for bit. On Cora, GCN and GAT give the same weights
# from sparse and dense features, and GCN's roles as processes (the features packed to
# the worker processes) the weights of its roles in one process (the workers view the
# dataset's rows), leaving no process or socket directory behind.
# Environment (set by ctest): BIVOUAC (the binary), BIVOUAC_DATA_DIR, BIVOUAC_SOURCE_DIR.
set -euo pipefail

: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with cora/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$BIVOUAC_SOURCE_DIR/tests/integration/check_lib.bash"
source "$BIVOUAC_SOURCE_DIR/tests/integration/procs_lib.bash"
configs="$BIVOUAC_SOURCE_DIR/configs"

procs_setup sparse # $tmp; the runs' socket directories in $TMPDIR
export BIVOUAC_CACHE_DIR=$tmp/cache

# train NAME EXPERIMENT ARGS...: a run that must succeed, into $tmp/NAME.
train() {
    local name=$1 experiment=$2
    shift 2
    run "$tmp/$name" run "$experiment" --out "$tmp/$name" --quiet --no-plot "$@"
    [ "$rc" = 0 ] || { cat "$tmp/$name.err" >&2; echo "FAIL: $name exited $rc" >&2; exit 1; }
}
value() { field "$1" "$2" | sed 's/^[^:]*: *//; s/"//g'; }

cat >"$tmp/wide.yaml" <<'YAML'
name: wide-sparse
model: {plugin: gcn, hidden: 16, dropout: 0.5}
dataset: {synthetic: communities, nodes: 20000, features: 8192, classes: 10, avg_degree: 10,
          feature_density: 0.004, train_per_class: 20, val: 500, test: 1000}
train: {epochs: 3, seed: 7}
compute: {plugin: cpu, threads: 2}
YAML
train wide "$tmp/wide.yaml"
train wide-dense "$tmp/wide.yaml" -s dataset.feature_storage=dense
nnz=$(value "$tmp/wide" features_nonzero)
check "wide: auto keeps the features sparse" "$(value "$tmp/wide" features_sparse)" 1
check "wide: ~33 words a vertex" "$(python3 -c "print(600000 < $nnz < 660000)")" True
check "wide: features_mb is the CSR's bytes, (rows + 1) x 8 + nnz x 8" \
    "$(python3 -c "print(abs($(value "$tmp/wide" features_mb) - (20001 * 8 + $nnz * 8) / 2**20) < 1e-6)")" True
check "wide: peak memory below one dense copy of the features (625 MB)" \
    "$(python3 -c "print($(value "$tmp/wide" peak_rss_mb) < 20000 * 8192 * 4 / 2**20)")" True
check "wide, dense: features_sparse 0, the same nonzeros" \
    "$(value "$tmp/wide-dense" features_sparse) $(value "$tmp/wide-dense" features_nonzero)" "0 $nnz"
check "wide, dense: its peak memory holds the dense copy" \
    "$(python3 -c "print($(value "$tmp/wide-dense" peak_rss_mb) > 20000 * 8192 * 4 / 2**20)")" True
check "wide: sparse and dense train the same weights" \
    "$(value "$tmp/wide" params_crc32c)" "$(value "$tmp/wide-dense" params_crc32c)"

for model in gcn gat; do
    train "$model" "$configs/$model-cora.yaml" -s train.epochs=10
    train "$model-dense" "$configs/$model-cora.yaml" -s train.epochs=10 \
        -s dataset.feature_storage=dense
    check "$model on Cora: sparse ($(value "$tmp/$model" features_sparse)) and dense ($(value "$tmp/$model-dense" features_sparse)) give the same weights" \
        "$(value "$tmp/$model" params_crc32c)" "$(value "$tmp/$model-dense" params_crc32c)"
done
# GCN's roles as processes of the local cloud, with Cora's rows packed to the workers
train threads "$configs/gcn-cora.yaml" -s train.epochs=10 \
    -s 'engine={intervals: 8}'
train procs "$configs/gcn-cora.yaml" -s train.epochs=10 \
    -s 'engine={intervals: 8}' -s 'cluster={tensor_workers: 2}' -s 'cloud={plugin: local}'
check "GCN on Cora, roles as processes: the weights of the roles as threads" \
    "$(value "$tmp/procs" params_crc32c)" "$(value "$tmp/threads" params_crc32c)"
check "GCN on Cora, roles as processes: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"
check "Cora's features: 49,216 nonzeros, 0.4 MB as a CSR" \
    "$(value "$tmp/gcn" features_nonzero) $(python3 -c "print(round($(value "$tmp/gcn" features_mb), 2))")" \
    "49216 0.4"

finish
