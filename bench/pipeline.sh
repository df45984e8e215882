#!/usr/bin/env bash
# The pipeline engine (issue 14; docs/pipeline.md), two tables:
#  1. correctness: the baby shakespeare transformer (configs/transformer-shakespeare.yaml)
#     trained 200 steps as one process (one batch, M = 1) and as D x P pipelines with the
#     same global batch of 12 sequences cut into microbatches: the loss at step 200, the
#     final validation loss, their relative difference from the one-process run, the
#     weights' checksum (the same bits for the same M whatever P), and 2 x 2 run twice;
#  2. throughput: configs/transformer-pipeline.yaml (8 blocks of width 256) for D x P =
#     1 x 1 (one process, and threads with M = 4), 1 x 2, 2 x 1 and 1 x 4 as processes on
#     the local cloud: tokens/s (median over --reps runs, alternated), the measured bubble
#     (the stages' time not computing) and 1F1B's (P - 1) / (M + P - 1).
#  3. redundancy: the same config as --stages stage processes (M = 4) without and with Bamboo's
#     redundancy plugin (eflb: replicas and the next stage's forward in the bubble; lflb:
#     replicas only; efeb: its backward too): the time a step takes (median over the runs'
#     steps, runs alternated)
#     and the overhead against no redundancy (Bamboo's Table 4).
#   bench/pipeline.sh [--build-dir build] [--reps 3] [--steps 30] [--stages 4]
#                     [--only correctness|throughput|redundancy]
set -euo pipefail

build=build reps=3 steps=30 only="" stages=4
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2 ;;
    --reps) reps=$2 ;;
    --steps) steps=$2 ;;
    --only) only=$2 ;;
    --stages) stages=$2 ;;
    -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pipeline.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bivouac="$build/bivouac"
