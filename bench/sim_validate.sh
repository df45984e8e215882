#!/usr/bin/env bash
# The simulation against reality (issue 16; docs/simulation.md#validation-against-reality):
# the replayed-trace experiment of bench/preemption.sh run for real on the local cloud
# (checkpoints alone, and redundancy), then simulated by `bivouac simulate` on the sim
# cloud with the same trace, segment and speedup, from what was measured apart from the
# traced runs: an uninterrupted run per strategy (its time per step, evaluations
# included), a run of one step (the time a start takes: its wall time less a step), a
# calibration run with redundancy whose stage 1 of pipeline 1 is killed mid-run
# (BIVOUAC_STAGE_FAULT), with no trace: its failover pause, and its steps on the shadow
# against those before (the slowdown on a shadow), and the same kill with checkpoints
# alone: the run restarts in the process, and its restart_seconds is a restart's pause.
# Prints, per strategy, the real and simulated wall time, useful fraction (the steps x
# the uninterrupted checkpoint-only run's median step, over the wall time, as
# bench/preemption.sh reports it), failovers and restarts.
#   bench/sim_validate.sh [--build-dir build] [--steps 100] [--stages 3] [--pipelines 2]
#                         [--trace ../shared/traces/aws-p3-events.csv] [--trace-start 2000]
#                         [--speedup 50]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=build steps=100 stages=3 pipelines=2 trace="$here/../shared/traces/aws-p3-events.csv"
start=2000 speedup=50
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2 ;;
    --steps) steps=$2 ;;
    --stages) stages=$2 ;;
    --pipelines) pipelines=$2 ;;
    --trace) trace=$2 ;;
    --trace-start) start=$2 ;;
    --speedup) speedup=$2 ;;
    -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sim_validate.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
bivouac="$build/bivouac"
[ -x "$bivouac" ] || { echo "sim_validate.sh: no $bivouac: build first (cmake)" >&2; exit 2; }
export BIVOUAC_DATA_DIR=${BIVOUAC_DATA_DIR:-$here/../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exp="$here/configs/transformer-pipeline.yaml"
every=10
cfg=(-s train.steps="$steps" -s train.eval_interval="$every" -s train.eval_iters=1
     -s train.final_eval_iters=1 -s pipeline.stages="$stages" -s pipeline.pipelines="$pipelines")
ckpt="{plugin: checkpoint, every: $every, keep: 2}"
declare -A res=([checkpoint]="[$ckpt]" [redundancy]="[{plugin: redundancy}, $ckpt]")

echo "== for real (bench/preemption.sh)"
"$here/bench/preemption.sh" --build-dir "$build" --steps "$steps" --stages "$stages" \
    --pipelines "$pipelines" --trace "$trace" --trace-start "$start" --speedup "$speedup" \
    --strategies "checkpoint redundancy" --keep "$tmp/real" | tail -4

# the uninterrupted redundancy run (preemption.sh's whole/ is the checkpoint-only one)
"$bivouac" run "$exp" --out "$tmp/whole-redundancy" --quiet --no-plot "${cfg[@]}" \
    -s "resilience=${res[redundancy]}" -s 'cloud={plugin: local}' 2>/dev/null
# the calibration: one failover, then steps on the shadow to the end
BIVOUAC_STAGE_FAULT="$((stages + 1)):$((steps / 4)):backward" "$bivouac" run "$exp" \
    --out "$tmp/calibration" --quiet --no-plot "${cfg[@]}" -s "resilience=${res[redundancy]}" \
    -s 'cloud={plugin: local}' 2>/dev/null
# a restart: the same kill with checkpoints alone
BIVOUAC_STAGE_FAULT="$((stages + 1)):$((steps / 4)):backward" "$bivouac" run "$exp" \
    --out "$tmp/calibration-restart" --quiet --no-plot "${cfg[@]}" \
    -s "resilience=${res[checkpoint]}" -s 'cloud={plugin: local}' 2>/dev/null
# a start: a run of one step, less the step
t0=$(date +%s.%N)
"$bivouac" run "$exp" --out "$tmp/one" --quiet --no-plot "${cfg[@]}" -s train.steps=1 \
    -s "resilience=${res[checkpoint]}" -s 'cloud={plugin: local}' 2>/dev/null
t1=$(date +%s.%N)
measure() { # KEY: a figure of the runs
    python3 - "$tmp" "$1" "$t0" "$t1" "$steps" <<'EOF'
import json, statistics, sys
tmp, key, t0, t1, steps = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
def seconds(d):
    return [json.loads(l)["seconds"] for l in open(d + "/metrics.jsonl") if '"train_loss"' in l]
def per_step(d):  # evaluations included
    return seconds(d)[-1] / len(seconds(d))
med = lambda d: statistics.median(b - a for a, b in zip(seconds(d), seconds(d)[1:]))
if key == "step-checkpoint":
    print(per_step(tmp + "/real/whole"))
elif key == "step-redundancy":
    print(per_step(tmp + "/whole-redundancy"))
elif key == "median-checkpoint":
    print(med(tmp + "/real/whole"))
elif key == "start":
    print(max(0.0, (t1 - t0) - per_step(tmp + "/real/whole")))
elif key == "restart":
    r = json.load(open(tmp + "/calibration-restart/result.json"))
    print(r["restart_seconds"] / r["restarts"])
EOF
}
restart=$(measure restart) start_s=$(measure start)
echo "measured: a step $(measure step-checkpoint) s (with redundancy $(measure step-redundancy) s)," \
     "a start ${start_s} s, a restart ${restart} s; the calibration's failover and slowdown on a shadow:" \
     "$(python3 -c "import json; r = json.load(open('$tmp/calibration/result.json')); print(r['failover_seconds'] / r['failovers'], 's')")"

echo "== simulated"
for strategy in checkpoint redundancy; do
    "$bivouac" simulate "$exp" --runs 1 --out "$tmp/sim-$strategy" --no-plot --quiet "${cfg[@]}" \
        -s "resilience=${res[$strategy]}" -s cost.spot=true \
        -s "cloud={plugin: sim, trace: $trace, trace_start: $start, speedup: $speedup, boot_seconds: 0}" \
        -s "simulate={profile: $tmp/calibration, step_seconds: $(measure step-$strategy), restart_seconds: $restart, reconfigure_seconds: $start_s}" \
        >/dev/null
done
python3 - "$tmp" "$steps" "$(measure median-checkpoint)" <<'EOF'
import json, re, sys
tmp, steps, step = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
real = {}
for line in open(tmp + "/real/table.md"):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 9 and cells[1].isdigit() and not cells[0].startswith("uninterrupted"):
        name = "redundancy" if cells[0].startswith("redundancy") else "checkpoint"
        real[name] = (int(cells[1]), int(cells[2]), int(cells[4]), float(cells[5]))
print("| strategy | | wall s | useful | failovers | restarts |")
print("|---|---|---|---|---|---|")
for name in ("checkpoint", "redundancy"):
    s = json.load(open(f"{tmp}/sim-{name}/summary.json"))
    pre, fo, rs, wall = real[name]
    sim_wall = s["hours"] * 3600
    print(f"| {name} | real | {wall:.1f} | {100 * steps * step / wall:.0f} % | {fo} | {rs} |")
    print(f"| | simulated | {sim_wall:.1f} | {100 * steps * step / sim_wall:.0f} % | "
          f"{s['failovers']:.0f} | {s['fatal_failures']:.0f} |")
    print(f"| | simulated / real | {sim_wall / wall:.2f} | | | |")
EOF
