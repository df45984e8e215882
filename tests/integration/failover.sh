#!/usr/bin/env bash
# Bamboo's failover (docs/redundancy.md#the-failover): with the redundancy strategy, a
# stage process killed (SIGKILL) is taken over by its shadow's process from the replica;
# the step it died in, if not prepared by every stage, goes on from its update where every
# stage of a pipeline reached it (the lost stage's backward run again by its shadow from
# the replica's saved activations: lazy BRC) and runs again where not; the run ends with
# the uninterrupted run's weights to the bit:
#  - 2 pipelines of 3 stage processes, eflb, a checkpoint every 10 steps: a kill in the
#    forward pass, in the backward pass (of a middle stage; of a first stage, the last to
#    get there: lazy BRC), entering the all-reduce (lazy BRC) (its ring peers wait in
#    it), and after the step was prepared (at its commit); two kills of stages that are not
#    consecutive, at different steps and in one; a kill from outside at a moment the test
#    does not choose; a bulk
#    preemption of two stages of different pipelines at once, and one of two nodes of a
#    zone where the local cloud has zones (consecutive stages in different zones);
#  - lflb and efeb (no redundant forward; both redundant passes) fail over too (efeb's
#    shadow has the lost stage's gradients from its eager backward);
#  - a spot trace's removal is failed over, and its addition gives the stage a process of
#    its own again (the shipped policy, scripts/lua/reconfigure.lua; its decisions in
#    metrics.jsonl), over ipc and over links: tcp; a policy's restart of a degraded
#    pipeline restarts the run in the process from its last checkpoint, with the
#    uninterrupted weights; with pipeline.restarts: 0 it ends the run, and --resume ends it
#    with the uninterrupted weights; a decision no event offers is a policy error;
#  - the shadow's process killed after it took over, or two consecutive stages removed at
#    once (no replica of them is left), restarts the run in the process from its last
#    checkpoint, saying why, and it ends with the uninterrupted weights; with
#    pipeline.restarts: 0 it ends with exit 1 and says why;
#  - every run leaves nothing behind (processes, socket directories).
# The kills at chosen instructions come from BIVOUAC_STAGE_FAULT, which stage processes
# read (NODE:STEP:forward|backward|allreduce|prepared, commas between kills).
# Every run is in its own process group, killed at the end whatever happens.
# Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with tinyshakespeare/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/check_lib.bash"
source "$(dirname "$0")/procs_lib.bash"

procs_setup failover # $tmp; the runs' socket directories in $TMPDIR

exp="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"
base=(--quiet -s train.steps=60 -s model.layers=4 -s model.dropout=0.1 -s train.batch=8
      -s pipeline.microbatches=2 -s pipeline.stages=3 -s pipeline.pipelines=2
      -s 'cloud={plugin: local}')
eflb=("${base[@]}" -s 'resilience=[{plugin: redundancy}, {plugin: checkpoint, every: 10}]')
vals() { grep -o '"val_loss": [^,}]*' "$1/metrics.jsonl" | tr '\n' ' '; }

run "$tmp/whole" run "$exp" --out "$tmp/whole" "${eflb[@]}"
check "uninterrupted: exit 0" "$rc" 0
crc=$(field "$tmp/whole" params_crc32c)
check "uninterrupted: every replica equal to its original" \
    "$(field "$tmp/whole" replicas_equal)" '"replicas_equal": 6'
check "uninterrupted: no failover" "$(field "$tmp/whole" failovers)" '"failovers": 0'

# how the step the kill failed goes on (docs/redundancy.md#lazy-brc): run again by every
# stage, by the pipeline of the lost stage (the other one goes on from its update), or by
# none (the lost stage's backward run again by its shadow: lazy BRC)
said_again='step 21 runs again (attempt 2)'
said_pipelines='step 21: 1 of 2 pipelines go on from their update (attempt 2), the others run it again'
said_lazy="step 21 goes on from its update (attempt 2): the lost stage's backward is run again by its shadow from its replica's saved activations (lazy BRC)"

