#!/usr/bin/env bash
# Training through preemptions with checkpoints alone (the strawman of Bamboo §6, issue 15):
# the pipeline benchmark config (configs/transformer-pipeline.yaml) as D x P stage
# processes on the local cloud, driven by a segment of a spot trace (a process killed at
# each removal of the node it stands for, time compressed by --speedup); after every
# preemption the run restarts from its last checkpoint further into the trace, until its
# steps are done. Prints the preemptions, the restarts, the wall time and the useful
# fraction of it: the steps' worth of time (the steps x the median step of an
# uninterrupted run) over the wall time of everything, restarts and lost work included.
#   bench/preemption.sh [--build-dir build] [--steps 100] [--stages 3] [--pipelines 2]
#                       [--trace ../shared/traces/aws-p3-events.csv] [--trace-start 2000]
#                       [--speedup 50] [--checkpoint-every 10]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=build steps=100 stages=3 pipelines=2 trace="$here/../shared/traces/aws-p3-events.csv"
start=2000 speedup=50 every=10
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
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "preemption.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
bivouac="$build/bivouac"
[ -x "$bivouac" ] || { echo "preemption.sh: no $bivouac: build first (cmake)" >&2; exit 2; }
export BIVOUAC_DATA_DIR=${BIVOUAC_DATA_DIR:-$here/../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) cores; $pipelines x $stages stage processes, $steps steps, trace $(basename "$trace") from ${start} s at ${speedup}x"

cfg=(-s train.steps="$steps" -s train.eval_interval="$every" -s train.eval_iters=1
     -s train.final_eval_iters=1 -s pipeline.stages="$stages" -s pipeline.pipelines="$pipelines"
     -s "resilience=[{plugin: checkpoint, every: $every, keep: 2}]")
exp="$here/configs/transformer-pipeline.yaml"

# the uninterrupted run: its median step
"$bivouac" run "$exp" --out "$tmp/whole" --quiet --no-plot "${cfg[@]}" \
    -s 'cloud={plugin: local}' 2>/dev/null
step=$(python3 - "$tmp/whole/metrics.jsonl" <<'EOF'
import json, statistics, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1]) if '"train_loss"' in l and '"eval' not in l]
print(statistics.median(b - a for a, b in zip(s, s[1:])))
EOF
)

# the traced run, restarted from its checkpoint after every preemption
t0=$(date +%s.%N)
preemptions=0 restarts=0
set +e
"$bivouac" run "$exp" --out "$tmp/traced" --quiet --no-plot "${cfg[@]}" \
    -s "cloud={plugin: local, trace: $trace, trace_start: $start, speedup: $speedup}" \
    2>"$tmp/err"
rc=$?
while [ $rc = 1 ] && grep -q "local cloud: the trace removes" "$tmp/err"; do
    preemptions=$((preemptions + $(grep -c "local cloud: the trace removes" "$tmp/err")))
    grep -h "local cloud: the trace removes" "$tmp/err" | sed 's/^bivouac: info: /  /'
    now=$(python3 -c "print($start + ($(date +%s.%N) - $t0) * $speedup)")
    restarts=$((restarts + 1))
    if [ -d "$tmp/traced/checkpoints" ] && ls "$tmp/traced/checkpoints"/ckpt-* >/dev/null 2>&1; then
        "$bivouac" run --resume "$tmp/traced" --quiet --no-plot -s "cloud.trace_start=$now" \
            2>"$tmp/err"
    else # lost before the first checkpoint: from the start again
        rm -rf "$tmp/traced"
        "$bivouac" run "$exp" --out "$tmp/traced" --quiet --no-plot "${cfg[@]}" \
            -s "cloud={plugin: local, trace: $trace, trace_start: $now, speedup: $speedup}" \
            2>"$tmp/err"
    fi
    rc=$?
done
set -e
wall=$(python3 -c "print($(date +%s.%N) - $t0)")
[ $rc = 0 ] || { echo "preemption.sh: the traced run failed (exit $rc):" >&2; cat "$tmp/err" >&2; exit 1; }
python3 - "$steps" "$step" "$wall" "$preemptions" "$restarts" <<'EOF'
import sys
steps, step, wall, pre, res = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
print("| strategy | preemptions | restarts from a checkpoint | wall s | useful s | useful |")
print("|---|---|---|---|---|---|")
print(f"| checkpoint alone | {pre} | {res} | {wall:.1f} | {steps * step:.1f} | {100 * steps * step / wall:.0f} % |")
EOF
