#!/usr/bin/env bash
# Roles on three hosts: three network namespaces this test makes (a bridge in the third,
# a veth pair from each of the others), a graph server and the parameter server in the
# first, a graph server in the second, the coordinator and the tensor workers in the
# third, over tcp:// with the run's CURVE keys (cluster.links: tcp). GCN on Cora ends with
# the weights of the same run on one host over ipc://, and so its accuracy; a process
# outside the run that connects to a graph server's port and sends frames is refused and
# counted, and the run is not disturbed; a role killed in a namespace is named with its
# host; with etcd in the third namespace (cluster.membership: etcd), a role stopped in
# another is found by its lease and named with its host. Skipped, saying so, where network
# namespaces cannot be made (not root, no `ip`).
# Environment (set by ctest): BIVOUAC, BIVOUAC_FRAME_FUZZ, BIVOUAC_DATA_DIR.
set -euo pipefail

: "${BIVOUAC:?BIVOUAC must name the bivouac binary}"
: "${BIVOUAC_FRAME_FUZZ:?BIVOUAC_FRAME_FUZZ must name the frame_fuzz tool}"
: "${BIVOUAC_DATA_DIR:?BIVOUAC_DATA_DIR must name the data directory (with cora/)}"
source "$(dirname "$0")/check_lib.bash"

ns_a=bvA$$ ns_b=bvB$$ ns_c=bvC$$
if ! command -v ip >/dev/null || ! ip netns add "$ns_a" 2>/dev/null; then
    echo "skipped: cannot make network namespaces here (needs root and iproute2's ip)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bivouac-cluster-hosts.XXXXXX")
