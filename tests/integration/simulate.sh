#!/usr/bin/env bash
# `bivouac simulate` (docs/simulation.md): a pipeline's training on the `sim` cloud's
# simulated market. Small runs whose every figure is worked out by hand from the
# semantics (a replayed trace: a failover, a reconfiguration to no pipeline, a join, a
# restart from the checkpoint without redundancy), the same runs again (the same numbers),
# the workload read from a real run's directory, the drawn market (seeded), and the errors
# (file:line:column, exit 2).
# Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=check_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.bash"
# shellcheck source=procs_lib.bash
source "$(dirname "${BASH_SOURCE[0]}")/procs_lib.bash"
procs_setup sim # $tmp; the runs' socket directories in $TMPDIR
src=$BIVOUAC_SOURCE_DIR

# A 2-stage pipeline of the tiny transformer: 20 steps of 4 samples, each 10 s; a failover
# pauses 1 s, a step on a shadow takes twice as long, a reconfiguration 5 s.
printf '0,add,node1\n0,add,node2\n100000,remove,node2\n200000,add,node3\n' >"$tmp/trace.csv"
cat >"$tmp/exp.yaml" <<YAML
name: sim-test
model: {plugin: transformer, layers: 2, heads: 2, width: 32}
dataset: {name: tinyshakespeare}
train: {steps: 20, batch: 4, block: 16, seed: 3}
compute: {plugin: cpu, threads: 1}
pipeline: {stages: 2, microbatches: 1}
resilience: [{plugin: redundancy}, {plugin: checkpoint, every: 5}]
policy: {file: $src/scripts/lua/reconfigure.lua}
cost: {instance: p3.2xlarge, spot: true}
cloud: {plugin: sim, trace: trace.csv, boot_seconds: 0}
simulate: {step_seconds: 10, failover_seconds: 1, degraded_slowdown: 2,
           reconfigure_seconds: 5, restart_seconds: 30}
YAML

# run 0 of summary.json: name=value for every figure, then the expected ones
figures() {
    python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1] + "/summary.json"))["per_run"][0]
print(" ".join("%s=%.9g" % (k, r[k]) for k in ("hours", "preemptions", "fatal_failures",
      "failovers", "reconfigurations", "nodes", "throughput", "cost_per_hour", "value",
      "useful_fraction", "lifetime_hours", "usd")), r["finished"])
EOF
}
err() { "$BIVOUAC" "$@" >/dev/null 2>"$tmp/err" && echo 0 || echo "$?"; }
# want END_S NODE_SECONDS USEFUL_S PREEMPTIONS FATAL FAILOVERS RECONFIGURATIONS
want() {
    python3 - "$@" <<'EOF'
import sys
end, node_s, useful, pre, fatal, fo, rc = map(float, sys.argv[1:])
usd = node_s / 3600 * 0.918          # p3.2xlarge spot
cph = usd / (end / 3600)
tput = 80 / end                      # 20 steps of 4 samples
print(" ".join("%s=%.9g" % kv for kv in (("hours", end / 3600), ("preemptions", pre),
      ("fatal_failures", fatal), ("failovers", fo), ("reconfigurations", rc),
      ("nodes", node_s / end), ("throughput", tput), ("cost_per_hour", cph),
      ("value", tput / cph), ("useful_fraction", useful / end),
      ("lifetime_hours", node_s / 3 / 3600), ("usd", usd))), True)
EOF
}

# 1. Bamboo's policy. Both nodes join at 0: a 5 s reconfiguration starts the pipeline at
#    5 s, so step k ends at 5 + 10k. node2 (stage 1) is lost at 100 s, in step 10: its
#    shadow (stage 0's node) takes it over, the step ends at 106. The policy reconfigures
#    (2 of 1 active stages without a replica) to no pipeline (one node up) at 111; node3
#    joins at 200, a reconfiguration starts the pipeline at 205: steps 11 to 20 end at
#    305. Useful: 9 steps of 10 s, step 10's 11 s, 10 more; paid: node1 305 s, node2
#    100 s, node3 105 s.
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/a" --no-plot >"$tmp/a.out" 2>"$tmp/a.err"
check "Bamboo's policy: every figure" "$(figures "$tmp/a")" "$(want 305 510 201 1 0 1 1)"
check "the policy's decisions in metrics.jsonl, at their steps and times" \
    "$(python3 - "$tmp/a/metrics.jsonl" <<'EOF'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "event" in r:
        print(r["step"], r["event"], r["decision"], r.get("reason", ""), r["seconds"])
