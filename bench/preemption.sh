#!/usr/bin/env bash
# Training through preemptions (Bamboo §6, issue 15): the pipeline benchmark config
# (configs/transformer-pipeline.yaml) as D x P stage processes on the local cloud, driven
# by a segment of a spot trace (a process killed at each removal of the node it stands for,
# time compressed by --speedup), with checkpoints alone (the strawman: every preemption
# restarts the run in the process from its last checkpoint, its stages launched again while
# the trace goes on) and with the redundancy strategy, eflb or lflb (Bamboo: a preemption is
# failed over and the run goes on; only one that RC cannot cover, two consecutive stages,
# restarts it;
# capacity the trace adds gives a stage that runs in its shadow's process one of its own
# again), or with redundancy and the shipped policy, scripts/lua/reconfigure.lua (strategy
# `policy`: Bamboo's reconfigurations too: consecutive stages lost lay the stages out afresh
# from a whole pipeline, a degraded pipeline is laid out afresh, capacity that fills
# another pipeline grows the layout), until the steps are done. Prints, per strategy, the preemptions, the failovers, the restarts, the
# wall time and the useful fraction of it: the steps' worth of time (the steps x the
# median step of an uninterrupted run without redundancy) over the wall time of
# everything, restarts, lost work and redundant work included. That fraction is short of
# 100 % even for the uninterrupted run (its start and its evaluations and checkpoints
# count against it): its own fraction is printed first, and each run's wall time is also
# given against the uninterrupted run's ("of an uninterrupted run").
#   bench/preemption.sh [--build-dir build] [--steps 100] [--stages 3] [--pipelines 2]
#                       [--trace ../shared/traces/aws-p3-events.csv] [--trace-start 2000]
#                       [--speedup 50] [--checkpoint-every 10]
#                       [--strategies "checkpoint redundancy lflb"] [--zones 1]
#                       [--policy-params '{reconfigure_at: 1}'] [--keep DIR]
# --keep DIR: the runs' directories are left in DIR (whole/ uninterrupted, traced-S/ per
# strategy) and the table in DIR/table.md (bench/sim_validate.sh simulates them), and each
# strategy's Bamboo Figure 11 in DIR/figure11-S.png (and .svg): the cluster's instances,
# the throughput (samples/s) and the cumulative cost against wall time.
# --zones Z: the local cloud's zones (the trace's nodes in Z zones; the pipeline engine puts
# consecutive stages in different ones, as Bamboo does).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=build steps=100 stages=3 pipelines=2 trace="$here/../shared/traces/aws-p3-events.csv"
start=2000 speedup=50 every=10 strategies="checkpoint redundancy lflb" zones=1 keep=
params={}
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2 ;;
    --steps) steps=$2 ;;
    --stages) stages=$2 ;;
    --pipelines) pipelines=$2 ;;
    --trace) trace=$2 ;;
    --trace-start) start=$2 ;;
    --speedup) speedup=$2 ;;
    --checkpoint-every) every=$2 ;;
    --strategies) strategies=$2 ;;
    --zones) zones=$2 ;;
    --keep) keep=$2 ;;
    --policy-params) params=$2 ;;
    -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "preemption.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
bivouac="$build/bivouac"
[ -x "$bivouac" ] || { echo "preemption.sh: no $bivouac: build first (cmake)" >&2; exit 2; }
export BIVOUAC_DATA_DIR=${BIVOUAC_DATA_DIR:-$here/../shared/data}
tmp=$(mktemp -d)
# BIVOUAC_BENCH_KEEP=DIR: each strategy's whole log is copied there
trap '[ -n "${BIVOUAC_BENCH_KEEP:-}" ] && cp "$tmp"/*.log "$BIVOUAC_BENCH_KEEP"/ 2>/dev/null
      [ -n "$keep" ] && mkdir -p "$keep" && cp -r "$tmp"/whole "$tmp"/traced-* "$tmp"/table.md "$keep"/ 2>/dev/null
      rm -rf "$tmp"' EXIT
echo "machine: $(nproc) cores; $pipelines x $stages stage processes, $steps steps, trace $(basename "$trace") from ${start} s at ${speedup}x, $zones zone(s)"

cfg=(-s train.steps="$steps" -s train.eval_interval="$every" -s train.eval_iters=1
     -s train.final_eval_iters=1 -s pipeline.stages="$stages" -s pipeline.pipelines="$pipelines")