groups=()
cleanup() {
    for g in "${groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
    for ns in "$ns_a" "$ns_b" "$ns_c"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
export BIVOUAC_CACHE_DIR=${BIVOUAC_CACHE_DIR:-$tmp/cache}
export TMPDIR="$tmp/sockets"
mkdir -p "$TMPDIR"

# 10.77.0.1 (a) and 10.77.0.2 (b) reach 10.77.0.3 (c, the bridge) and each other
ip netns add "$ns_b"
ip netns add "$ns_c"
ip -n "$ns_c" link add br0 type bridge
ip -n "$ns_c" addr add 10.77.0.3/24 dev br0
ip -n "$ns_c" link set br0 up
ip -n "$ns_c" link set lo up
n=1
for ns in "$ns_a" "$ns_b"; do
    ip -n "$ns" link add eth0 type veth peer name port$n netns "$ns_c"
    ip -n "$ns" addr add "10.77.0.$n/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns_c" link set "port$n" master br0
    ip -n "$ns_c" link set "port$n" up
    n=$((n + 1))
done

cat >"$tmp/gcn.yaml" <<EOF
name: gcn-hosts
model: {plugin: gcn, hidden: 16, layers: 2, dropout: 0.5}
dataset: {name: cora, normalize_features: true}
train: {epochs: 200, lr: 0.01, weight_decay: 5e-4, seed: 4}
compute: {plugin: cpu, threads: 1}
cluster: {graph_servers: 2, param_servers: 1, tensor_workers: 2}
cloud: {plugin: local}
EOF
hosts=(-s cluster.links=tcp -s cluster.address=10.77.0.3
    -s "cluster.graph_server_hosts=$ns_a@10.77.0.1, $ns_b@10.77.0.2"
    -s "cluster.param_server_hosts=$ns_a@10.77.0.1")
value() { field "$1" "$2" | cut -d" " -f2; } # check_lib's field, without the name

# the same run on one host over ipc: the reference
rc=0
"$BIVOUAC" run "$tmp/gcn.yaml" --out "$tmp/ipc" --quiet >/dev/null 2>"$tmp/ipc.err" || rc=$?
check "one host over ipc exits 0" "$rc" 0

# a run in the background, its process group recorded, started inside namespace c
start() { # out, extra args...
    local out=$1
    shift
    (
        set +e
        setsid bash -c 'echo $$ >"$0.pgid"; exec ip netns exec "$1" "$2" run "$3" --out "$0" "${@:4}"' \
            "$out" "$ns_c" "$BIVOUAC" "$tmp/gcn.yaml" "${hosts[@]}" "$@" >/dev/null 2>"$out.err"
        echo $? >"$out.rc"
    ) &
    until [ -s "$out.pgid" ]; do sleep 0.01; done
    groups+=("$(cat "$out.pgid")")
}
wait_end() { # out: waits for its end (up to 120 s)
    for _ in $(seq 12000); do [ -s "$1.rc" ] && return; sleep 0.01; done
}
in_ns() { # ns, pgid: processes of the run in that namespace
    local n=0
    for p in $(ip netns pids "$1"); do
        [ "$(ps -o pgid= -p "$p" 2>/dev/null | tr -d ' ')" = "$2" ] && n=$((n + 1))
    done
    echo "$n"
}

# ---- three hosts, and an intruder ----
out="$tmp/hosts"
start "$out" -s train.epochs=400
g=${groups[-1]}
until [ -f "$out/metrics.jsonl" ] || [ -s "$out.rc" ]; do sleep 0.05; done
check "graph server 0 and the parameter server run in namespace a" "$(in_ns "$ns_a" "$g")" 2
check "graph server 1 runs in namespace b" "$(in_ns "$ns_b" "$g")" 1
# the graph servers' ports, from the coordinator's log; the intruder sends from c
grep -o 'graph server [01]: node [0-9]* on [^,]*, inbox tcp://[0-9.:]*' "$out.err" >"$tmp/where" || true
check "the log says where each graph server runs" \
    "$(sed -E 's/node [0-9]+ //; s/:[0-9]+$//' "$tmp/where" | sort | tr '\n' ';')" \
    "graph server 0: on $ns_a, inbox tcp://10.77.0.1;graph server 1: on $ns_b, inbox tcp://10.77.0.2;"
grep -o 'tcp://10.77.0.1:[0-9]*' "$tmp/where" | sed 's/^/gs 0 /' >"$tmp/intruder.book"
intruder=$(ip netns exec "$ns_c" "$BIVOUAC_FRAME_FUZZ" "$tmp/intruder.book" 1 7 50 2>&1 || true)
check "the intruder tried to send" "$(echo "$intruder" | grep -c 'tcp://10.77.0.1')" 1
wait_end "$out"
check "the run on three hosts exits 0" "$(cat "$out.rc")" 0
refused=$(grep -o '\[graph server 0\] .*refused [0-9]* connection' "$out.err" | grep -o '[0-9]* connection' | cut -d' ' -f1 || true)
check "graph server 0 refused the intruder and counted it" "$([ "${refused:-0}" -ge 1 ] && echo yes || echo "no (${refused:-none})")" yes
check "graph server 0 let no frame of it through" "$(grep -c '\[graph server 0\] .*dropped' "$out.err" || true)" 0

# the same seed and epochs on one host over ipc
"$BIVOUAC" run "$tmp/gcn.yaml" --out "$tmp/ipc400" --quiet -s train.epochs=400 >/dev/null 2>&1 || true
check "three hosts end with the weights of one host" "$(value "$out" params_crc32c)" \
    "$(value "$tmp/ipc400" params_crc32c)"
check "and with its test accuracy" "$(value "$out" test_accuracy)" \
    "$(value "$tmp/ipc400" test_accuracy)"

# ---- 200 epochs, to compare with one process ----
out="$tmp/h200"
start "$out" --quiet
wait_end "$out"
check "200 epochs on three hosts exit 0" "$(cat "$out.rc")" 0
check "200 epochs: the weights of one host over ipc" "$(value "$out" params_crc32c)" \
    "$(value "$tmp/ipc" params_crc32c)"
acc=$(value "$out" test_accuracy)
check "200 epochs: test accuracy of a GCN on Cora (>= 0.77)" \
    "$(python3 -c "print('yes' if $acc >= 0.77 else 'no ($acc)')")" yes

# a run that trains for ever (its extra args), and once it has trained, SIG to its
# processes in namespace b (graph server 1); waits for its end. OUT SIG ARGS...
hit_in_b() {
    local out=$1 sig=$2 g
    shift 2
    start "$out" -s train.epochs=100000 --quiet "$@"
    g=${groups[-1]}
    until [ -s "$out/metrics.jsonl" ] || [ -s "$out.rc" ]; do sleep 0.05; done
    for p in $(ip netns pids "$ns_b"); do
        [ "$(ps -o pgid= -p "$p" | tr -d ' ')" = "$g" ] && kill "-$sig" "$p"
    done
    wait_end "$out"
}

# ---- a role killed on its host ----
out="$tmp/kill"
hit_in_b "$out" KILL
check "a killed graph server ends the run with exit 1" "$(cat "$out.rc")" 1
check "the error names it and its host" \
    "$(grep -c "^bivouac: error: lost the graph server 1 (node [0-9]* on $ns_b): it was killed by signal 9" "$out.err")" 1

# ---- a role that freezes on its host, found through etcd (cluster.membership: etcd) ----
# etcd runs in namespace c, on the bridge's address; the roles in a and b reach it there.
# Graph server 1 (namespace b) is stopped: its lease runs out in 2 s, long before its
# heartbeats' silence (engine.peer_timeout 30 s) would count.
if command -v etcd >/dev/null; then
    setsid bash -c 'echo $$ >"$0.pgid"; exec ip netns exec "$1" etcd --name bv --data-dir "$0" \
        --listen-client-urls http://10.77.0.3:2379 --advertise-client-urls http://10.77.0.3:2379 \
        --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster bv=http://127.0.0.1:2380' "$tmp/etcd" "$ns_c" >"$tmp/etcd.log" 2>&1 &
    until [ -s "$tmp/etcd.pgid" ]; do sleep 0.01; done
    groups+=("$(cat "$tmp/etcd.pgid")")
    for _ in $(seq 100); do
        ip netns exec "$ns_c" curl -sf http://10.77.0.3:2379/health 2>/dev/null |
            grep -q '"health":"true"' && break
        sleep 0.1
    done
    out="$tmp/etcd-stop"
    hit_in_b "$out" STOP -s engine.peer_timeout=30 -s cluster.membership=etcd \
        -s cluster.etcd=http://10.77.0.3:2379 -s cluster.lease=2
    check "a graph server stopped on its host: the run ends with exit 1" "$(cat "$out.rc")" 1
    check "etcd found it, on its host" \
        "$(grep -c "^bivouac: error: lost the graph server 1 (node [0-9]* on $ns_b): it let its etcd lease run out (silent for 2 s), and was killed" "$out.err")" 1
    kill -KILL -- "-$(cat "$tmp/etcd.pgid")" 2>/dev/null || true
else
    echo "skipped: the etcd case (no etcd: Debian's etcd-server)"
fi

left=0
for g in "${groups[@]}"; do
    n=$(pgrep -g "$g" | wc -l || true)
    left=$((left + n))
done
check "nothing of the runs is left: processes" "$left" 0
check "nothing of the runs is left: socket directories" "$(find "$TMPDIR" -mindepth 1 | wc -l)" 0
finish