# a kill, and what the log says of it: NAME FAULT VICTIM SHADOW-STAGE SHADOW-PROCESS HOW
# (again, pipelines, lazy or none) RESUMED LAZY-BRC (result.json's counts)
failover() {
    local name=$1 fault=$2 victim=$3 shadow=$4 host=$5 how=$6 out="$tmp/$1"
    BIVOUAC_STAGE_FAULT=$fault run "$out" run "$exp" --out "$out" "${eflb[@]}"
    check "$name: exit 0" "$rc" 0
    [ "$rc" = 0 ] || cat "$out.err" >&2
    check "$name: the uninterrupted weights" "$(field "$out" params_crc32c)" "$crc"
    check "$name: the uninterrupted validation losses" "$(vals "$out")" "$(vals "$tmp/whole")"
    check "$name: replicas equal at the end" "$(field "$out" replicas_equal)" \
        '"replicas_equal": 6'
    check "$name: one failover" "$(field "$out" failovers)" '"failovers": 1'
    check "$name: the loss, then the failover, logged" \
        "$(grep -E "^bivouac: (warning: lost $victim \(node [0-9]+ on localhost\): it was killed by signal 9 \(Killed\)|info: failover: $shadow's process \(node $host\) adopts $victim from its replica)$" "$out.err" | cut -c1-26)" \
        "$(printf 'bivouac: warning: lost sta\nbivouac: info: failover: s')"
    local said=none
    [ "$how" = none ] || eval "said=\$said_$how"
    check "$name: how step 21 went on" \
        "$(grep -cxF -e "bivouac: info: $said_again" -e "bivouac: info: $said_pipelines" \
            -e "bivouac: info: $said_lazy" "$out.err"), $(grep -cxF "bivouac: info: $said" "$out.err")" \
        "$([ "$how" = none ] && echo 0, 0 || echo 1, 1)"
    check "$name: result.json's steps resumed and lazy BRCs" \
        "$(field "$out" steps_resumed), $(field "$out" lazy_brc)" \
        "\"steps_resumed\": $7, \"lazy_brc\": $8"
    check "$name: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
}
failover forward 0:20:forward "stage 0 of pipeline 0" "stage 2 of pipeline 0" 2 pipelines 1 0
failover backward 1:20:backward "stage 1 of pipeline 0" "stage 0 of pipeline 0" 0 pipelines 1 0
failover backward-first 3:20:backward "stage 0 of pipeline 1" "stage 2 of pipeline 1" 5 lazy 1 1
failover allreduce 4:20:allreduce "stage 1 of pipeline 1" "stage 0 of pipeline 1" 3 lazy 1 1
failover prepared 2:20:prepared "stage 2 of pipeline 0" "stage 1 of pipeline 0" 1 none 0 0

out="$tmp/two"
BIVOUAC_STAGE_FAULT=1:10:forward,5:30:backward run "$out" run "$exp" --out "$out" "${eflb[@]}"
check "two stages lost, not consecutive: exit 0" "$rc" 0
check "two stages lost: the uninterrupted weights" "$(field "$out" params_crc32c)" "$crc"
check "two stages lost: two failovers" "$(field "$out" failovers)" '"failovers": 2'
check "two stages lost: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# two stages of different pipelines killed in the same step: each loss is named to the
# stages (docs/redundancy.md#lazy-brc), however the coordinator sees it; one left unnamed
# kept its peers waiting for pipeline.peer_timeout, and the run restarted
out="$tmp/two-at-once"
BIVOUAC_STAGE_FAULT=0:20:forward,3:20:forward run "$out" run "$exp" --out "$out" "${eflb[@]}" \
    -s pipeline.peer_timeout=30
check "two stages lost in one step: exit 0" "$rc" 0
check "two stages lost in one step: the uninterrupted weights" \
    "$(field "$out" params_crc32c)" "$crc"
check "two stages lost in one step: two failovers, no restart" \
    "$(field "$out" failovers), $(field "$out" restarts)" '"failovers": 2, "restarts": 0'
check "two stages lost in one step: the pause is no wait for a peer (peer_timeout 30 s)" \
    "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['failover_seconds'] < 30)" \
        "$out/result.json")" True