EOF
)" "9 preempted failover  100
10 degraded reconfigure 2 of 1 active stages without a replica 106"
check "a line per step: its throughput, cost so far and instances" \
    "$(python3 - "$tmp/a/metrics.jsonl" <<'EOF'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"samples_per_second"' in l]
print(len(steps), [s["step"] for s in steps][:3], steps[9]["seconds"], steps[9]["instances"],
      round(steps[9]["samples_per_second"], 9), round(steps[10]["cost_usd"], 9))
EOF
)" "20 [1, 2, 3] 106 1 0.363636364 $(python3 -c 'print(round((215 + 100 + 15) / 3600 * 0.918, 9))')"
check "the summary's table" "$(sed -n 1p "$tmp/a.out")" \
    "sim-test: 1 simulated run (seeds 3 to 3), 1 finished"
check "the summary: fatal failures and failovers" \
    "$(grep -E '^  (fatal failures|failovers) ' "$tmp/a.out" | awk '{print $(NF-3)}' | tr '\n' ' ')" \
    "0 1 "

# The same market as a zone's live instances over time (seconds,count: the fall at 100 s
# removes the newest node, stage 1's), and as a trace twice as slow replayed at speedup 2.
printf '0,2\n100,1\n200,2\n' >"$tmp/counts.csv"
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/a3" --no-plot \
    -s "cloud={plugin: sim, trace: $tmp/counts.csv, boot_seconds: 0}" >/dev/null 2>&1
check "a step-function trace: the same run" "$(figures "$tmp/a3")" "$(figures "$tmp/a")"
printf '0,add,node1\n0,add,node2\n200000,remove,node2\n400000,add,node3\n' >"$tmp/slow.csv"
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/a4" --no-plot \
    -s "cloud={plugin: sim, trace: $tmp/slow.csv, speedup: 2, boot_seconds: 0}" >/dev/null 2>&1
check "a trace at speedup 2: the same run" "$(figures "$tmp/a4")" "$(figures "$tmp/a")"

# 2. The same, reconfiguring never (reconfigure_at above any fraction): steps 11 to 15 run
#    on the shadow, 20 s each (126 ... 206); node3 joins at 200 and the policy replaces,
#    at step 15's end: 5 s, then steps 16 to 20 end at 261.
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/b" --no-plot \
    -s 'policy.params={reconfigure_at: 1e9}' >/dev/null 2>&1
check "running on the shadow until a node joins: every figure" "$(figures "$tmp/b")" \
    "$(want 261 422 251 1 0 1 1)"
check "the join's decision" \
    "$(grep -c '"event": "joined", "decision": "replace", "reason": "full pipelines first"' "$tmp/b/metrics.jsonl")" 1

# 3. Without redundancy the loss at 100 s is a restart from step 5's checkpoint (at 55 s):
#    30 s, then no pipeline until node3 joins; 205 s on, steps 6 to 20 end at 355.
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/c" --no-plot \
    -s 'resilience=[{plugin: checkpoint, every: 5}]' >/dev/null 2>&1
check "checkpoints alone: a restart, every figure" "$(figures "$tmp/c")" \
    "$(want 355 610 200 1 1 0 0)"

# 4. Two pipelines of 2 stages on 4 nodes; both of pipeline 0's are lost at 100 s (no
#    shadow is left), and pipeline 1 is whole: Bamboo's policy lays the 2 nodes up out
#    afresh as 1 pipeline from its state (a reconfiguration, no restart), as the pipeline
#    engine does; without a handler, the default is a restart from the last checkpoint.
printf '0,add,node%d\n' 1 2 3 4 >"$tmp/two.csv"
printf '100000,remove,node1\n100000,remove,node2\n' >>"$tmp/two.csv"
two=(-s pipeline.pipelines=2 -s "cloud={plugin: sim, trace: $tmp/two.csv, boot_seconds: 0}")
echo '-- no handlers: the events take their first decisions' >"$tmp/none.lua"
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/r2" --no-plot "${two[@]}" \
    >/dev/null 2>&1
check "consecutive stages lost, another pipeline whole: laid out afresh, no restart" \
    "$(figures "$tmp/r2" | grep -oE '(fatal_failures|reconfigurations)=[0-9]+|True$' | tr '\n' ' ')" \
    "fatal_failures=0 reconfigurations=1 True "
