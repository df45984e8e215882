#!/usr/bin/env bash
# The recovery pause (issue 15; docs/redundancy.md#the-failover): the pipeline benchmark
# config (configs/transformer-pipeline.yaml) as D x P stage processes with the redundancy
# strategy (eflb), one stage process killed (BIVOUAC_STAGE_FAULT) at step --at in its
# forward pass, its backward pass, entering the all-reduce, or at the commit of a prepared
# step; and the same kill without redundancy, recovered by restarting in the process from
# the last checkpoint. Prints, per case: the pause (failover: from the loss seen to the end
# of the step it was lost in, result.json's failover_seconds; restart: from the end of the
# step before the kill to the end of the step killed, less a median step, which includes
# starting the processes again and the steps redone since the checkpoint), the
# uninterrupted run's median step, the pause
# in steps, whether the final weights are the uninterrupted run's, and how the step the
# kill failed went on (docs/redundancy.md#lazy-brc: run again by every stage, by the lost
# stage's pipeline only, or by none, the lost stage's backward run again by its shadow:
# lazy BRC). Then the same stage
# process hanging (BIVOUAC_STAGE_FAULT ...:hang, SIGSTOP) in its forward pass and after it
# prepared, with pipeline.peer_timeout --peer-timeout: found and failed over
# (docs/redundancy.md#a-stage-that-hangs); its pause is the time between the ends of the
# step before the hang and of the step it hung in, less a median step (the coordinator
# cannot see when a hang began). Then a reconfiguration
# (docs/redundancy.md#reconfigurations-that-change-the-layout): the same stage killed 10
# steps earlier and failed over, then its shadow's process at step --at, in its backward
# pass (two consecutive stages gone), and the shipped policy (reconfigure_at 1) lays the
# processes left out afresh from the other pipeline's state; its pause is the time between
# the ends of the step before the kill and of the step killed, less a median step of the
# new layout (after it), and the relayout's own part (result.json's reconfigure_seconds).
#   bench/failover.sh [--build-dir build] [--steps 40] [--at 25] [--stages 3]
#                     [--pipelines 2] [--checkpoint-every 10] [--peer-timeout 5]
set -euo pipefail

build=build steps=40 at=25 stages=3 pipelines=2 every=10 peer=5
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) build=$2 ;;
    --steps) steps=$2 ;;
    --at) at=$2 ;;
    --stages) stages=$2 ;;
    --pipelines) pipelines=$2 ;;
    --checkpoint-every) every=$2 ;;
    --peer-timeout) peer=$2 ;;
    -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "failover.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bivouac="$build/bivouac"
[ -x "$bivouac" ] || { echo "failover.sh: no $bivouac: build first (cmake)" >&2; exit 2; }
export BIVOUAC_DATA_DIR=${BIVOUAC_DATA_DIR:-$here/../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) cores; $pipelines x $stages stage processes, $steps steps, kill at step $at"

exp="$here/configs/transformer-pipeline.yaml"
ckpt="{plugin: checkpoint, every: $every, keep: 2}"
cfg=(--quiet --no-plot -s train.steps="$steps" -s train.eval_interval="$every"
     -s train.eval_iters=1 -s train.final_eval_iters=1 -s pipeline.stages="$stages"
     -s pipeline.pipelines="$pipelines" -s 'cloud={plugin: local}')
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1/result.json" "$2"; }
median_step() {
    python3 - "$1/metrics.jsonl" <<'EOF'
import json, statistics, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1]) if '"train_loss"' in l and '"eval' not in l]
print(statistics.median(b - a for a, b in zip(s, s[1:])))
EOF
}

"$bivouac" run "$exp" --out "$tmp/whole" "${cfg[@]}" -s "resilience=[{plugin: redundancy}, $ckpt]" \
    >/dev/null 2>&1
step=$(median_step "$tmp/whole")
crc=$(field "$tmp/whole" params_crc32c)

echo "| recovery | killed at | pause s | median step s | pause in steps | weights | the step |"
echo "|---|---|---|---|---|---|---|"
went_on() { # how the failed step went on, from the log
    if grep -q "(lazy BRC)$" "$1"; then echo "lazy BRC"
    elif grep -q "pipelines go on from their update" "$1"; then echo "its pipeline again"
    elif grep -q "runs again (attempt" "$1"; then echo "again"
    else echo "applied"; fi
}
victim=$((stages + 1)) # stage 1 of pipeline 1: its all-reduce ring peer waits in it
for what in forward backward allreduce prepared; do
    out="$tmp/$what"
    BIVOUAC_STAGE_FAULT="$victim:$at:$what" "$bivouac" run "$exp" --out "$out" "${cfg[@]}" \
        -s "resilience=[{plugin: redundancy}, $ckpt]" >/dev/null 2>"$out.err" ||
        { echo "failover.sh: the $what run failed:" >&2; cat "$out.err" >&2; exit 1; }
    pause=$(field "$out" failover_seconds)
    same=$([ "$(field "$out" params_crc32c)" = "$crc" ] && echo "the same bits" || echo differ)
    how=$(went_on "$out.err")
    python3 -c "print(f'| failover (eflb) | {\"$what\"} | {$pause:.3f} | {$step:.3f} | {$pause / $step:.1f} | $same | $how |')"
