#!/usr/bin/env bash
# Reconfigurations that change the layout (docs/redundancy.md#reconfigurations-that-change-the-layout):
# the shipped policy (scripts/lua/reconfigure.lua) lays the stage processes out afresh
# from a whole pipeline's state, and no step is lost:
#  - 1 pipeline of 3 stages, a stage lost and failed over: the degraded pipeline is laid
#    out as 2 stages on the 2 processes left (shrink P; the layers partitioned again);
#    the weights are the uninterrupted run's to the bit (the same operations, in the
#    same order, on other processes);
#  - 2 pipelines of 3 stages, two consecutive stages lost (no replica of both): laid out
#    as 1 pipeline of 3 stages, 4 microbatches, from the other pipeline's state, instead
#    of a restart from the last checkpoint; the weights are those of the uninterrupted
#    run resumed from the checkpoint before the loss as that layout (--resume -s
#    pipeline.pipelines=1 -s pipeline.microbatches=4), whether the loss comes in the
#    forward, the backward or the all-reduce; at the commit of a prepared step, the step
#    is applied and the layout changes after it;
#  - a spot trace's removal and addition: failed over, laid out afresh as 1 pipeline (2
#    nodes standing by), grown back to 2 pipelines when the trace adds a node, over ipc
#    and over links: tcp; one pipeline shrunk to 2 stages and grown back to 3, with the
#    uninterrupted weights; value.lua decides as reconfigure.lua there; capacity the
#    trace offers and takes back before a launch is not used;
#  - every run leaves nothing behind (processes, socket directories).
# Every run is in its own process group, killed at the end whatever happens.
# Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with tinyshakespeare/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/check_lib.bash"
source "$(dirname "$0")/procs_lib.bash"

procs_setup reconfigure # $tmp; the runs' socket directories in $TMPDIR

exp="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"
policy="$BIVOUAC_SOURCE_DIR/scripts/lua/reconfigure.lua"
base=(--quiet -s train.steps=60 -s model.layers=4 -s model.dropout=0.1 -s train.batch=8
      -s pipeline.microbatches=2 -s pipeline.stages=3 -s 'cloud={plugin: local}'
      -s 'resilience=[{plugin: redundancy}, {plugin: checkpoint, every: 10}]')
vals() { grep -o '"val_loss": [^,}]*' "$1/metrics.jsonl" | tr '\n' ' '; }
decisions() {
    grep -o '"event": "[a-z]*", "decision": "[a-z]*"' "$1/metrics.jsonl" | tr '\n' ' '
}
layout() {
    echo "$(field "$1" pipelines) $(field "$1" pipeline_stages) $(field "$1" microbatches)"
}
paused='the run paused [0-9]+\.[0-9]{2} s$'

# shrink P: stage 1 of the one pipeline lost at step 20's forward; its shadow takes it
# over, and at the next step the policy lays the 2 processes left out as 2 stages
one=("${base[@]}" -s pipeline.pipelines=1)
run "$tmp/whole1" run "$exp" --out "$tmp/whole1" "${one[@]}"
check "1 x 3 uninterrupted: exit 0" "$rc" 0
out="$tmp/shrink"
BIVOUAC_STAGE_FAULT=1:19:forward run "$out" run "$exp" --out "$out" "${one[@]}" \
    -s "policy={file: $policy}"
check "shrink: exit 0, one failover, one reconfiguration, no restart" \
    "$rc, $(field "$out" failovers), $(field "$out" reconfigurations), $(field "$out" restarts)" \
    '0, "failovers": 1, "reconfigurations": 1, "restarts": 0'
check "shrink: 1 pipeline of 2 stages, 2 microbatches" "$(layout "$out")" \
    '"pipelines": 1 "pipeline_stages": 2 "microbatches": 2'
check "shrink: the uninterrupted weights and validation losses" \
    "$(field "$out" params_crc32c) $(vals "$out")" \
    "$(field "$tmp/whole1" params_crc32c) $(vals "$tmp/whole1")"
check "shrink: every replica equal to its original" "$(field "$out" replicas_equal)" \
    '"replicas_equal": 2'
check "shrink: the decisions in metrics.jsonl" "$(decisions "$out")" \
    '"event": "preempted", "decision": "failover" "event": "degraded", "decision": "reconfigure" '
check "shrink: logged" "$(grep -cE "^bivouac: info: (policy: degraded: reconfigure \(2 of 2 active stages without a replica\)|1 stage ran in another stage's process for 1 step; the policy lays the stages out afresh: 1 x 2 stages \(were 1 x 3\)|reconfigured: 1 pipeline of 2 stages, 2 microbatches each \(were 1 of 3, 2 microbatches\), from pipeline 0's state; 0 nodes standing by; $paused)" "$out.err")" 3
check "shrink: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# two consecutive stages lost (stage 1 of pipeline 0 at step 11, then its shadow's process
# at step 31): pipeline 1 is whole, and the 4 processes left hold 1 pipeline of 3 stages
two=("${base[@]}" -s pipeline.pipelines=2)
out="$tmp/consecutive"
BIVOUAC_STAGE_FAULT=1:10:forward,0:30:backward run "$out" run "$exp" --out "$out" \
    "${two[@]}" -s "policy={file: $policy, params: {reconfigure_at: 1}}"
