#!/usr/bin/env bash
# A process that hangs: alive and answering nothing, as a frozen instance (SIGSTOP).
#
# A pipeline stage process (docs/redundancy.md#a-stage-that-hangs). Its neighbours' waits, or the coordinator's wait
# for its answer, run out after pipeline.peer_timeout; the coordinator asks every stage to
# answer (PING), terminates the process that does not, and treats it as lost:
#  - 2 pipelines of 3 stage processes, eflb, a checkpoint every 10 steps: a stage that
#    hangs in its forward pass (its neighbours time out), entering the all-reduce (its
#    ring peers time out), and after the step was prepared (only the coordinator waits
#    for it) is failed over, and the run ends with the uninterrupted run's weights;
#  - one stopped from outside at a moment the test does not choose, likewise;
#  - without redundancy the run restarts in the process from its last checkpoint, naming
#    the stage that hangs, within a bound (no hang), and ends with the uninterrupted
#    weights; with pipeline.restarts: 0 it ends (exit 1) naming the stage, for --resume;
#  - every run leaves nothing behind (processes, socket directories).
# A graph-engine role process (docs/cluster.md#a-role-that-hangs): its heartbeats stop, and
# after engine.peer_timeout the coordinator kills it and ends the run (exit 1) naming it:
# a tensor worker, a parameter server and a graph server, each stopped from outside.
# The hangs at chosen instructions come from BIVOUAC_STAGE_FAULT=NODE:STEP:WHAT:hang.
# Every run is in its own process group, killed at the end whatever happens.
# Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with tinyshakespeare/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/check_lib.bash"
source "$(dirname "$0")/procs_lib.bash"

procs_setup hang # $tmp; the runs' socket directories in $TMPDIR

exp="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"
base=(--quiet -s train.steps=60 -s model.layers=4 -s model.dropout=0.1 -s train.batch=8
      -s pipeline.microbatches=2 -s pipeline.stages=3 -s pipeline.pipelines=2
      -s pipeline.peer_timeout=2 -s 'cloud={plugin: local}')
eflb=("${base[@]}" -s 'resilience=[{plugin: redundancy}, {plugin: checkpoint, every: 10}]')

run "$tmp/whole" run "$exp" --out "$tmp/whole" "${eflb[@]}"
check "uninterrupted: exit 0" "$rc" 0
crc=$(field "$tmp/whole" params_crc32c)

# a hang, and what the log says of it: NAME FAULT STAGE SHADOW-STAGE SHADOW-PROCESS
hang() {
    local name=$1 fault=$2 victim=$3 shadow=$4 host=$5 out="$tmp/$1"
    BIVOUAC_STAGE_FAULT=$fault run "$out" run "$exp" --out "$out" "${eflb[@]}"
    check "$name: exit 0" "$rc" 0
    [ "$rc" = 0 ] || cat "$out.err" >&2
    check "$name: the uninterrupted weights" "$(field "$out" params_crc32c)" "$crc"
    check "$name: one failover" "$(field "$out" failovers)" '"failovers": 1'
    check "$name: the hang logged" "$(grep -cE "^bivouac: warning: $victim \(node [0-9]+ on localhost\) hangs: it answered nothing for 3 s, and was killed$" "$out.err")" 1
    check "$name: the failover logged" "$(grep -cE "^bivouac: info: failover: $shadow's process \(node $host\) adopts $victim from its replica$" "$out.err")" 1
    check "$name: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
}
hang forward 1:20:forward:hang "stage 1 of pipeline 0" "stage 0 of pipeline 0" 0
hang allreduce 4:20:allreduce:hang "stage 1 of pipeline 1" "stage 0 of pipeline 1" 3
hang prepared 2:20:prepared:hang "stage 2 of pipeline 0" "stage 1 of pipeline 0" 1

# stopped from outside, whenever the run is past step 30
out="$tmp/outside"
run_signal "$out" 30 STOP "--role stage --index 4" run "$exp" --out "$out" "${eflb[@]}" \
    -s train.steps=600
g=$pgid
check "stopped from outside: exit 0" "$rc" 0
[ "$rc" = 0 ] || cat "$out.err" >&2
run "$tmp/whole600" run "$exp" --out "$tmp/whole600" "${eflb[@]}" -s train.steps=600
check "stopped from outside: the uninterrupted weights" "$(field "$out" params_crc32c)" \
    "$(field "$tmp/whole600" params_crc32c)"