check "consecutive stages lost: the decision" \
    "$(grep -o '"event": "preempted", "decision": "[a-z]*", "reason": "[^"]*"' "$tmp/r2/metrics.jsonl")" \
    '"event": "preempted", "decision": "reconfigure", "reason": "two consecutive stages lost: laid out afresh from a whole pipeline"'
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/r3" --no-plot "${two[@]}" \
    -s "policy.file=$tmp/none.lua" >/dev/null 2>&1
check "consecutive stages lost, no handler: a restart" \
    "$(figures "$tmp/r3" | grep -oE '(fatal_failures|reconfigurations)=[0-9]+' | tr '\n' ' ')" \
    "fatal_failures=1 reconfigurations=0 "

# A policy's layout (on_layout): two pipelines of one stage each, 8 samples a step of 10 s
# (one stage holds both layers, with one microbatch: twice the work, half the slots).
# Step 10 (95 to 105 s) loses node2 at 100 s: one stage has no shadow, so a restart from
# step 5 (40 samples): 30 s, then one pipeline on node1 from 130 s, 10 steps to 230 s.
printf 'function on_layout(m)\n  return {set = {stages = 1, pipelines = 2}}\nend\n' >"$tmp/layout.lua"
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/l" --no-plot \
    -s "policy.file=$tmp/layout.lua" >/dev/null 2>&1
check "on_layout: the pipelines it sets, then what the nodes up allow" "$(python3 - "$tmp/l" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1] + "/summary.json"))["per_run"][0]
d = [json.loads(l)["value"] for l in open(sys.argv[1] + "/metrics.jsonl") if '"series": "pipelines"' in l]
print(round(r["hours"] * 3600, 6), r["fatal_failures"], d[0], d[-1], len(d))
EOF
)" "230.0 1 2 1 19"
printf 'function on_layout(m)\n  return {set = {depth = 3}}\nend\n' >"$tmp/bad_layout.lua"
check "on_layout setting what is not a layout (on_error: stop)" \
    "$(err simulate "$tmp/exp.yaml" -s "policy={file: $tmp/bad_layout.lua, on_error: stop}")" 2
check "on_layout setting what is not a layout: why" "$(cat "$tmp/err")" \
    "bivouac: error: simulated run 1 (seed 3): $tmp/bad_layout.lua: on_layout sets depth = 3; it sets stages (1 to 2), pipelines (0 to 2), lazy (0: no lflb figures) and instance (1 to 1, the instance types) only"
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/bl" --no-plot \
    -s "policy.file=$tmp/bad_layout.lua" >/dev/null 2>"$tmp/bl.err"
check "on_error: continue: a warning, the run without a policy (the default decisions: run 2's)" \
    "$(grep -c "on_layout sets depth = 3;.*; the simulated run goes on without the policy" "$tmp/bl.err") $(figures "$tmp/bl")" \
    "1 $(figures "$tmp/b")"

# Instance types (simulate.instances): g4dn.xlarge steps in 20 s where p3.2xlarge steps in
# 10, on a market that grants at once and preempts nothing. A policy that moves the run to
# g4dn.xlarge at its first layout: p3.2xlarge's two nodes are paid for 5 s (the start's
# pause), then the g4dn.xlarge's are granted, a 5 s pause, and 20 steps of 20 s: 410 s.
types=(-s 'cloud={plugin: sim, creation: 1, boot_seconds: 0}'
       -s 'simulate.instances={g4dn.xlarge: 20}')
cat >"$tmp/move.lua" <<'EOF'
local calls = 0
function on_layout(m)
  calls = calls + 1
  return {set = {instance = (calls == 2) and 2 or m.instance}}
end
EOF
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/ty" --no-plot "${types[@]}" \
    -s "policy.file=$tmp/move.lua" >"$tmp/ty.out" 2>&1
check "instance types: a move at the first layout, every figure" "$(python3 - "$tmp/ty" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1] + "/summary.json"))["per_run"][0]
m = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
moves = [(l["instance"], l["seconds"]) for l in m if l.get("decision") == "instance"]
print(round(r["hours"] * 3600, 6), int(r["instance_switches"]), round(r["usd"], 9), moves)
EOF
)" "410.0 1 $(python3 -c 'print(round((2 * 5 * 0.918 + 2 * 405 * 0.158) / 3600, 9))') [('g4dn.xlarge', 5)]"
# value.lua: a g4dn.xlarge node trains 1 / (20 x 0.158) samples a second per dollar an
# hour where a p3.2xlarge trains 1 / (10 x 0.918): it starts on g4dn.xlarge (405 s, no move);
# at 100 s a step it would give less, and the run stays on p3.2xlarge (205 s).
for step in 20 100; do
    "$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/tv$step" --no-plot "${types[@]}" \
        -s "simulate.instances={g4dn.xlarge: $step}" \
        -s "policy.file=$src/scripts/lua/value.lua" >/dev/null 2>&1