check "two stages lost in one step: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"

# lflb: the other pipeline goes on from its update, the lost stage's runs the step again
# (no forward to run its backward from); efeb: its eager backward's gradients are taken
for case in lflb:1:20:backward:0 efeb:4:20:allreduce:1; do
    IFS=: read -r mode node at what brc <<<"$case"
    out="$tmp/$mode"
    BIVOUAC_STAGE_FAULT=$node:$at:$what run "$out" run "$exp" --out "$out" "${base[@]}" \
        -s "resilience=[{plugin: redundancy, mode: $mode}]"
    check "$mode: exit 0" "$rc" 0
    check "$mode: the uninterrupted weights" "$(field "$out" params_crc32c)" "$crc"
    check "$mode: one failover" "$(field "$out" failovers)" '"failovers": 1'
    check "$mode: the step went on from its update, lazy BRCs" \
        "$(field "$out" steps_resumed), $(field "$out" lazy_brc)" \
        "\"steps_resumed\": 1, \"lazy_brc\": $brc"
    check "$mode: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
done

# a kill from outside, whenever the run is past step 30
out="$tmp/outside"
run_signal "$out" 30 KILL "--role stage --index 4" run "$exp" --out "$out" "${eflb[@]}" \
    -s train.steps=600
g=$pgid
check "killed from outside: exit 0" "$rc" 0
[ "$rc" = 0 ] || cat "$out.err" >&2
run "$tmp/whole600" run "$exp" --out "$tmp/whole600" "${eflb[@]}" -s train.steps=600
check "killed from outside: the uninterrupted weights" "$(field "$out" params_crc32c)" \
    "$(field "$tmp/whole600" params_crc32c)"
check "killed from outside: one failover" "$(field "$out" failovers)" '"failovers": 1'
check "killed from outside: nothing left" "$(leftovers "$g")" "processes 0, socket dirs 0"

# a spot trace: node2 (stage 1 of pipeline 0) removed at 1.5 s, node7 added at 2.5 s and
# removed at 3 s; the shipped policy, told to keep a degraded pipeline (reconfigure_at 1;
# reconfigure.sh lays it out afresh), fails over, gives the stage a process of its own
# again on node7 (at a new address), and fails it over again when node7 goes
printf '0,add,node%d\n' 1 2 3 4 5 6 >"$tmp/trace.csv"
printf '1500,remove,node2\n2500,add,node7\n3000,remove,node7\n' >>"$tmp/trace.csv"
policy="$BIVOUAC_SOURCE_DIR/scripts/lua/reconfigure.lua"
keep="policy={file: $policy, params: {reconfigure_at: 1}}"
out="$tmp/joined"
run "$out" run "$exp" --out "$out" "${eflb[@]}" -s train.steps=600 \
    -s "cloud={plugin: local, trace: $tmp/trace.csv}" -s "$keep"
check "a trace's removal and addition: exit 0" "$rc" 0
[ "$rc" = 0 ] || cat "$out.err" >&2
check "a trace's removal and addition: the uninterrupted weights" \
    "$(field "$out" params_crc32c)" "$(field "$tmp/whole600" params_crc32c)"
check "a trace's removal and addition: two failovers, one node given back" \
    "$(field "$out" failovers), $(field "$out" replaced)" '"failovers": 2, "replaced": 1'
check "a trace's removal and addition: the policy's decisions in metrics.jsonl" \
    "$(grep -o '"event": "[a-z]*", "decision": "[a-z]*"' "$out/metrics.jsonl" | tr '\n' ' ')" \
    '"event": "preempted", "decision": "failover" "event": "joined", "decision": "replace" "event": "preempted", "decision": "failover" '