ckpt="{plugin: checkpoint, every: $every, keep: 2}"
resilience() { # the strategy's resilience list
    case "$1" in
    checkpoint) echo "resilience=[$ckpt]" ;;
    redundancy | policy) echo "resilience=[{plugin: redundancy}, $ckpt]" ;;
    lflb) echo "resilience=[{plugin: redundancy, mode: lflb}, $ckpt]" ;;
    *) echo "preemption.sh: unknown strategy '$1' (checkpoint, redundancy, lflb, policy)" >&2
       exit 2 ;;
    esac
}
exp="$here/configs/transformer-pipeline.yaml"

# the uninterrupted run: its median step, and its wall time
t0=$(date +%s.%N)
"$bivouac" run "$exp" --out "$tmp/whole" --quiet --no-plot "${cfg[@]}" \
    -s "$(resilience checkpoint)" -s 'cloud={plugin: local}' 2>/dev/null
whole_wall=$(python3 -c "print($(date +%s.%N) - $t0)")
step=$(python3 - "$tmp/whole/metrics.jsonl" <<'EOF'
import json, statistics, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1]) if '"train_loss"' in l and '"eval' not in l]
print(statistics.median(b - a for a, b in zip(s, s[1:])))
EOF
)

# the traced run of a strategy; it restarts in the process from its checkpoint after every
# preemption that nothing covers (pipeline.restarts), its trace going on
traced() {
    local strategy=$1 out="$tmp/traced-$1" t0 rc wall policy=()
    [ "$strategy" != policy ] ||
        policy=(-s "policy={file: $here/scripts/lua/reconfigure.lua, params: $params}")
    t0=$(date +%s.%N)
    set +e
    "$bivouac" run "$exp" --out "$out" --quiet --no-plot "${cfg[@]}" -s "$(resilience "$strategy")" \
        -s pipeline.restarts=100000 \
        -s "cloud={plugin: local, trace: $trace, trace_start: $start, speedup: $speedup, zones: $zones}" \
        "${policy[@]}" 2>"$tmp/$strategy.log"
    rc=$?
    set -e
    wall=$(python3 -c "print($(date +%s.%N) - $t0)")
    [ $rc = 0 ] || { echo "preemption.sh: the traced run failed (exit $rc):" >&2; cat "$tmp/$strategy.log" >&2; exit 1; }
    echo "$strategy:"
    grep -hE "local cloud: the trace (removes|adds)|info: (failover|replaced|restart [0-9]+|reconfigured):|error:" "$tmp/$strategy.log" |
        sed 's/^bivouac: [a-z]*: /  /'
    [ -z "$keep" ] || { mkdir -p "$keep" && "$bivouac" compare "$out" --x time \
        --series instances,samples_per_second,cost_usd --out "$keep/figure11-$strategy.png" >/dev/null; }
    echo "$strategy $(grep -c "local cloud: the trace removes" "$tmp/$strategy.log" || true)" \
        "$(grep -c "info: failover:" "$tmp/$strategy.log" || true)" \
        "$(grep -c "info: replaced:" "$tmp/$strategy.log" || true)" \
        "$(grep -o '"restarts": [0-9]*' "$out/result.json" | grep -o '[0-9]*$')" \
        "$(grep -o '"reconfigurations": [0-9]*' "$out/result.json" | grep -o '[0-9]*$') $wall" \
        >>"$tmp/rows"
}
for s in $strategies; do traced "$s"; done

python3 - "$steps" "$step" "$tmp/rows" "$whole_wall" <<'EOF' | tee "$tmp/table.md"
import sys
steps, step, whole = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[4])
label = {"checkpoint": "checkpoint alone", "redundancy": "redundancy (eflb) + checkpoint",
         "lflb": "redundancy (lflb) + checkpoint",
         "policy": "redundancy (eflb) + checkpoint + reconfigure.lua"}
useful = steps * step
print("| strategy | preemptions | failovers | given a node again | restarts from a checkpoint "
      "| laid out afresh | wall s | useful s | useful | of an uninterrupted run |")
print("|---|---|---|---|---|---|---|---|---|---|")
print(f"| uninterrupted, checkpoints alone | 0 | 0 | 0 | 0 | 0 | {whole:.1f} | {useful:.1f} | "
      f"{100 * useful / whole:.0f} % | 100 % |")
for line in open(sys.argv[3]):
    name, pre, fo, rep, res, rel, wall = line.split()
    print(f"| {label[name]} | {pre} | {fo} | {rep} | {res} | {rel} | {float(wall):.1f} | "
          f"{useful:.1f} | {100 * useful / float(wall):.0f} % | {100 * whole / float(wall):.0f} % |")
EOF