done
check "value.lua: the instance type of more value, chosen before any node" "$(python3 - "$tmp" <<'EOF'
import json, sys
for s in (20, 100):
    r = json.load(open("%s/tv%d/summary.json" % (sys.argv[1], s)))["per_run"][0]
    print(round(r["hours"] * 3600, 6), int(r["instance_switches"]), round(r["usd"] / r["hours"], 6))
EOF
)" "405.0 0 0.316
205.0 0 1.836"
check "simulate.instances: each problem at its place" \
    "$(err simulate "$tmp/exp.yaml" -s 'cloud={plugin: sim}' \
        -s 'simulate.instances={x9.large: 3, g4dn.xlarge: fast, p3.2xlarge: 4}') $(cat "$tmp/err")" \
    "2 <command line>:1:21: error: simulate.instances: instance type 'x9.large' is not in price table aws-us-east-1-2021
<command line>:1:47: error: simulate.instances.g4dn.xlarge: a pipeline's step on it in seconds (at profile_stages stages), a number above 0
<command line>:1:53: error: simulate.instances: 'p3.2xlarge' is the experiment's cost.instance, or named twice"
check "simulate.instances with a replayed trace: refused" \
    "$(err simulate "$tmp/exp.yaml" -s 'simulate.instances={g4dn.xlarge: 20}') $(cat "$tmp/err")" \
    "2 <command line>:1:20: error: simulate.instances: the cloud replays a trace, which is one instance type's market: simulate other types on a drawn market (cloud.preemption)"
check "preemption_by_type: a bad list, at the cloud's place" \
    "$(err simulate "$tmp/exp.yaml" -s 'cloud={plugin: sim, preemption_by_type: g4dn.xlarge=2}') $(cat "$tmp/err")" \
    "2 <command line>:1:7: error: sim cloud: preemption_by_type 'g4dn.xlarge=2': not TYPE=P pairs (P a probability below 1, at most 16 types) separated by commas"
check "draws: hourly with bulk preemptions: refused, at the cloud's place" \
    "$(err simulate "$tmp/exp.yaml" -s 'cloud={plugin: sim, draws: hourly, bulk: 3}') $(cat "$tmp/err")" \
    "2 <command line>:1:7: error: sim cloud: draws: hourly preempts one node at a time, as Bamboo's simulator does (bulk 3)"

# 4. The same runs again give the same numbers; the drawn market (seeded) too, and
#    another seed another market.
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/a2" --no-plot >/dev/null 2>&1
check "a run again: the same summary.json" "$(cmp -s "$tmp/a/summary.json" "$tmp/a2/summary.json" && echo same)" same
drawn=(-s 'cloud={plugin: sim, preemption: 0.5, creation: random, boot_seconds: 45}'
       -s train.steps=20000 -s pipeline.pipelines=2)
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 5 --out "$tmp/d1" --no-plot "${drawn[@]}" >/dev/null 2>&1
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 5 --out "$tmp/d2" --no-plot "${drawn[@]}" >/dev/null 2>&1
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 5 --seed 4 --out "$tmp/d3" --no-plot "${drawn[@]}" >/dev/null 2>&1
check "the drawn market: the same seeds, the same runs" \
    "$(cmp -s "$tmp/d1/summary.json" "$tmp/d2/summary.json" && echo same)" same
check "runs 2 to 5 of seed 3 are runs 1 to 4 of seed 4" "$(python3 - "$tmp/d1" "$tmp/d3" <<'EOF'
import json, sys
a, b = (json.load(open(d + "/summary.json"))["per_run"] for d in sys.argv[1:])
print(a[1:] == b[:4], a[0] != b[0])
EOF
)" "True True"
check "the batch's distributions: every figure's values over the runs, sorted" \
    "$(python3 - "$tmp/d1" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1] + "/distribution/metrics.jsonl")]
s = json.load(open(sys.argv[1] + "/summary.json"))["per_run"]
v = [l["value"] for l in lines if l["series"] == "value"]
print(len(lines), v == sorted(r["value"] for r in s), [l["rank"] for l in lines[:5]])
EOF
)" "70 True [1, 2, 3, 4, 5]"
check "result.json in a real run's terms: each run's value 1/(T C), and bivouac compare reads it" \
    "$(python3 - "$tmp/d1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1] + "/result.json"))
print(r["simulated"], len(r["runs"]), all(abs(p["value"] * p["wall_seconds"] * p["cost_usd"] - 1) < 1e-9
                                        for p in r["runs"]))
EOF
) $("$BIVOUAC" compare "$tmp/d1" "$tmp/d3" --out "$tmp/cmp.png" 2>/dev/null | grep -c '^d[13] (5 seeds) ')" \
    "True 5 True 2"