done

# a hang: found by the silence around it, then failed over
step_gap() { # seconds between the ends of steps $2 and $2 + 1
    python3 - "$1/metrics.jsonl" "$2" <<'EOF'
import json, sys
s = {}
for l in open(sys.argv[1]):
    if '"train_loss"' in l and '"eval' not in l:
        r = json.loads(l)
        s[r["step"]] = r["seconds"]
print(s[int(sys.argv[2]) + 1] - s[int(sys.argv[2])])
EOF
}
for what in forward prepared; do
    out="$tmp/hang-$what"
    BIVOUAC_STAGE_FAULT="$victim:$at:$what:hang" "$bivouac" run "$exp" --out "$out" "${cfg[@]}" \
        -s pipeline.peer_timeout="$peer" -s "resilience=[{plugin: redundancy}, $ckpt]" \
        >/dev/null 2>"$out.err" ||
        { echo "failover.sh: the $what hang run failed:" >&2; cat "$out.err" >&2; exit 1; }
    pause=$(python3 -c "print($(step_gap "$out" "$at") - $step)")
    same=$([ "$(field "$out" params_crc32c)" = "$crc" ] && echo "the same bits" || echo differ)
    how=$(went_on "$out.err")
    python3 -c "print(f'| failover (eflb) of a hang, peer_timeout $peer s | {\"$what\"} | {$pause:.3f} | {$step:.3f} | {$pause / $step:.1f} | $same | $how |')"
done

# two consecutive stages lost: laid out afresh from the other pipeline's state
out="$tmp/reconfigure"
BIVOUAC_STAGE_FAULT="$victim:$((at - 10)):forward,$stages:$at:backward" "$bivouac" run "$exp" \
    --out "$out" "${cfg[@]}" -s "resilience=[{plugin: redundancy}, $ckpt]" \
    -s "policy={file: $here/scripts/lua/reconfigure.lua, params: {reconfigure_at: 1}}" \
    >/dev/null 2>"$out.err" ||
    { echo "failover.sh: the reconfiguration run failed:" >&2; cat "$out.err" >&2; exit 1; }
after=$(python3 - "$out/metrics.jsonl" "$at" <<'EOF'
import json, statistics, sys
s = [(r["step"], r["seconds"]) for r in map(json.loads, open(sys.argv[1]))
     if "train_loss" in r and "eval_train_loss" not in r]
s = [t for k, t in s if k > int(sys.argv[2]) + 1]
print(statistics.median(b - a for a, b in zip(s, s[1:])))
EOF
)
gap=$(step_gap "$out" "$at")
layout="$(field "$out" pipelines) x $(field "$out" pipeline_stages), $(field "$out" microbatches) microbatches"
python3 -c "p = $gap - $after; print(f'| reconfiguration (consecutive stages lost; the relayout {$(field "$out" reconfigure_seconds):.3f} s) | backward | {p:.3f} | {$after:.3f} (as $layout) | {p / $after:.1f} | another D | laid out afresh |')"

# without redundancy: the run restarts in the process from its last checkpoint
# (docs/redundancy.md#restarts-from-a-checkpoint); the pause is the time between the end of
# the step before the kill (its first record) and the end of the step killed (its last:
# the steps since the checkpoint run again), less a median step
out="$tmp/restart"
BIVOUAC_STAGE_FAULT="$victim:$at:backward" "$bivouac" run "$exp" --out "$out" "${cfg[@]}" \
    -s "resilience=[$ckpt]" >/dev/null 2>"$out.err" ||
    { echo "failover.sh: the restart run failed:" >&2; cat "$out.err" >&2; exit 1; }
gap=$(python3 - "$out/metrics.jsonl" "$at" <<'EOF'
import json, sys
first, last = {}, {}
for l in open(sys.argv[1]):
    if '"train_loss"' in l and '"eval' not in l:
        r = json.loads(l)
        first.setdefault(r["step"], r["seconds"])
        last[r["step"]] = r["seconds"]
print(last[int(sys.argv[2]) + 1] - first[int(sys.argv[2])])
EOF
)
same=$([ "$(field "$out" params_crc32c)" = "$crc" ] && echo "the same bits" || echo differ)
python3 -c "p = $gap - $step; print(f'| restart from the last checkpoint (no redundancy) | backward | {p:.3f} | {$step:.3f} | {p / $step:.1f} | $same | from its checkpoint |')"