check "stopped from outside: one failover" "$(field "$out" failovers)" '"failovers": 1'
check "stopped from outside: said so" \
    "$(grep -cE '^bivouac: warning: stage 1 of pipeline 1 \(node [0-9]+ on localhost\) hangs: it answered nothing for 3 s, and was killed$' "$out.err")" 1
check "stopped from outside: nothing left" "$(leftovers "$g")" "processes 0, socket dirs 0"

# no redundancy: the run restarts from its last checkpoint naming the stage, well before
# any test timeout; without restarts it ends naming it
out="$tmp/alone"
start=$(date +%s)
BIVOUAC_STAGE_FAULT=1:20:forward:hang run "$out" run "$exp" --out "$out" "${base[@]}" \
    -s 'resilience=[{plugin: checkpoint, every: 10}]'
took=$(($(date +%s) - start))
check "no redundancy: exit 0" "$rc" 0
check "no redundancy: says which stage hangs" \
    "$(grep '^bivouac: warning: stage 1 of pipeline 0' "$out.err" | sed 's/(node [0-9]*/(node N/')" \
    "bivouac: warning: stage 1 of pipeline 0 (node N on localhost) hangs: it answered nothing for 3 s, and was killed"
check "no redundancy: restarts from the checkpoint of step 20" \
    "$(grep '^bivouac: info: restart' "$out.err")" \
    "bivouac: info: restart 1: the run goes on from the checkpoint of step 20 (none lost)"
check "no redundancy: one restart, the uninterrupted weights" \
    "$(field "$out" restarts) $(field "$out" params_crc32c)" "\"restarts\": 1 $crc"
check "no redundancy: ends within 60 s (two peer timeouts and the agreement take 5)" \
    "$([ "$took" -lt 60 ] && echo yes || echo "no ($took s)")" yes
check "no redundancy: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"
out="$tmp/alone-ends"
BIVOUAC_STAGE_FAULT=1:20:forward:hang run "$out" run "$exp" --out "$out" "${base[@]}" \
    -s 'resilience=[{plugin: checkpoint, every: 10}]' -s pipeline.restarts=0
check "no redundancy, no restarts: exit 1" "$rc" 1
check "no redundancy, no restarts: says which stage hangs" \
    "$(grep '^bivouac: error' "$out.err" | sed 's/(node [0-9]*/(node N/')" \
    "bivouac: error: stage 1 of pipeline 0 (node N on localhost) hangs: it answered nothing for 3 s, and was killed (no restart in the process: pipeline.restarts is 0; bivouac run --resume goes on)"
check "no redundancy, no restarts: nothing left" "$(leftovers "$pgid")" \
    "processes 0, socket dirs 0"

# ---- graph-engine roles ----
export BIVOUAC_CACHE_DIR="$tmp/cache"
gexp="$BIVOUAC_SOURCE_DIR/configs/quickstart.yaml"
groles=(--quiet -s train.epochs=100000 -s policy.params.patience=100000
        -s engine.peer_timeout=2 -s 'cloud={plugin: local}'
        -s 'cluster={graph_servers: 2, param_servers: 2, tensor_workers: 2}')
# NAME ROLE INDEX ITS-NAME-IN-THE-LOG: the role stopped once 20 epochs are done
role_hang() {
    local out="$tmp/role-$1" g
    run_signal "$out" 20 STOP "--role $2 --index $3" run "$gexp" --out "$out" "${groles[@]}"
    g=$pgid
    check "$1 hangs: exit 1 within 60 s" "$rc" 1
    check "$1 hangs: says which, and what was done" \
        "$(grep '^bivouac: error' "$out.err" | sed 's/(node [0-9]*/(node N/')" \
        "bivouac: error: the $4 (node N on localhost) hangs: no heartbeat for 2 s (engine.peer_timeout), and was killed"
    check "$1 hangs: nothing left" "$(leftovers "$g")" "processes 0, socket dirs 0"
}
role_hang "a tensor worker" tensor 1 "tensor worker 1"
role_hang "a parameter server" param 0 "parameter server 0"
role_hang "a graph server" graph 1 "graph server 1"
finish