check "the drawn market at 0.5 an hour: preemptions, failovers, lives of about 1.4 h" \
    "$(python3 - "$tmp/d1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1] + "/summary.json"))
print(r["finished"], r["preemptions"] > 10, r["failovers"] > 0, 0.5 < r["lifetime_hours"] < 3,
      all(abs(p["usd"] - p["cost_per_hour"] * p["hours"]) < 1e-6 * p["usd"]
          for p in r["per_run"]))
EOF
)" "5 True True True True"

# The drawn market's laws, on 128 nodes for 10 hours (no redundancy: a loss is a restart,
# which does not change who is paid): preempted at 0.3 an hour, each replaced at once,
# the losses are Poisson with mean 128 x 10 x -ln(0.7) = 456.5 (sd 21.4); granted at 0.5
# an hour, the nodes up average 128 x (1 - (1 - 0.5^10) / (10 ln 2)) = 109.55.
law=(--runs 1 --no-plot -s pipeline.pipelines=64 -s train.batch=64 -s 'resilience=[]' -s simulate.hours=10
     -s simulate.samples=1e15)
"$BIVOUAC" simulate "$tmp/exp.yaml" "${law[@]}" --out "$tmp/m1" \
    -s 'cloud={plugin: sim, preemption: 0.3, boot_seconds: 0}' >/dev/null 2>&1
"$BIVOUAC" simulate "$tmp/exp.yaml" "${law[@]}" --out "$tmp/m2" \
    -s 'cloud={plugin: sim, creation: 0.5, boot_seconds: 0}' >/dev/null 2>&1
# The hourly draws (draws: hourly): granted at 0.5 an hour, half the 128 requests at the
# start and each hour's draws half of those waiting, at uniform seconds: the nodes up in
# hour h average 128 - 48 / 2^h, over 10 hours 128 - 9.6 (1 - 2^-10) = 118.41; preempted
# at 0.3 for 2 hours, every request granted at the start and none after hour 0 (creation 1
# in hour 0 only), the preemptions are about 0.3 per node and hour (sd about 0.035).
"$BIVOUAC" simulate "$tmp/exp.yaml" "${law[@]}" --out "$tmp/m3" \
    -s 'cloud={plugin: sim, creation: 0.5, boot_seconds: 0, draws: hourly}' >/dev/null 2>&1
"$BIVOUAC" simulate "$tmp/exp.yaml" "${law[@]}" --out "$tmp/m4" -s simulate.hours=2 \
    -s "cloud={plugin: sim, preemption: 0.3, boot_seconds: 0, draws: hourly, creation: '1$(printf ',0%.0s' $(seq 23))'}" >/dev/null 2>&1
check "the hourly draws: nodes within 2 % of 118.41; preemptions per node an hour about 0.3" \
    "$(python3 - "$tmp/m3" "$tmp/m4" <<'EOF'
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
print(abs(a["nodes"] / 118.41 - 1) < 0.02, a["preemptions"], 0.2 < b["preemptions"] / 128 / 2 < 0.45)
EOF
)" "True 0 True"
check "the market's laws: preemptions within 3 sd of 456.5, nodes within 5 % of 109.55" \
    "$(python3 - "$tmp/m1" "$tmp/m2" <<'EOF'
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
print(abs(a["preemptions"] - 456.5) < 3 * 21.4, abs(a["nodes"] - 128) < 0.5,
      abs(b["nodes"] / 109.55 - 1) < 0.05, b["preemptions"])
EOF
)" "True True True 0"

# 5. The workload from a real run's directory: its median step, its layout's batch.
"$BIVOUAC" run "$src/tests/data/transformer/tiny.yaml" --out "$tmp/real" --quiet --no-plot \
    -s pipeline.stages=2 -s train.steps=12 >/dev/null 2>&1
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/p" --no-plot \
    -s "simulate={profile: $tmp/real}" >/dev/null 2>&1
check "the profile's step: the median of the run's steps" "$(python3 - "$tmp/real" "$tmp/p" <<'EOF'
import json, statistics, sys
t, last = [], 0
for l in open(sys.argv[1] + "/metrics.jsonl"):
    r = json.loads(l)
    if "train_loss" in r:
        t.append(r["seconds"] - last)
        last = r["seconds"]
s = json.load(open(sys.argv[2] + "/summary.json"))
print(abs(s["step_seconds"] - statistics.median(t)) < 1e-9, s["profile"] == sys.argv[1])
EOF
)" "True True"

