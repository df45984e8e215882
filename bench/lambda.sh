#!/usr/bin/env bash
# Tensor tasks on serverless functions (issue 13; docs/lambda.md), Dorylus §7.4 on this
# machine: GCN (2 layers, 16 hidden) on the 1M-vertex power-law graph,
#  - cpu: the one-process run (every role a thread, the cpu plugin on every core);
#  - lambda-N: the tensor tasks on N function workers (compute: {plugin: lambda,
#    lambdas: N}) next to a graph server and a parameter server on the local cloud, for
#    each N of --counts;
#  - autotune: the same, with scripts/lua/autotune_lambdas.lua turning the count, from
#    one worker per interval.
# Each run trains --epochs epochs; the table has the median seconds per epoch (training
# pass and evaluation), the run's cost as its ledger bills it (result.json's cost_usd: the
# coordinator, the graph server and the parameter server each a c5n.2xlarge, plus the
# invocations at the 2021 Lambda prices), the cost of the servers' time priced as Dorylus
# deploys them (one c5n.2xlarge for the graph and parameter servers, the invocations on
# top: "dorylus $"), the value 1/(T C) of the latter per epoch, and the invocations and
# their billed GB-seconds. The autotuner's count and queue over time: OUT/autotune.png.
# Then Dorylus's three optimisations (§6), each off and on in turn (--pairs times), on
# 8 workers: tensor rematerialisation (remat), worker-internal streaming (stream, on
# --link-mbps links) and task fusion (fuse; GCN with order: gather_first, whose last
# stage is tensor work): per run the seconds per epoch (median), the invocations, the
# megabytes sent to the workers and back per epoch, and the weights' crc32c; then the
# medians of the on and off runs.
#   bench/lambda.sh [--build-dir build] [--out DIR] [--epochs 4] [--counts 2,4,8,16]
#                   [--intervals 16] [--nodes 1000000] [--cpu 0.25] [--memory-mb 512]
#                   [--only table|opts] [--pairs 3] [--link-mbps 800]
set -euo pipefail

build=build out="" epochs=4 counts=2,4,8,16 intervals=16 nodes=1000000 cpu=0.25 mem=512
only="" pairs=3 link=800
while [ $# -gt 0 ]; do
    case "$1" in
    --only) only=$2 ;;
    --pairs) pairs=$2 ;;
    --link-mbps) link=$2 ;;
    --build-dir) build=$2 ;;
    --out) out=$2 ;;
    --epochs) epochs=$2 ;;
    --counts) counts=$2 ;;
    --intervals) intervals=$2 ;;
    --nodes) nodes=$2 ;;
    --cpu) cpu=$2 ;;
    --memory-mb) mem=$2 ;;
    -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "lambda.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
bivouac="$build/bivouac"
[ -x "$bivouac" ] || { echo "lambda.sh: no $bivouac: build first (cmake)" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$out" ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

case "$only" in
"" | table | opts) ;;
*) echo "lambda.sh: --only takes table or opts, not '$only'" >&2; exit 2 ;;
esac

# experiment NAME COMPUTE [more lines]: $out/NAME.yaml (GCN, its layers in $order)
order=transform_first
experiment() {
    local name=$1 compute=$2
    shift 2
    {
        echo "name: $name"
        echo "model: {plugin: gcn, hidden: 16, layers: 2, dropout: 0.5, order: $order}"
        echo "dataset: {synthetic: powerlaw, nodes: $nodes, edges: $((nodes * 10)), features: 64,"
        echo "          classes: 8, exponent: 2.1, seed: 1, normalize_features: false}"
        echo "train: {epochs: $epochs, lr: 0.01, weight_decay: 5e-4, seed: 42}"
        echo "engine: {intervals: $intervals, start_timeout: 600}"
        echo "compute: $compute"
        for line in "$@"; do echo "$line"; done
    } >"$out/$name.yaml"
}
cloud="cloud: {plugin: local, lambda_cpu: $cpu, lambda_memory_mb: $mem, lambda_time_limit: 120}"

run() { # run NAME: trains $out/NAME.yaml into $out/NAME
    rm -rf "${out:?}/$1"
    "$bivouac" run "$out/$1.yaml" --out "$out/$1" --quiet --no-plot >/dev/null 2>"$out/$1.log" ||
        { cat "$out/$1.log" >&2; exit 1; }
}