check "a trace's removal and addition: logged" \
    "$(grep -cE '^bivouac: info: (local cloud: the trace adds node7 at [0-9]+ s \([0-9.]+ s into the run\): a node to launch|policy: joined: replace \(full pipelines first\)|replaced: stage 1 of pipeline 0 runs in a process of its own again \(node 6\), no longer in stage 0 of pipeline 0.s \(the run paused [0-9.]+ s\))$' "$out.err")" 3
check "a trace's removal and addition: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"

# the same over links: tcp (CURVE): the adopted stage binds a port of its own in its
# shadow's process, the replacement says its port in a HELLO, and every node is told
out="$tmp/tcp"
run "$out" run "$exp" --out "$out" "${eflb[@]}" -s train.steps=600 -s pipeline.links=tcp \
    -s "cloud={plugin: local, trace: $tmp/trace.csv}" -s "$keep"
check "over tcp: exit 0" "$rc" 0
[ "$rc" = 0 ] || cat "$out.err" >&2
check "over tcp: the uninterrupted weights" "$(field "$out" params_crc32c)" \
    "$(field "$tmp/whole600" params_crc32c)"
check "over tcp: two failovers, one node given back" \
    "$(field "$out" failovers), $(field "$out" replaced)" '"failovers": 2, "replaced": 1'
check "over tcp: the adopted stage's new ports, and the replacement's" \
    "$(grep -cE '^bivouac: info: stage 1 of pipeline 0: inbox tcp://127\.0\.0\.1:[0-9]+(, in stage 0 of pipeline 0.s process)?$' "$out.err")" 4
check "over tcp: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# a stage removed as the run starts (before its first step): failed over all the same
printf '0,add,node%d\n' 1 2 3 4 5 6 >"$tmp/start.csv"
echo '1,remove,node2' >>"$tmp/start.csv"
out="$tmp/start"
run "$out" run "$exp" --out "$out" "${eflb[@]}" -s "cloud={plugin: local, trace: $tmp/start.csv}"
check "a stage removed as the run starts: exit 0, one failover" \
    "$rc, $(field "$out" failovers)" '0, "failovers": 1'
check "a stage removed as the run starts: the uninterrupted weights" \
    "$(field "$out" params_crc32c)" "$crc"
check "a stage removed as the run starts: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"

# a bulk preemption: two stage processes removed at the same instant; of different
# pipelines both are failed over, of consecutive stages the run ends saying why
printf '0,add,node%d\n' 1 2 3 4 5 6 >"$tmp/bulk.csv"
cp "$tmp/bulk.csv" "$tmp/bulk2.csv"
echo '500,remove,node1' >>"$tmp/bulk.csv"
echo '500,remove,node5' >>"$tmp/bulk.csv"
echo '500,remove,node1' >>"$tmp/bulk2.csv"
echo '500,remove,node2' >>"$tmp/bulk2.csv"
# the same removal once the run has started (a start that fails ends the run: a restart
# needs a run that trained), well before its 600 steps end
printf '0,add,node%d\n' 1 2 3 4 5 6 >"$tmp/bulk3.csv"
printf '2000,remove,node1\n2000,remove,node2\n' >>"$tmp/bulk3.csv"
out="$tmp/bulk"
run "$out" run "$exp" --out "$out" "${eflb[@]}" -s train.steps=600 \
    -s "cloud={plugin: local, trace: $tmp/bulk.csv}"
check "a bulk preemption, stages of different pipelines: exit 0, two failovers" \
    "$rc, $(field "$out" failovers)" '0, "failovers": 2'
check "a bulk preemption: the uninterrupted weights" "$(field "$out" params_crc32c)" \
    "$(field "$tmp/whole600" params_crc32c)"
check "a bulk preemption: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
out="$tmp/bulk2"
run "$out" run "$exp" --out "$out" "${eflb[@]}" -s train.steps=600 \
    -s "cloud={plugin: local, trace: $tmp/bulk3.csv}"
check "a bulk preemption of consecutive stages: exit 0, a restart" \
    "$rc, $(field "$out" restarts)" '0, "restarts": 1'