# simulate with the profile of run RUN (into OUT): "COUNT SECONDS>0 SAME", where the
# summary's KEY_seconds is the run's KEY_seconds over its COUNT_KEY
profile_pause() {
    local run=$1 out=$2 key=$3 count=$4
    "$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$out" --no-plot \
        -s "simulate={profile: $run}" >/dev/null 2>&1
    python3 - "$run" "$out" "${key}_seconds" "$count" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1] + "/result.json"))
s = json.load(open(sys.argv[2] + "/summary.json"))
key, count = sys.argv[3], sys.argv[4]
print(r[count], r[key] > 0, abs(s[key] - r[key] / r[count]) < 1e-9)
EOF
}

# a real run that restarted from its checkpoint in the process: a restart's pause from it
BIVOUAC_STAGE_FAULT=1:5:forward "$BIVOUAC" run "$src/tests/data/transformer/tiny.yaml" \
    --out "$tmp/restarted" --quiet --no-plot -s pipeline.stages=2 -s train.steps=12 \
    -s 'cloud={plugin: local}' >/dev/null 2>&1
check "the profile's restart: its restart_seconds over its restarts" \
    "$(profile_pause "$tmp/restarted" "$tmp/pr" restart restarts)" "1 True True"

# a real run laid out afresh (a stage lost, failed over, the degraded pipeline shrunk to 2
# stages by the shipped policy): a reconfiguration's pause from it
BIVOUAC_STAGE_FAULT=1:5:forward "$BIVOUAC" run "$src/tests/data/transformer/tiny.yaml" \
    --out "$tmp/relaid" --quiet --no-plot -s pipeline.stages=3 -s model.layers=4 \
    -s train.steps=12 -s 'cloud={plugin: local}' \
    -s 'resilience=[{plugin: redundancy}, {plugin: checkpoint, every: 10}]' \
    -s "policy={file: $src/scripts/lua/reconfigure.lua}" >/dev/null 2>&1
check "the profile's reconfiguration: its reconfigure_seconds over its reconfigurations" \
    "$(profile_pause "$tmp/relaid" "$tmp/prl" reconfigure reconfigurations)" "1 True True"

# bivouac profile: a short real run (stages as local processes) whose directory simulate reads
"$BIVOUAC" profile "$tmp/exp.yaml" --steps 12 --out "$tmp/prof" >"$tmp/prof.out" 2>"$tmp/prof.err"
check "profile: what it measured, and how to use it" \
    "$(sed -n '2,3p' "$tmp/prof.out" | sed 's/a step [0-9.]* s/a step S s/')" \
    "profile $tmp/prof: a step S s at 2 stages x 1 pipeline, 4 samples a pipeline and step
simulate it: bivouac simulate EXP.yaml -s simulate.profile=$tmp/prof"
check "profile: 12 steps of 2 stage processes" \
    "$(python3 -c "import json; r = json.load(open('$tmp/prof/result.json')); print(r['steps'], r['pipeline_stages'])")" "12 2"
"$BIVOUAC" simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/pp" --no-plot \
    -s "simulate={profile: $tmp/prof}" >/dev/null 2>&1
check "profile: simulate's step is the one it printed" \
    "$(python3 -c "import json; print('%.4f' % json.load(open('$tmp/pp/summary.json'))['step_seconds'])")" \
    "$(sed -n 2p "$tmp/prof.out" | grep -o 'a step [0-9.]*' | cut -d' ' -f3)"

# Graph runs (Dorylus): 1 graph server, 1 parameter server and the coordinator; an epoch
# is 1 s of graph work and 2 stages of 4 tasks of 0.25 s at full speed on 4 functions,
# of which a server serves 2 at full speed: each task 0.5 s, one wave per stage, 2 s an
# epoch; 10 epochs after a 5 s start: 25 s. Billed: 8 invocations an epoch of 0.5 s at
# 192 MB (the 2021 table: $0.20 per million, $0.0000166667 per GB-s), and three
# c5n.2xlarge for 25 s.
cat >"$tmp/graph.yaml" <<YAML
name: sim-graph
model: {plugin: gcn}
dataset: {synthetic: communities, nodes: 300, features: 24, classes: 3, val: 60, test: 120}
train: {epochs: 10}
engine: {intervals: 4}
compute: {plugin: lambda, lambdas: 4}
cloud: {plugin: sim, boot_seconds: 0}
simulate: {graph_seconds: 1, task_seconds: 0.25, tensor_stages: 2, lambda_capacity: 2,
           reconfigure_seconds: 5}
YAML
gfig() {
    python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1] + "/summary.json"))["per_run"][0]
print(" ".join("%s=%.9g" % (k, r[k]) for k in ("hours", "fatal_failures", "nodes", "throughput",
      "useful_fraction", "usd")))
