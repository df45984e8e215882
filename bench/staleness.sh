#!/usr/bin/env bash
# Bounded asynchrony (issue 12; docs/staleness.md), Dorylus §7.3 on this machine: GCN
# (2 layers, 16 hidden) with the `staleness` plugin in modes pipe, async s=0 and async s=1.
#  1. per dataset: pipe runs until converged (val accuracy changes < 0.001 for 5 epochs:
#     scripts/lua/converged.lua); its final val accuracy is the target, which each async
#     mode then runs to (at most 3x pipe's epochs). The table: epochs to the target (pipe's
#     too: its first epoch at that accuracy), R[s] (async / pipe), median seconds per epoch
#     (training pass and evaluation) and normalised to pipe, the time to the target and the
#     speed-up over pipe; the accuracy-against-time curves of the three modes as
#     OUT/<dataset>.png;
#  2. per-epoch time on the 1M-vertex graph, every mode: median seconds per epoch over
#     --reps runs of --epochs epochs each, the modes alternated, and the ratio to pipe
#     (what intra-layer pipelining buys over nopipe, and asynchrony over pipe, with the
#     noise of single runs averaged out).
# --graph-servers G: the roles as processes on the local cloud, G graph servers (METIS
# parts), one parameter server, --workers tensor workers; 0: threads of one process.
# --threads N: the cpu plugin's threads in every role (default 1: each role computes on
# one core, as Dorylus's graph servers and Lambdas are separate machines; with more, the
# roles' pools share this machine's cores and overlapping them gains nothing).
#   bench/staleness.sh [--build-dir build] [--out DIR] [--datasets cora,citeseer,powerlaw-1m]
#                      [--intervals 16] [--workers 1] [--graph-servers 2] [--threads 1]
#                      [--reps 3] [--epochs 6] [--only asynchrony|epochs]
# Cora and Citeseer come from BIVOUAC_DATA_DIR (default ../shared/data).
set -euo pipefail

build=build out="" datasets=cora,citeseer,powerlaw-1m intervals=16 workers=1 reps=3
epochs=6 only="" gs=2 threads=1
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2 ;;
    --out) out=$2 ;;
    --datasets) datasets=$2 ;;
    --intervals) intervals=$2 ;;
    --workers) workers=$2 ;;
    --graph-servers) gs=$2 ;;
    --threads) threads=$2 ;;
    --reps) reps=$2 ;;
    --epochs) epochs=$2 ;;
    --only) only=$2 ;;
    -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "staleness.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
bivouac="$build/bivouac"
[ -x "$bivouac" ] || { echo "staleness.sh: no $bivouac: build first (cmake)" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
export BIVOUAC_DATA_DIR="${BIVOUAC_DATA_DIR:-$here/../shared/data}"
if [ -z "$out" ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
policy="$here/scripts/lua/converged.lua"

# experiment NAME DATASET MODE EPOCHS POLICY-PARAMS: a GCN experiment in $out/NAME.yaml
experiment() {
    local name=$1 dataset=$2 mode=$3 cap=$4 params=$5 data res
    case "$dataset" in
    powerlaw-1m) data="{synthetic: powerlaw, nodes: 1000000, edges: 10000000, features: 64,
          classes: 8, exponent: 2.1, seed: 1, normalize_features: false}" ;;
    *) data="{name: $dataset, normalize_features: true}" ;;
    esac
    case "$mode" in
    async0) res="{plugin: staleness, mode: async, s: 0}" ;;
    async1) res="{plugin: staleness, mode: async, s: 1}" ;;
    *) res="{plugin: staleness, mode: $mode}" ;;
    esac
    cat >"$out/$name.yaml" <<EOF
name: ${name//\//-}
model: {plugin: gcn, hidden: 16, layers: 2, dropout: 0.5}
dataset: $data
train: {epochs: $cap, lr: 0.01, weight_decay: 5e-4, seed: 42}
compute: {plugin: cpu, threads: $threads}
resilience: [$res]
EOF
    if [ "$gs" -gt 0 ]; then
        printf 'engine: {intervals: %s, start_timeout: 600}\n' "$intervals" >>"$out/$name.yaml"
        printf 'cluster: {graph_servers: %s, param_servers: 1, tensor_workers: %s}\n' \
            "$gs" "$workers" >>"$out/$name.yaml"
        echo "cloud: {plugin: local}" >>"$out/$name.yaml"
    else
        printf 'engine: {intervals: %s, tensor_workers: %s}\n' "$intervals" "$workers" \
            >>"$out/$name.yaml"
    fi
    if [ -n "$params" ]; then
        printf 'policy: {file: %s, params: %s}\n' "$policy" "$params" >>"$out/$name.yaml"
    fi
}