check "a bulk preemption of consecutive stages: says why" \
    "$(grep '^bivouac: warning: lost stage' "$out.err" | sed 's/.*(Killed); //')" \
    "stage 1 of pipeline 0 and its shadow, stage 0 of pipeline 0, are both gone: nothing keeps stage 1 of pipeline 0's layers"
check "a bulk preemption of consecutive stages: the uninterrupted weights" \
    "$(field "$out" params_crc32c)" "$(field "$tmp/whole600" params_crc32c)"
check "a bulk preemption of consecutive stages: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"

# the same bulk preemption with the trace's nodes in 3 zones: consecutive stages are in
# different zones (node1 and node2, one zone, stand for stage 0 of each pipeline), and
# both are failed over
out="$tmp/zones"
run "$out" run "$exp" --out "$out" "${eflb[@]}" -s train.steps=600 \
    -s "cloud={plugin: local, trace: $tmp/bulk2.csv, zones: 3}"
check "zones: the nodes the stages stand for" \
    "$(grep -o 'stage [0-9] of pipeline [0-9] (node [0-9]) stands for node[0-9], zone [0-9]' "$out.err" | tr '\n' ';')" \
    "stage 0 of pipeline 0 (node 0) stands for node1, zone 0;stage 1 of pipeline 0 (node 1) stands for node3, zone 1;stage 2 of pipeline 0 (node 2) stands for node5, zone 2;stage 0 of pipeline 1 (node 3) stands for node2, zone 0;stage 1 of pipeline 1 (node 4) stands for node4, zone 1;stage 2 of pipeline 1 (node 5) stands for node6, zone 2;"
check "zones: a bulk preemption of one zone is failed over" "$rc, $(field "$out" failovers)" \
    '0, "failovers": 2'
check "zones: the uninterrupted weights" "$(field "$out" params_crc32c)" \
    "$(field "$tmp/whole600" params_crc32c)"
check "zones: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# a policy that restarts a degraded pipeline: in the process (how often depends on when
# the trace's node7 comes and goes), or, without restarts, the run ends for --resume
cat >"$tmp/restart.lua" <<'LUA'
function on_degraded(m)
  return {reconfigure = "restart", reason = "stages on shadows: " .. m.degraded}
end
LUA
policy="$tmp/restart.lua"
out="$tmp/restart-in"
run "$out" run "$exp" --out "$out" "${eflb[@]}" -s train.steps=600 \
    -s "cloud={plugin: local, trace: $tmp/trace.csv}" \
    -s "policy={file: $policy}"
check "the policy's restart in the process: exit 0, restarted" \
    "$rc, $(field "$out" restarts | sed 's/[1-9][0-9]*$/N/')" '0, "restarts": N'
check "the policy's restart in the process: the uninterrupted weights" \
    "$(field "$out" params_crc32c)" "$(field "$tmp/whole600" params_crc32c)"
check "the policy's restart in the process: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"
out="$tmp/restart"
run "$out" run "$exp" --out "$out" "${eflb[@]}" -s train.steps=600 \
    -s "cloud={plugin: local, trace: $tmp/trace.csv}" -s pipeline.restarts=0 \
    -s "policy={file: $policy}"
check "the policy's restart: exit 1" "$rc" 1
check "the policy's restart: says so" "$(grep '^bivouac: error' "$out.err")" \
    "bivouac: error: the policy restarts the run from its last checkpoint: 1 stage ran in another stage's process for 1 step (no restart in the process: pipeline.restarts is 0; bivouac run --resume goes on)"