EOF
}
gwant() { # END_S NODE_SECONDS USEFUL_S FATAL EPOCHS_BILLED BILLED_S
    python3 - "$@" <<'EOF'
import sys
end, node_s, useful, fatal, epochs, billed = map(float, sys.argv[1:])
calls = 8 * epochs
usd = node_s / 3600 * 0.432 + calls * 0.2e-6 + calls * billed * 192 / 1024 * 0.0000166667
print(" ".join("%s=%.9g" % kv for kv in (("hours", end / 3600), ("fatal_failures", fatal),
      ("nodes", node_s / end), ("throughput", 10 / end), ("useful_fraction", useful / end),
      ("usd", usd))))
EOF
}
"$BIVOUAC" simulate "$tmp/graph.yaml" --runs 1 --out "$tmp/g" --no-plot >/dev/null 2>&1
check "a graph run: every figure" "$(gfig "$tmp/g")" "$(gwant 25 75 20 0 10 0.5)"
# value.lua picks 2 functions: the same 2 s an epoch (two waves of 0.25 s), billed 0.3 s
"$BIVOUAC" simulate "$tmp/graph.yaml" --runs 1 --out "$tmp/gv" --no-plot \
    -s "policy.file=$src/scripts/lua/value.lua" >/dev/null 2>&1
check "a graph run, value.lua: 2 functions, every figure" \
    "$(grep -c '"series": "lambdas", "unit": "functions", "value": 2,' "$tmp/gv/metrics.jsonl") $(gfig "$tmp/gv")" \
    "10 $(gwant 25 75 20 0 10 0.3)"
# task_times: exponential: a task of mean 0.5 s is billed 0.1 / (1 - e^-0.2) = 0.5517 s on
# average (exponential times rounded up to 100 ms), the epochs as before
"$BIVOUAC" simulate "$tmp/graph.yaml" --runs 1 --out "$tmp/ge" --no-plot \
    -s simulate.task_times=exponential >/dev/null 2>&1
check "a graph run, exponential task times: the billing's mean" "$(gfig "$tmp/ge")" \
    "$(gwant 25 75 20 0 10 "$(python3 -c 'import math; print(0.1 / (1 - math.exp(-0.2)))')")"
# a server lost at 12 s (in epoch 4) on spot nodes: a restart from epoch 0 (no checkpoint
# before epoch 10), 30 s, then the 10 epochs from 42 s once the replacement (20 s) is up
printf '0,add,n1\n0,add,n2\n0,add,n3\n12000,remove,n2\n20000,add,n4\n' >"$tmp/gtrace.csv"
"$BIVOUAC" simulate "$tmp/graph.yaml" --runs 1 --out "$tmp/gs" --no-plot -s cost.spot=true \
    -s "cloud={plugin: sim, trace: $tmp/gtrace.csv, boot_seconds: 0}" >/dev/null 2>&1
check "a graph run loses a server: a restart, every figure" "$(gfig "$tmp/gs")" \
    "$(gwant 62 178 20 1 13 0.5)"
sed 's/plugin: lambda, lambdas: 4/plugin: cpu/' "$tmp/graph.yaml" >"$tmp/graph_cpu.yaml"
check "a graph run on tensor workers: refused" "$(err simulate "$tmp/graph_cpu.yaml")" 2
check "a graph run on tensor workers: why, where" "$(cat "$tmp/err")" \
    "$tmp/graph_cpu.yaml:6:10: error: simulate runs a graph model's tensor tasks on serverless functions (compute: {plugin: lambda}); compute 'cpu' runs them on tensor workers, which are not simulated"

# A graph run's profile (simulate.profile): a real run on 2 functions, 4 epochs. At its
# own layout the simulated epoch is the run's median epoch (the graph work is what the
# epoch leaves after its tasks' waves: epoch - stages ceil(intervals / L) task, at least
# 0); with 2 graph servers each server's graph work and each task's rows are halved, and
# so is the epoch.
sed -e 's/lambdas: 4/lambdas: 2/' -e 's/^cloud: .*/cloud: {plugin: local, lambda_memory_mb: 1024}/' \
    -e '/^simulate:/,$d' -e 's/epochs: 10/epochs: 4/' "$tmp/graph.yaml" >"$tmp/greal.yaml"
run "$tmp/greal" run "$tmp/greal.yaml" --out "$tmp/greal" --quiet --no-plot
check "a graph run to profile: exit 0, nothing left" "$rc $(leftovers "$pgid")" \
    "0 processes 0, socket dirs 0"