check "consecutive: exit 0, no restart, one reconfiguration" \
    "$rc, $(field "$out" restarts), $(field "$out" reconfigurations)" \
    '0, "restarts": 0, "reconfigurations": 1'
check "consecutive: 1 pipeline of 3 stages, 4 microbatches" "$(layout "$out")" \
    '"pipelines": 1 "pipeline_stages": 3 "microbatches": 4'
check "consecutive: the decisions in metrics.jsonl" "$(decisions "$out")" \
    '"event": "preempted", "decision": "failover" "event": "preempted", "decision": "reconfigure" '
check "consecutive: says why" "$(grep -E '^bivouac: (warning: lost stage 0|info: reconfigured)' "$out.err" | sed -E "s/$paused/PAUSE/")" \
    "bivouac: warning: lost stage 0 of pipeline 0 (node 0 on localhost): it was killed by signal 9 (Killed); the process of stage 0 of pipeline 0 ran 2 stage nodes (a shadow and the stage it had taken over): no replica of them all is left; the policy lays the stages out afresh: 1 x 3 stages (were 2 x 3)
bivouac: info: reconfigured: 1 pipeline of 3 stages, 4 microbatches each (were 2 of 3, 2 microbatches), from pipeline 1's state; 1 node standing by; PAUSE"
check "consecutive: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
# the same state and layout by hand: the uninterrupted run killed after step 35 (its last
# checkpoint: step 30), resumed as 1 pipeline of 4 microbatches
ref="$tmp/by-hand"
BIVOUAC_FAULT_KILL_AFTER_EPOCH=35 run "$ref" run "$exp" --out "$ref" "${two[@]}"
check "by hand: killed after step 35" "$rc" 137
run "$ref.resume" run --resume "$ref" --quiet -s pipeline.pipelines=1 \
    -s pipeline.microbatches=4
check "by hand: resumed, exit 0" "$rc" 0
check "consecutive: the weights and validation losses of the run resumed as 1 x 3" \
    "$(field "$out" params_crc32c) $(vals "$out")" "$(field "$ref" params_crc32c) $(vals "$ref")"
check "by hand: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
# the shadow's process killed at the other places of step 31: in its forward and entering
# the all-reduce, the same weights; at the commit of the prepared step, the step applied
# and then laid out afresh: the weights of the run resumed from step 31's checkpoint
# (checkpoints every step, for that one)
for what in forward allreduce; do
    out="$tmp/consecutive-$what"
    BIVOUAC_STAGE_FAULT=1:10:forward,0:30:$what run "$out" run "$exp" --out "$out" \
        "${two[@]}" -s "policy={file: $policy, params: {reconfigure_at: 1}}"
    check "consecutive, at the $what: laid out afresh, the weights resumed as 1 x 3" \
        "$rc, $(field "$out" reconfigurations), $(field "$out" params_crc32c)" \
        "0, \"reconfigurations\": 1, $(field "$ref" params_crc32c)"
done
every=(-s train.eval_interval=1 -s 'resilience=[{plugin: redundancy}, {plugin: checkpoint, every: 1, keep: 100}]')
out="$tmp/consecutive-prepared"
BIVOUAC_STAGE_FAULT=1:10:forward,0:30:prepared run "$out" run "$exp" --out "$out" \
    "${two[@]}" "${every[@]}" -s "policy={file: $policy, params: {reconfigure_at: 1}}"
ref="$tmp/by-hand-31"
BIVOUAC_FAULT_KILL_AFTER_EPOCH=33 run "$ref" run "$exp" --out "$ref" "${two[@]}" "${every[@]}"
rm -f "$ref"/checkpoints/ckpt-0000003[23].bvck
run "$ref.resume" run --resume "$ref" --quiet -s pipeline.pipelines=1 \
    -s pipeline.microbatches=4
check "consecutive, at the commit: step 31 applied, then laid out afresh" \
    "$rc, $(field "$out" reconfigurations), $(field "$out" params_crc32c) $(grep -c '^bivouac: info: resumed after step 31$' "$ref.resume.err" || true)" \
    "0, \"reconfigurations\": 1, $(field "$ref" params_crc32c) 1"
check "consecutive, at the commit: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"

