#!/usr/bin/env bash
# A pipeline's membership in etcd (cluster.membership: etcd, docs/membership.md), against
# an etcd server this test starts on loopback (Debian's etcd-server; skipped, saying so,
# where there is none). 2 pipelines of 3 stage processes, eflb, leases of 2 s:
#  - an uninterrupted run trains as without etcd, and leaves no key behind;
#  - a stage process stopped from outside (SIGSTOP), with pipeline.peer_timeout far longer
#    than the lease: etcd's watch finds it (its lease ran out), it is killed and failed
#    over, and the run ends with the uninterrupted run's weights;
#  - the coordinator stopped from outside: every stage process sees its lease run out and
#    ends by itself (no orphan), their socket directory removed;
#  - etcd out of reach at the start: exit 1 naming the URL; etcd stopped in the middle of a
#    run: exit 1, the coordinator saying it lost its lease;
#  - a sequence model's cluster with a graph key: refused with the key's position;
#  - a graph model's roles (2 graph servers, 2 parameter servers, 2 tensor workers): a
#    tensor worker stopped from outside is found by its lease (the run ends naming it),
#    and the roles end by themselves when the coordinator is stopped;
#  - nothing of any run is left (processes, socket directories).
# Every process (etcd too) is in a process group of its own, killed at the end whatever
# happens. Environment (set by ctest): BIVOUAC, BIVOUAC_SOURCE_DIR, BIVOUAC_DATA_DIR.
set -euo pipefail
: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with tinyshakespeare/)}"
BIVOUAC_SOURCE_DIR=${BIVOUAC_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$(dirname "$0")/check_lib.bash"
source "$(dirname "$0")/procs_lib.bash"

etcd_bin=$(command -v etcd || true)
if [ -z "$etcd_bin" ]; then
    echo "SKIP: no etcd here (Debian's etcd-server, which scripts/install-deps.sh installs)"
    exit 0
fi

procs_setup membership # $tmp; the runs' socket directories in $TMPDIR

# etcd on two free loopback ports, in a group of its own; sets url and etcd_group
start_etcd() {
    local port
    for _ in 1 2 3 4 5 6 7 8; do
        port=$((20000 + RANDOM % 30000))
        url="http://127.0.0.1:$port"
        rm -rf "$tmp/etcd"
        setsid bash -c 'echo $$ >"$0.pgid"; exec "$@"' "$tmp/etcd" "$etcd_bin" \
            --name bv --data-dir "$tmp/etcd" \
            --listen-client-urls "$url" --advertise-client-urls "$url" \
            --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
            --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
            --initial-cluster "bv=http://127.0.0.1:$((port + 1))" \
            >"$tmp/etcd.log" 2>&1 </dev/null &
        for _ in $(seq 100); do [ -s "$tmp/etcd.pgid" ] && break; sleep 0.05; done
        etcd_group=$(cat "$tmp/etcd.pgid")
        rm -f "$tmp/etcd.pgid"
        groups+=("$etcd_group")
        for _ in $(seq 100); do
            if curl -sf "$url/health" 2>/dev/null | grep -q '"health":"true"'; then
                return 0
            fi
            pgrep -g "$etcd_group" >/dev/null || break # the port was taken: another
            sleep 0.1
        done
        kill -KILL -- "-$etcd_group" 2>/dev/null || true
    done
    echo "FAIL: etcd did not start" >&2
    cat "$tmp/etcd.log" >&2
    exit 1
}

# the keys under bivouac/ in etcd
keys() {
    curl -s -X POST "$url/v3/kv/range" \
        -d '{"key":"Yml2b3VhYy8=","range_end":"Yml2b3VhYzA=","count_only":true}' |
        grep -o '"count":"[0-9]*"' | grep -o '[0-9]*' || echo 0
}

start_etcd
exp="$BIVOUAC_SOURCE_DIR/tests/data/transformer/tiny.yaml"
base=(--quiet -s train.steps=600 -s model.layers=4 -s model.dropout=0.1 -s train.batch=8
      -s pipeline.microbatches=2 -s pipeline.stages=3 -s pipeline.pipelines=2
      -s pipeline.peer_timeout=30 -s 'cloud={plugin: local}'
      -s 'resilience=[{plugin: redundancy}, {plugin: checkpoint, every: 10}]')
etcd=(-s "cluster={membership: etcd, etcd: \"$url\", lease: 2}")

run "$tmp/whole" run "$exp" --out "$tmp/whole" "${base[@]}" "${etcd[@]}"
check "uninterrupted: exit 0" "$rc" 0
[ "$rc" = 0 ] || cat "$tmp/whole.err" >&2
check "uninterrupted: says where its keys are" \
    "$(grep -c "^bivouac: info: membership: etcd at $url, the run's keys under bivouac/[^ ]*/, leases of 2 s$" "$tmp/whole.err")" 1
check "uninterrupted: no key left in etcd" "$(keys)" 0
check "uninterrupted: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# a stage process stopped from outside once 30 steps are done: found by its lease alone
# (peer_timeout 30 s, and the run ends well before a peer's wait would have run out)
out="$tmp/stage"
run_signal "$out" 30 STOP "--role stage --index 4" run "$exp" --out "$out" "${base[@]}" \
    "${etcd[@]}"
g=$pgid
check "stage stopped: exit 0" "$rc" 0
[ "$rc" = 0 ] || cat "$out.err" >&2
check "stage stopped: the uninterrupted weights" "$(field "$out" params_crc32c)" \
    "$(field "$tmp/whole" params_crc32c)"
check "stage stopped: one failover" "$(field "$out" failovers)" '"failovers": 1'
check "stage stopped: etcd found it" \
    "$(grep -cE '^bivouac: warning: lost stage 1 of pipeline 1 \(node [0-9]+ on localhost\): it let its etcd lease run out \(silent for 2 s\), and was killed$' "$out.err")" 1
check "stage stopped: not a peer's timeout (30 s)" \
    "$(grep -c 'hangs:\|no answer from\|within 30 s' "$out.err" || true)" 0
check "stage stopped: no key left in etcd" "$(keys)" 0
check "stage stopped: nothing left" "$(leftovers "$g")" "processes 0, socket dirs 0"

# the coordinator stopped from outside once it has trained: its node processes (whose
# command lines match PATTERN) end by themselves. NAME PATTERN COUNT ARGS...
coordinator_stopped() {
    local name=$1 pattern=$2 count=$3 out="$tmp/coordinator-$1" waiter g nodes
    shift 3
    (run "$out" run "$@" --out "$out"; echo "$rc" >"$out.rc") &
    waiter=$!
    until [ -s "$out.pgid" ]; do sleep 0.01; done
    g=$(cat "$out.pgid")
    groups+=("$g")
    for _ in $(seq 3000); do
        [ -f "$out/metrics.jsonl" ] && grep -q '"train_loss"' "$out/metrics.jsonl" && break
        sleep 0.01
    done
    pkill -STOP -g "$g" -f -- "bivouac run " || true
    nodes=$(pgrep -g "$g" -f -- "$pattern" | wc -l)
    for _ in $(seq 150); do
        [ "$(pgrep -g "$g" -f -- "$pattern" | wc -l)" = 0 ] && break
        sleep 0.1
    done
    check "$name, coordinator stopped: $count processes ran" "$nodes" "$count"
    check "$name, coordinator stopped: every one ended within 15 s" \
        "$(pgrep -g "$g" -f -- "$pattern" | wc -l)" 0
    check "$name, coordinator stopped: their socket directory removed" \
        "$(find "$TMPDIR" -mindepth 1 | wc -l)" 0
    kill -KILL -- "-$g" 2>/dev/null || true
    wait "$waiter" || true
    check "$name, coordinator stopped: nothing left once it is killed" "$(leftovers "$g")" \
        "processes 0, socket dirs 0"
}
coordinator_stopped pipeline "--role stage" 6 "$exp" "${base[@]}" -s train.steps=1000000 \
    "${etcd[@]}"

# etcd out of reach: a port where nothing listens
out="$tmp/noetcd"
run "$out" run "$exp" --out "$out" "${base[@]}" \
    -s 'cluster={membership: etcd, etcd: "http://127.0.0.1:1", lease: 2}'
check "etcd out of reach: exit 1" "$rc" 1
check "etcd out of reach: says so" "$(grep '^bivouac: error' "$out.err" | sed 's/: Failed to connect.*//')" \
    "bivouac: error: cluster.membership: etcd: cannot reach etcd at http://127.0.0.1:1"
check "etcd out of reach: nothing left" "$(leftovers "$pgid")" "processes 0, socket dirs 0"

# etcd stopped once 30 steps are done: the coordinator's lease is lost, the run ends
out="$tmp/etcdgone"
(run "$out" run "$exp" --out "$out" "${base[@]}" -s train.steps=1000000 "${etcd[@]}"
 echo "$rc" >"$out.rc") &
waiter=$!
for _ in $(seq 3000); do
    [ -f "$out/metrics.jsonl" ] && [ "$(grep -c '"train_loss"' "$out/metrics.jsonl")" -ge 30 ] && break
    sleep 0.01
done
kill -KILL -- "-$etcd_group"
for _ in $(seq 3000); do [ -s "$out.rc" ] && break; sleep 0.01; done
[ -s "$out.rc" ] || kill -KILL -- "-$(cat "$out.pgid")" 2>/dev/null || true
wait "$waiter" || true
g=$(cat "$out.pgid")
groups+=("$g")
check "etcd stopped: exit 1" "$(cat "$out.rc")" 1
check "etcd stopped: the coordinator says it lost its lease" "$(grep -c "^bivouac: error: the coordinator lost its etcd lease (etcd at $url out of reach for 2 s, cluster.lease): stopping the run" "$out.err")" 1
check "etcd stopped: nothing left" "$(leftovers "$g")" "processes 0, socket dirs 0"

# what cluster: may say
out="$tmp/graphkey"
run "$out" run "$exp" --out "$out" "${base[@]}" -s 'cluster={membership: etcd, graph_servers: 2}'
check "a graph key on a pipeline: exit 2" "$rc" 2
check "a graph key on a pipeline: where and why" "$(head -1 "$out.err")" \
    "<command line>:1:28: error: 'cluster.graph_servers' places a graph model's roles; the sequence engine's stages are set in 'pipeline:' (and run as processes on 'cloud:'), and read only cluster.membership, .etcd and .lease"
# a graph model's roles: a tensor worker stopped from outside is found by its lease alone
# (engine.peer_timeout 30 s: its heartbeats' silence would take that long), and the run
# ends naming it (graph roles have no failover); the coordinator stopped ends the roles
start_etcd # again: the one before was stopped above
export BIVOUAC_CACHE_DIR="$tmp/cache"
gexp="$BIVOUAC_SOURCE_DIR/configs/quickstart.yaml"
groles=(--quiet -s train.epochs=100000 -s policy.params.patience=100000
        -s engine.peer_timeout=30 -s 'cloud={plugin: local}'
        -s "cluster={graph_servers: 2, param_servers: 2, tensor_workers: 2, membership: etcd, etcd: \"$url\", lease: 2}")
out="$tmp/role"
run_signal "$out" 20 STOP "--role tensor --index 1" run "$gexp" --out "$out" "${groles[@]}"
g=$pgid
check "tensor worker stopped: exit 1" "$rc" 1
check "tensor worker stopped: etcd found it" \
    "$(grep '^bivouac: error' "$out.err" | sed 's/(node [0-9]*/(node N/')" \
    "bivouac: error: lost the tensor worker 1 (node N on localhost): it let its etcd lease run out (silent for 2 s), and was killed"
check "tensor worker stopped: nothing left" "$(leftovers "$g")" "processes 0, socket dirs 0"
coordinator_stopped graph "bivouac role " 6 "$gexp" "${groles[@]}"
finish