[ -x "$bivouac" ] || { echo "pipeline.sh: no $bivouac: build first (cmake)" >&2; exit 2; }
export BIVOUAC_DATA_DIR=${BIVOUAC_DATA_DIR:-$here/../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

# run NAME CONFIG D P M [ARGS...]: one run into $tmp/NAME
run() {
    local name=$1 cfg=$2 d=$3 p=$4 m=$5
    shift 5
    "$bivouac" run "$cfg" --out "$tmp/$name" --force --quiet --no-plot \
        -s pipeline.pipelines="$d" -s pipeline.stages="$p" -s pipeline.microbatches="$m" \
        "$@" >/dev/null
}

if [ -z "$only" ] || [ "$only" = correctness ]; then
    baby="$here/configs/transformer-shakespeare.yaml"
    short=(-s train.steps=200 -s train.eval_interval=200 -s train.eval_iters=1
           -s train.final_eval_iters=20 -s resilience=[] -s compute.threads=1)
    run one "$baby" 1 1 1 "${short[@]}"
    rows=(one)
    for layout in "1 1 4" "1 2 4" "1 4 4" "2 2 2"; do
        read -r d p m <<<"$layout"
        run "d${d}p${p}m${m}" "$baby" "$d" "$p" "$m" "${short[@]}"
        rows+=("d${d}p${p}m${m}")
    done
    run d2p2m2-again "$baby" 2 2 2 "${short[@]}"
    rows+=(d2p2m2-again)
    python3 - "$tmp" "${rows[@]}" <<'EOF'
import json, sys
tmp, rows = sys.argv[1], sys.argv[2:]
r = {n: json.load(open(f"{tmp}/{n}/result.json")) for n in rows}
one = r["one"]
print("\n200 steps of the baby transformer, global batch 12 (configs/transformer-shakespeare.yaml)")
print("| run | D x P | M | loss at step 200 | rel. diff | val loss | rel. diff | params crc32c |")
print("|---|---|---|---|---|---|---|---|")
for n in rows:
    x = r[n]
    lay = f"{int(x.get('pipelines', 1))} x {int(x.get('pipeline_stages', 1))}"
    m = int(x.get("microbatches", 1))
    dl = abs(x["last_step_loss"] - one["last_step_loss"]) / one["last_step_loss"]
    dv = abs(x["val_loss"] - one["val_loss"]) / one["val_loss"]
    print(f"| {n} | {lay} | {m} | {x['last_step_loss']:.9f} | {dl:.1e} | {x['val_loss']:.9f} "
          f"| {dv:.1e} | {x['params_crc32c']} |")
EOF
fi

if [ -z "$only" ] || [ "$only" = throughput ]; then
    big="$here/configs/transformer-pipeline.yaml"
    fast=(-s train.steps="$steps" -s train.eval_interval="$steps" -s train.eval_iters=1
          -s train.final_eval_iters=1)
    procs=(-s 'cloud={plugin: local}')
    names=()
    for rep in $(seq "$reps"); do
        run "one-$rep" "$big" 1 1 1 "${fast[@]}"
        run "threads-$rep" "$big" 1 1 4 "${fast[@]}"
        run "d1p2-$rep" "$big" 1 2 4 "${fast[@]}" "${procs[@]}"
        run "d2p1-$rep" "$big" 2 1 4 "${fast[@]}" "${procs[@]}"
        run "d1p4-$rep" "$big" 1 4 4 "${fast[@]}" "${procs[@]}"
    done
    python3 - "$tmp" "$reps" <<'EOF'
import json, statistics, sys
tmp, reps = sys.argv[1], int(sys.argv[2])
print(f"\nthroughput, configs/transformer-pipeline.yaml (8 x 256), medians of {reps} runs")
print("| run | D x P | M | stages as | tokens/s | vs one process | bubble measured | (P-1)/(M+P-1) |")
print("|---|---|---|---|---|---|---|---|")
base = None
for name, how in (("one", "one process, one batch"), ("threads", "threads"),
                  ("d1p2", "processes"), ("d2p1", "processes"), ("d1p4", "processes")):
    rs = [json.load(open(f"{tmp}/{name}-{i}/result.json")) for i in range(1, reps + 1)]
    tps = statistics.median(x["tokens_per_second"] for x in rs)
    base = base or tps
    x = rs[0]
    d, p, m = int(x.get("pipelines", 1)), int(x.get("pipeline_stages", 1)), int(x.get("microbatches", 1))
    bubble = statistics.median(x.get("pipeline_bubble", float("nan")) for x in rs)
    pred = (p - 1) / (m + p - 1)
    print(f"| {name} | {d} x {p} | {m} | {how} | {tps:.0f} | {tps / base:.2f} | "
          f"{bubble:.3f} | {pred:.3f} |")
EOF
fi

if [ -z "$only" ] || [ "$only" = redundancy ]; then
    big="$here/configs/transformer-pipeline.yaml"
    fast=(-s train.steps="$steps" -s train.eval_interval="$steps" -s train.eval_iters=1
          -s train.final_eval_iters=1 -s 'cloud={plugin: local}')
    for rep in $(seq "$reps"); do
        run "none-$rep" "$big" 1 "$stages" 4 "${fast[@]}"
        run "eflb-$rep" "$big" 1 "$stages" 4 "${fast[@]}" -s 'resilience=[{plugin: redundancy, mode: eflb}]'
        run "lflb-$rep" "$big" 1 "$stages" 4 "${fast[@]}" -s 'resilience=[{plugin: redundancy, mode: lflb}]'
        run "efeb-$rep" "$big" 1 "$stages" 4 "${fast[@]}" -s 'resilience=[{plugin: redundancy, mode: efeb}]'
    done
    python3 - "$tmp" "$reps" "$stages" <<'EOF2'
import json, statistics, sys
tmp, reps = sys.argv[1], int(sys.argv[2])
stages = int(sys.argv[3]) if len(sys.argv) > 3 else 4
def step_times(run):
    s = [json.loads(l)["seconds"] for l in open(f"{tmp}/{run}/metrics.jsonl") if '"train_loss"' in l and '"eval' not in l]
    return [b - a for a, b in zip(s, s[1:])]  # the first step (start-up) left out
print(f"\nredundancy, configs/transformer-pipeline.yaml as {stages} stage processes, M = 4, {reps} runs")
print("| mode | seconds a step (median) | overhead | replicas equal | params crc32c |")
print("|---|---|---|---|---|")
base = None
for mode in ("none", "eflb", "lflb", "efeb"):
    t = statistics.median(x for i in range(1, reps + 1) for x in step_times(f"{mode}-{i}"))
    base = base or t
    r = json.load(open(f"{tmp}/{mode}-1/result.json"))
    eq = f"{int(r['replicas_equal'])} of {int(r['replicas'])}" if "replicas" in r else "-"
    print(f"| {mode} | {t:.4f} | {100 * (t / base - 1):+.1f} % | {eq} | {r['params_crc32c']} |")
EOF2
fi