for g in 1 2; do
    "$BIVOUAC" simulate "$tmp/graph.yaml" --runs 1 --out "$tmp/gp$g" --no-plot \
        -s compute.lambdas=2 -s cluster.graph_servers=$g \
        -s "simulate={profile: $tmp/greal, reconfigure_seconds: 5}" >/dev/null 2>&1
done
check "a graph run's profile: its epoch at its layout, half of it on 2 servers" \
    "$(python3 - "$tmp/greal" "$tmp/gp1" "$tmp/gp2" <<'EOF'
import json, math, statistics, sys
ms = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
t = [m["seconds"] for m in ms if "train_loss" in m]
med = lambda k: statistics.median(m["value"] for m in ms if m.get("series") == k)
epoch = statistics.median(b - a for a, b in zip(t, t[1:]))
task, calls = med("lambda_task_ms") / 1e3, med("lambda_invocations") - med("lambda_relaunches")
want = max(epoch, round(calls / 4) * math.ceil(4 / med("lambdas")) * task)
got = [(lambda r: r["useful_fraction"] * r["hours"] * 3600 / 10)(
    json.load(open(d + "/summary.json"))["per_run"][0]) for d in sys.argv[2:]]
print(abs(got[0] - want) < 1e-9 * want, abs(got[1] - want / 2) < 1e-9 * want)
EOF
)" "True True"
check "a graph profile for a pipeline run: refused" \
    "$(err simulate "$tmp/exp.yaml" -s "simulate.profile=$tmp/greal")" 2
check "a graph profile for a pipeline run: why" \
    "$(grep -c "simulate.profile: $tmp/greal/result.json: not a pipeline run's result" "$tmp/err")" 1
check "a pipeline profile for a graph run: refused" \
    "$(err simulate "$tmp/graph.yaml" -s "simulate={profile: $tmp/real}")" 2
check "a pipeline profile for a graph run: why" \
    "$(grep -c "simulate.profile: $tmp/real/result.json: not the result of a graph run on functions" "$tmp/err")" 1

# 6. Errors: where, and exit 2.
check "run refuses the simulated cloud" "$(err run "$tmp/exp.yaml" --out "$tmp/r")" 2
check "run refuses the simulated cloud: why" "$(cat "$tmp/err")" \
    "bivouac: error: cloud 'sim' has a simulated clock: bivouac simulate $tmp/exp.yaml runs the experiment on it"
sed 's/^cloud: .*/cloud: {plugin: local}/' "$tmp/exp.yaml" >"$tmp/local.yaml"
check "a cloud in real time" "$(err simulate "$tmp/local.yaml")" 2
check "a cloud in real time: why, where" "$(cat "$tmp/err")" \
    "$tmp/local.yaml:10:8: error: simulate needs a cloud with a simulated clock, cloud: {plugin: sim}; cloud 'local' runs in real time"
check "no step time" "$(err simulate "$tmp/exp.yaml" -s 'simulate={reconfigure_seconds: 5}')" 2
check "no step time: why, where (an override's place)" "$(cat "$tmp/err")" \
    "<command line>:1:10: error: simulate: needs step_seconds (a step's time) or a profile (a run's directory)"
sed 's/boot_seconds: 0}/boot_seconds: 0, creation: often}/' "$tmp/exp.yaml" >"$tmp/often.yaml"
check "a malformed creation" "$(err simulate "$tmp/often.yaml")" 2
check "a malformed creation: why, where" "$(cat "$tmp/err")" \
    "$tmp/often.yaml:10:8: error: sim cloud: creation 'often': not a probability, 24 of them separated by commas, or 'random'"
check "a misspelt simulate key" "$(err simulate "$tmp/exp.yaml" -s simulate.step_second=3)" 2
check "a misspelt simulate key: the suggestion" "$(grep -c "did you mean 'step_seconds'" "$tmp/err")" 1
check "--runs 0" "$(err simulate "$tmp/exp.yaml" --runs 0)" 2
check "--out DIR of a real run: refused" "$(err simulate "$tmp/exp.yaml" --out "$tmp/real")" 2
check "--out DIR of a real run: why, and the run untouched" \
    "$(cat "$tmp/err") $(grep -c '"simulated"' "$tmp/real/result.json")" \
    "bivouac: error: $tmp/real holds a run of bivouac run: simulate writes its results elsewhere (another --out) 0"
check "--out DIR of a simulation: written again" "$(err simulate "$tmp/exp.yaml" --runs 1 --out "$tmp/a" --no-plot)" 0
check "a profile that is not a run" "$(err simulate "$tmp/exp.yaml" -s "simulate.profile=$tmp")" 2
check "a profile that is not a run: why" "$(grep -c "simulate.profile: cannot read $tmp/result.json" "$tmp/err")" 1
finish