run() { # run NAME: trains $out/NAME.yaml into $out/NAME
    rm -rf "${out:?}/$1"
    "$bivouac" run "$out/$1.yaml" --out "$out/$1" --quiet --no-plot >/dev/null 2>"$out/$1.log" ||
        { cat "$out/$1.log" >&2; exit 1; }
}

# stats RUN [TARGET]: "epochs final_val_accuracy median_epoch_seconds seconds", epochs and
# seconds up to the first epoch whose val accuracy reached TARGET when one is given
stats() {
    python3 - "$out/$1/metrics.jsonl" "${2:-2}" <<'EOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"train_loss"' in l]
target = float(sys.argv[2])
s = [r["seconds"] for r in recs]
per = statistics.median([b - a for a, b in zip(s, s[1:])]) if len(s) > 1 else s[0]
hit = next((i for i, r in enumerate(recs) if r["val_accuracy"] >= target), len(recs) - 1)
print(hit + 1, recs[hit]["val_accuracy"], f"{per:.5f}", f"{s[hit]:.4f}")
EOF
}

if [ "$only" != epochs ]; then
    printf '%-12s %-7s %6s %6s %7s %10s %6s %10s %8s\n' dataset mode epochs R val_acc \
        s/epoch norm to_target speedup
    IFS=, read -ra sets <<<"$datasets"
    for d in "${sets[@]}"; do
        cap=300
        [ "$d" = powerlaw-1m ] && cap=100
        mkdir -p "$out/$d" # the runs as $d/pipe, $d/async0, $d/async1: short curve labels
        experiment "$d/pipe" "$d" pipe "$cap" "{delta: 0.001, window: 5}"
        run "$d/pipe"
        read -r n_conv target _ _ <<<"$(stats "$d/pipe")"
        read -r n_pipe _ per_pipe total_pipe <<<"$(stats "$d/pipe" "$target")"
        echo "$d: pipe converged after $n_conv epochs at val accuracy $target (the target)"
        printf '%-12s %-7s %6d %6s %7.4f %10.4f %6s %10.2f %8s\n' "$d" pipe "$n_pipe" 1.00 \
            "$target" "$per_pipe" 1.00 "$total_pipe" 1.00
        for m in async0 async1; do
            experiment "$d/$m" "$d" "$m" $((3 * n_pipe)) "{target: $target}"
            run "$d/$m"
            read -r n acc per total <<<"$(stats "$d/$m" "$target")"
            reached=$(python3 -c "print('' if $acc >= $target else ' (target not reached)')")
            python3 -c "
n, np_, per, pp, tot, tp = $n, $n_pipe, $per, $per_pipe, $total, $total_pipe
print(f'%-12s %-7s %6d %6.2f %7.4f %10.4f %6.2f %10.2f %8.2f' % ('$d', '$m', n, n / np_,
      $acc, per, per / pp, tot, tp / tot) + '$reached')"
        done
        "$bivouac" compare "$out/$d/pipe" "$out/$d/async0" "$out/$d/async1" \
            --series val_accuracy --x time --out "$out/$d.png" >/dev/null
        echo "  curves: $out/$d.png"
    done
fi

if [ "$only" != asynchrony ]; then
    modes=(nopipe pipe async0 async1)
    for m in "${modes[@]}"; do experiment "$m-1m" powerlaw-1m "$m" "$epochs" ""; done
    declare -A per
    for r in $(seq "$reps"); do
        for m in "${modes[@]}"; do
            run "$m-1m"
            read -r _ _ t _ <<<"$(stats "$m-1m")"
            echo "rep $r $m: median epoch $t s"
            per[$m]="${per[$m]:-} $t"
        done
    done
    python3 - "${per[nopipe]}" "${per[pipe]}" "${per[async0]}" "${per[async1]}" <<'EOF'
import statistics, sys
runs = {m: [float(x) for x in a.split()] for m, a in zip(("nopipe", "pipe", "async0", "async1"), sys.argv[1:])}
pipe = statistics.median(runs["pipe"])
for m, v in runs.items():
    print(f"powerlaw-1m {m:7s} median {statistics.median(v):.3f} s/epoch, "
          f"{statistics.median(v) / pipe:.3f} x pipe  {v}")
EOF
fi