# a spot trace: node2 (stage 1 of pipeline 0) removed at 1.5 s, node7 added at 3 s;
# failed over, laid out afresh as 1 pipeline (2 nodes standing by), and grown back to 2
# pipelines on node7 and the standby nodes
printf '0,add,node%d\n' 1 2 3 4 5 6 >"$tmp/trace.csv"
printf '1500,remove,node2\n3000,add,node7\n' >>"$tmp/trace.csv"
for links in ipc tcp; do
    out="$tmp/trace-$links"
    run "$out" run "$exp" --out "$out" "${two[@]}" -s train.steps=600 \
        -s pipeline.links=$links -s "cloud={plugin: local, trace: $tmp/trace.csv}" \
        -s "policy={file: $policy}"
    check "trace over $links: exit 0, one failover, two reconfigurations" \
        "$rc, $(field "$out" failovers), $(field "$out" reconfigurations)" \
        '0, "failovers": 1, "reconfigurations": 2'
    [ "$rc" = 0 ] || cat "$out.err" >&2
    check "trace over $links: 2 pipelines of 3 stages again, 2 microbatches" \
        "$(layout "$out")" '"pipelines": 2 "pipeline_stages": 3 "microbatches": 2'
    check "trace over $links: every replica equal to its original" \
        "$(field "$out" replicas_equal)" '"replicas_equal": 6'
    check "trace over $links: the decisions in metrics.jsonl" "$(decisions "$out")" \
        '"event": "preempted", "decision": "failover" "event": "degraded", "decision": "reconfigure" "event": "joined", "decision": "grow" '
    check "trace over $links: logged" "$(grep -E '^bivouac: info: reconfigured' "$out.err" | sed -E "s/$paused/PAUSE/")" \
        "bivouac: info: reconfigured: 1 pipeline of 3 stages, 4 microbatches each (were 2 of 3, 2 microbatches), from pipeline 0's state; 2 nodes standing by; PAUSE
bivouac: info: reconfigured: 2 pipelines of 3 stages, 2 microbatches each (were 1 of 3, 4 microbatches), from pipeline 0's state; 0 nodes standing by; PAUSE"
    check "trace over $links: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
done
# one pipeline on the same trace: shrunk to 2 stages on the 2 processes left, grown back
# to 3 when node7 comes (1200 steps: one pipeline runs them faster); P changes, D and M
# do not: the uninterrupted 1 x 3 run's weights
run "$tmp/whole1-long" run "$exp" --out "$tmp/whole1-long" "${one[@]}" -s train.steps=1200
out="$tmp/trace-one"
run "$out" run "$exp" --out "$out" "${one[@]}" -s train.steps=1200 \
    -s "cloud={plugin: local, trace: $tmp/trace.csv}" -s "policy={file: $policy}"
check "one pipeline on the trace: exit 0, shrunk and grown back to 1 x 3" \
    "$rc: $(decisions "$out")$(layout "$out")" \
    '0: "event": "preempted", "decision": "failover" "event": "degraded", "decision": "reconfigure" "event": "joined", "decision": "grow" "pipelines": 1 "pipeline_stages": 3 "microbatches": 2'
check "one pipeline on the trace: the uninterrupted weights and validation losses" \
    "$(field "$out" params_crc32c) $(vals "$out")" \
    "$(field "$tmp/whole1-long" params_crc32c) $(vals "$tmp/whole1-long")"
check "one pipeline on the trace: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"

# capacity the trace offers and takes back before anything is launched on it (node7 at 1
# and 1.2 s) is not there for the stage node2's removal puts on a shadow at 1.5 s: the
# policy (keeping a degraded pipeline) is asked nothing more, and nothing is launched
# that stands for no node of the trace
printf '0,add,node%d\n' 1 2 3 4 5 6 >"$tmp/gone.csv"
printf '1000,add,node7\n1200,remove,node7\n1500,remove,node2\n' >>"$tmp/gone.csv"
out="$tmp/withdrawn"
run "$out" run "$exp" --out "$out" "${two[@]}" -s train.steps=600 \
    -s "cloud={plugin: local, trace: $tmp/gone.csv}" \
    -s "policy={file: $policy, params: {reconfigure_at: 1}}"
check "capacity taken back: exit 0, one failover, nothing replaced" \
    "$rc, $(field "$out" failovers), $(field "$out" replaced): $(decisions "$out")" \
    '0, "failovers": 1, "replaced": 0: "event": "preempted", "decision": "failover" '
check "capacity taken back: logged" "$(grep -cE '^bivouac: info: local cloud: the trace removes node7 at 1 s \([0-9.]+ s into the run\): the node offered before is gone$' "$out.err")" 1
check "capacity taken back: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# value.lua decides a real run's events as reconfigure.lua does (it has no layout figures)
out="$tmp/value"
run "$out" run "$exp" --out "$out" "${two[@]}" -s train.steps=600 \
    -s "cloud={plugin: local, trace: $tmp/trace.csv}" \
    -s "policy={file: $BIVOUAC_SOURCE_DIR/scripts/lua/value.lua}"
check "value.lua: exit 0, the decisions of reconfigure.lua" "$rc: $(decisions "$out")" \
    '0: "event": "preempted", "decision": "failover" "event": "degraded", "decision": "reconfigure" "event": "joined", "decision": "grow" '
check "value.lua: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
finish