row() { # row NAME
    python3 - "$out/$1" "$1" <<'EOF'
import json, statistics, sys
d, name = sys.argv[1], sys.argv[2]
r = json.load(open(d + "/result.json"))
lines = [json.loads(l) for l in open(d + "/metrics.jsonl")]
s = [l["seconds"] for l in lines if "train_loss" in l]
per = statistics.median([b - a for a, b in zip(s, s[1:])]) if len(s) > 1 else s[0]
fn = r.get("cost_breakdown", {}).get("lambda", {})
usd_fn = fn.get("usd", 0.0)
# Dorylus's deployment: one c5n.2xlarge ($0.432/h) for the servers, the invocations on top
dorylus = r["wall_seconds"] * 0.432 / 3600 + usd_fn
per_usd = dorylus / len(s)
value = 1 / (per * per_usd)
print(f"{name:<12} {per:9.3f} {r['cost_usd']:12.6f} {dorylus:12.6f} {value:12.1f} "
      f"{r.get('lambda_invocations', 0):8.0f} {r.get('lambda_gb_seconds', 0):9.2f} "
      f"{r['test_accuracy']:6.4f}")
EOF
}

table() {
    printf '%-12s %9s %12s %12s %12s %8s %9s %6s\n' run s/epoch 'ledger $' 'dorylus $' \
        'value/epoch' invokes GB-s acc
    experiment cpu "{plugin: cpu}"
    run cpu
    row cpu
    IFS=, read -ra ns <<<"$counts"
    for n in "${ns[@]}"; do
        experiment "lambda-$n" "{plugin: lambda, lambdas: $n}" "$cloud"
        run "lambda-$n"
        row "lambda-$n"
    done
    experiment autotune "{plugin: lambda}" "$cloud" \
        "policy: {file: $here/scripts/lua/autotune_lambdas.lua, params: {max: 32}}"
    run autotune
    row autotune
    python3 - "$out/autotune/metrics.jsonl" <<'EOF'
import json, sys
v = [json.loads(l) for l in open(sys.argv[1])]
get = lambda k: [f"{r['value']:g}" for r in v if r.get("series") == k]
print("autotune: lambdas per epoch", " ".join(get("lambdas")),
      "| queue mean", " ".join(get("lambda_queue_mean")),
      "| idle mean", " ".join(get("lambda_idle_mean")))
EOF
    "$bivouac" plot "$out/autotune" >/dev/null
    echo "the autotuner's run, every series (lambdas, lambda_queue_mean, ...): $out/autotune/curves.png"
}

opt_row() { # opt_row NAME: s/epoch, invocations, MB to and from per epoch, crc
    python3 - "$out/$1" "$1" <<'EOF'
import json, statistics, sys
d, name = sys.argv[1], sys.argv[2]
r = json.load(open(d + "/result.json"))
s = [l["seconds"] for l in map(json.loads, open(d + "/metrics.jsonl")) if "train_loss" in l]
per = statistics.median([b - a for a, b in zip(s, s[1:])]) if len(s) > 1 else s[0]
n = len(s)
print(f"{name:<16} {per:9.3f} {r['lambda_invocations'] / n:9.1f} "
      f"{r['lambda_bytes_to'] / n / 1e6:10.1f} {r['lambda_bytes_from'] / n / 1e6:10.1f} "
      f"{r['params_crc32c']:>10}")
EOF
}

opts() {
    local fn="{plugin: lambda, lambdas: 8"
    printf '%-16s %9s %9s %10s %10s %10s\n' run s/epoch invokes MB-to MB-from crc32c
    : >"$out/opts.txt"
    for pair in $(seq "$pairs"); do
        for opt in remat stream fuse; do
            for on in false true; do
                local name="$opt-$on-$pair" line=$cloud
                order=transform_first
                [ "$opt" = fuse ] && order=gather_first
                [ "$opt" = stream ] && line="${cloud%\}}, lambda_bandwidth_mbps: $link}"
                experiment "$name" "$fn, $opt: $on}" "$line"
                run "$name"
                opt_row "$name" | tee -a "$out/opts.txt"
            done
        done
    done
    python3 - "$out/opts.txt" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print("medians, off -> on: s/epoch (ratio); invocations, MB to and from the workers per epoch")
for opt in ("remat", "stream", "fuse"):
    def col(on, k):
        return statistics.median(float(r[k]) for r in rows if r[0].startswith(f"{opt}-{on}-"))
    off, on = col("false", 1), col("true", 1)
    print(f"  {opt:<7} {off:.3f} -> {on:.3f} s ({on / off:.3f}); "
          f"{col('false', 2):.0f} -> {col('true', 2):.0f} invocations; "
          f"{col('false', 3):.1f} -> {col('true', 3):.1f} MB to, "
          f"{col('false', 4):.1f} -> {col('true', 4):.1f} MB from")
EOF
}

[ "$only" = opts ] || table
[ "$only" = table ] || opts