check "the policy's restart: in metrics.jsonl" \
    "$(grep -o '"event": "degraded", "decision": "restart", "reason": "[^"]*"' "$out/metrics.jsonl")" \
    '"event": "degraded", "decision": "restart", "reason": "stages on shadows: 1"'
run "$tmp/restart-resume" run --resume "$out" --quiet -s cloud.trace_start=3
check "the policy's restart: --resume ends with the uninterrupted weights" \
    "$rc: $(field "$out" params_crc32c)" "0: $(field "$tmp/whole600" params_crc32c)"
check "the policy's restart: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# a decision the event does not offer: a policy error, and the run goes on without it
cat >"$tmp/bad.lua" <<'LUA'
function on_preempted(m) return {reconfigure = "dance"} end
LUA
out="$tmp/bad-decision"
BIVOUAC_STAGE_FAULT=1:20:forward run "$out" run "$exp" --out "$out" "${eflb[@]}" \
    -s "policy={file: $tmp/bad.lua}"
check "an unknown decision: exit 0, failed over" "$rc, $(field "$out" failovers)" \
    '0, "failovers": 1'
check "an unknown decision: says so" "$(grep -c "^bivouac: warning: $tmp/bad.lua: on_preempted chose reconfigure = 'dance'; here it is one of failover, restart, reconfigure; the run goes on without the policy$" "$out.err")" 1

# the shadow's process, which runs the stage it took over too, lost: nothing keeps both,
# and the run restarts from its checkpoint of step 30 (the kill, at step 31's backward,
# loses no step the checkpoint holds), or without restarts ends
out="$tmp/consecutive"
BIVOUAC_STAGE_FAULT=1:10:forward,0:30:backward run "$out" run "$exp" --out "$out" "${eflb[@]}"
check "two consecutive stages lost: exit 0, a restart" "$rc, $(field "$out" restarts)" \
    '0, "restarts": 1'
check "two consecutive stages lost: says why, and restarts" \
    "$(grep -E '^bivouac: (warning: lost stage 0|info: restart)' "$out.err")" \
    "bivouac: warning: lost stage 0 of pipeline 0 (node 0 on localhost): it was killed by signal 9 (Killed); the process of stage 0 of pipeline 0 ran 2 stage nodes (a shadow and the stage it had taken over): no replica of them all is left
bivouac: info: restart 1: the run goes on from the checkpoint of step 30 (none lost)"
check "two consecutive stages lost: the uninterrupted weights and validation losses" \
    "$(field "$out" params_crc32c) $(vals "$out")" "$crc $(vals "$tmp/whole")"
check "two consecutive stages lost: the decision and the restart in metrics.jsonl" \
    "$(grep -oE '"event": "(preempted|restarted)", "[a-z]+": [^,]*' "$out/metrics.jsonl" | tr '\n' ' ')" \
    '"event": "preempted", "decision": "failover" "event": "preempted", "decision": "restart" "event": "restarted", "restarts": 1 '
check "two consecutive stages lost: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"
out="$tmp/consecutive-ends"
BIVOUAC_STAGE_FAULT=1:10:forward,0:30:backward run "$out" run "$exp" --out "$out" "${eflb[@]}" \
    -s pipeline.restarts=0
check "two consecutive stages lost, no restarts: exit 1" "$rc" 1
check "two consecutive stages lost, no restarts: says why" "$(grep '^bivouac: error' "$out.err")" \
    "bivouac: error: lost stage 0 of pipeline 0 (node 0 on localhost): it was killed by signal 9 (Killed); the process of stage 0 of pipeline 0 ran 2 stage nodes (a shadow and the stage it had taken over): no replica of them all is left (no restart in the process: pipeline.restarts is 0; bivouac run --resume goes on)"
check "two consecutive stages lost, no restarts: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"

BIVOUAC_STAGE_FAULT=1:10:sideways run "$tmp/bad" run "$exp" --out "$tmp/bad" "${eflb[@]}"
check "a fault that is not one: exit 1" "$rc" 1
check "a fault that is not one: says so" \
    "$(grep -c '^\[stage 1 of pipeline 0\] bivouac: error: BIVOUAC_STAGE_FAULT=1:10:sideways is not NODE:STEP:forward|backward|allreduce|prepared\[:hang\]\[,...\]$' "$tmp/bad.err")" 1
check "a fault that is not one: every stage ends as the run starts, which no restart follows" \
    "$(grep -c '^bivouac: error: .*(as the run started: no restart before its first step)$' "$tmp/bad.err")" 1
check "a fault that is not one: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
finish
