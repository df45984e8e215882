#!/usr/bin/env bash
# Seconds per epoch of GCN on bench/'s 1M-vertex power-law graph, roles as processes
# (cluster: G graph servers, P parameter servers, T tensor workers over ipc://, cloud
# local) against the one-process embedded run, alternated on the same machine; medians and
# their ratio. Also the boundary bytes per epoch the graph servers measured against the
# prediction from the partition's ghosts, and the edge cut (issue 11; docs/cluster.md).
#   bench/cluster_epoch.sh [--build-dir build] [--reps 3] [--epochs 6] [--graph-servers 2]
#                          [--param-servers 1] [--tensor-workers 1] [--partition metis]
#                          [--nodes 1000000] [--edges 10000000] [--share-arrays true]
# --share-arrays false: the roles send vertex rows in messages instead of sharing the graph
# servers' arrays through memory (docs/cluster.md, "Shared memory on one host").
# Each run's first epoch is left out of its median (start-up, allocation, first touch).
set -euo pipefail

build=build reps=3 epochs=6 gs=2 ps=1 tw=1 partition=metis nodes=1000000 edges=10000000
share=true
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2 ;;
    --reps) reps=$2 ;;
    --epochs) epochs=$2 ;;
    --graph-servers) gs=$2 ;;
    --param-servers) ps=$2 ;;
    --tensor-workers) tw=$2 ;;
    --partition) partition=$2 ;;
    --nodes) nodes=$2 ;;
    --edges) edges=$2 ;;
    --share-arrays) share=$2 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cluster_epoch.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
bivouac="$build/bivouac"
[ -x "$bivouac" ] || { echo "cluster_epoch.sh: no $bivouac: build first (cmake)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/one.yaml" <<EOF
name: gcn-powerlaw-1m
model: {plugin: gcn, hidden: 16, layers: 2, dropout: 0.5}
dataset: {synthetic: powerlaw, nodes: $nodes, edges: $edges, features: 64, classes: 8,
          exponent: 2.1, seed: 1, normalize_features: false}
train: {epochs: $epochs, lr: 0.01, weight_decay: 5e-4, seed: 42}
EOF
cp "$tmp/one.yaml" "$tmp/cluster.yaml"
cat >>"$tmp/cluster.yaml" <<EOF
cluster: {graph_servers: $gs, param_servers: $ps, tensor_workers: $tw, partition: $partition}
cloud: {plugin: local}
engine: {start_timeout: 600, share_arrays: $share}
EOF

# the median of a run's epoch times: metrics.jsonl's "seconds" is the time since the run
# started, so an epoch's is the difference from the one before (the first, which has the
# start-up in it, is left out)
epoch_median() {
    python3 - "$1/metrics.jsonl" <<'EOF'
import json, statistics, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1]) if '"train_loss"' in l]
print(f"{statistics.median([b - a for a, b in zip(s, s[1:])]):.4f}")
EOF
}

one=() multi=()
for r in $(seq "$reps"); do
    for kind in one cluster; do
        out="$tmp/$kind-$r"
        t0=$(date +%s.%N)
        "$bivouac" run "$tmp/$kind.yaml" --out "$out" --quiet --no-plot >/dev/null
        wall=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
            "$t0" "$(date +%s.%N)")
        m=$(epoch_median "$out")
        echo "rep $r $kind: median epoch $m s (run $wall s with loading)"
        if [ "$kind" = one ]; then one+=("$m"); else multi+=("$m"); fi
    done
done

python3 - "$tmp/cluster-1/result.json" "${one[*]}" "${multi[*]}" "$gs" "$ps" "$tw" \
    "$partition" "$share" <<'EOF'
import json, statistics, sys
res = json.load(open(sys.argv[1]))
one = [float(x) for x in sys.argv[2].split()]
multi = [float(x) for x in sys.argv[3].split()]
g, p, t, method, share = sys.argv[4:9]
a, b = statistics.median(one), statistics.median(multi)
print(f"one process: median {a:.3f} s/epoch over {len(one)} runs {one}")
print(f"G={g} P={p} T={t} processes ({method}, share_arrays {share}): median {b:.3f} s/epoch {multi}")
print(f"ratio processes / one process: {b / a:.2f}x")
if "edge_cut" in res:
    m, pr = res["boundary_bytes_per_epoch"], res["predicted_boundary_bytes_per_epoch"]
    print(f"edge cut {res['edge_cut']:,}; boundary bytes per training epoch: measured "
          f"{m:,}, predicted from the parts' ghosts {pr:,} ({m / pr:.3f})")
EOF
